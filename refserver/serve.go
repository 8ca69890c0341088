package refserver

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/metrics"
)

// handler is a route's handler: it writes the answer, or returns the error
// to answer with (a *middleware.Error carries the code, hence the status,
// and the client message; a *refusal is a verifier's refusal), which serve
// writes. Anything else is 500 internal with no detail for the client.
type handler func(http.ResponseWriter, *http.Request) error

// serve is h as the http.Handler of the route named route (the path
// template, or metrics.Unmatched): the one place a request is answered
// and accounted for. It starts the request's server span, runs h, writes
// the error h returns (writeError), turns a panic into 500 internal, then
// ends the span, writes the request's log line and, with Metrics, counts
// the request by route, method and status.
func (s *Server) serve(route string, h handler) http.Handler {
	spanRoute := route // http.route: none when no route matched
	if route == metrics.Unmatched {
		spanRoute = ""
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		r, tr := s.tel.Start(r, spanRoute)
		sw := &middleware.StatusWriter{ResponseWriter: w}
		var e *middleware.Error
		if err := s.run(h, sw, r); err != nil {
			e = writeError(sw, r, err)
		}
		if sw.Status == 0 {
			sw.Status = http.StatusOK
		}
		if m := s.cfg.Metrics; m != nil {
			m.ObserveRequest(route, r.Method, sw.Status)
		}
		tr.End(sw.Status, nil)
		s.logRequest(r, sw, e, time.Since(start))
	})
}

// run calls h; a panic in h is logged (value and stack) and returned as
// 500 internal, except http.ErrAbortHandler, which goes on up.
func (s *Server) run(h handler, w http.ResponseWriter, r *http.Request) (err error) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler {
			panic(v)
		}
		s.log.LogAttrs(r.Context(), slog.LevelError, "panic", slog.String("panic", fmt.Sprint(v)), slog.String("stack", string(debug.Stack())))
		err = errPanic
	}()
	return h(w, r)
}

// errPanic is the answer to a handler's panic (already logged by run).
var errPanic = &middleware.Error{Code: middleware.CodeInternal, Message: "internal error"}

// refusal is a verification refusal by v: writeError writes it with v's
// error writer, which adds Accept-Signature.
type refusal struct {
	v   *middleware.Verifier
	err *middleware.Error
}

func (e *refusal) Error() string { return e.err.Error() }
func (e *refusal) Unwrap() error { return e.err }

// refuse returns res's refusal by v as an error, or nil when res passed.
func refuse(v *middleware.Verifier, res *middleware.Result) error {
	if res.Outcome == middleware.OutcomeVerified {
		return nil
	}
	return &refusal{v: v, err: res.Err}
}

// writeError writes err as the error answer to r (the JSON error body, or
// Problem Details when r's Accept prefers them), the only place this
// package writes one, and returns it as the *middleware.Error the log line
// reports (its code, and for a 5xx its internal cause).
func writeError(w http.ResponseWriter, r *http.Request, err error) *middleware.Error {
	e := middleware.AsError(err)
	if rf := (*refusal)(nil); errors.As(err, &rf) {
		rf.v.WriteError(w, r, e)
	} else {
		middleware.WriteError(w, r, e)
	}
	return e
}

// logRequest writes one line per request: method, path, status, host,
// duration, bytes, for an error its code (plus the internal cause for a
// 5xx) and, under a span, its trace_id. Headers, signatures, keys and
// bodies are never logged.
func (s *Server) logRequest(r *http.Request, sw *middleware.StatusWriter, e *middleware.Error, d time.Duration) {
	level := slog.LevelInfo
	if sw.Status >= 500 {
		level = slog.LevelError
	}
	if !s.log.Enabled(r.Context(), level) {
		return // e.g. --log-level warn: no per-request cost beyond this
	}
	attrs := make([]slog.Attr, 0, 9)
	attrs = append(attrs,
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", sw.Status),
		slog.String("host", r.Host),
		slog.Duration("duration", d),
		slog.Int64("bytes", sw.Bytes),
	)
	if e != nil {
		attrs = append(attrs, slog.String("code", string(e.Code)))
		if sw.Status >= 500 && e.Err != nil {
			attrs = append(attrs, slog.String("cause", e.Err.Error()))
		}
	}
	if sc := trace.SpanContextFromContext(r.Context()); sc.HasTraceID() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
	}
	s.log.LogAttrs(r.Context(), level, "request", attrs...)
}
