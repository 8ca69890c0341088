package refserver

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/agentid/agentid/middleware"
)

// requestWriter is the ResponseWriter of one request under logRequests:
// a middleware.StatusWriter (status and size of the answer) that also
// collects what the request log line and the metrics report besides them:
// the route template (set by handle), the error code and its internal
// cause (never sent to clients).
type requestWriter struct {
	middleware.StatusWriter
	route string
	code  middleware.Code
	cause error
}

// requestWriterOf finds logRequests' writer under w (through the Unwrap
// methods of the writers wrapped around it), or nil.
func requestWriterOf(w http.ResponseWriter) *requestWriter {
	for {
		switch t := w.(type) {
		case *requestWriter:
			return t
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return nil
		}
	}
}

// logRequests writes one line per request: method, path, status, host,
// duration, bytes, and for errors the code (plus the internal cause for
// 5xx). Headers, signatures, keys and bodies are never logged. Handlers
// note an error's code and cause with noteError through the ResponseWriter,
// so the request and its context are not copied. With Metrics, it also
// counts the request by route template, method and status.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &requestWriter{StatusWriter: middleware.StatusWriter{ResponseWriter: w}}
		next.ServeHTTP(sw, r)
		if sw.Status == 0 {
			sw.Status = http.StatusOK
		}
		if m := s.cfg.Metrics; m != nil {
			m.ObserveRequest(sw.route, r.Method, sw.Status)
		}
		level := slog.LevelInfo
		if sw.Status >= 500 {
			level = slog.LevelError
		}
		if !s.log.Enabled(r.Context(), level) {
			return // e.g. --log-level warn: no per-request cost beyond this
		}
		attrs := make([]slog.Attr, 0, 8)
		attrs = append(attrs,
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", sw.Status),
			slog.String("host", r.Host),
			slog.Duration("duration", time.Since(start)),
			slog.Int64("bytes", sw.Bytes),
		)
		if sw.code != "" {
			attrs = append(attrs, slog.String("code", string(sw.code)))
		}
		if sw.Status >= 500 && sw.cause != nil {
			attrs = append(attrs, slog.String("cause", sw.cause.Error()))
		}
		s.log.LogAttrs(r.Context(), level, "request", attrs...)
	})
}

// recoverPanics turns a handler panic into 500 internal (no detail to the
// client; the panic value and stack go to the log).
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.LogAttrs(r.Context(), slog.LevelError, "panic", slog.String("panic", fmt.Sprint(v)), slog.String("stack", string(debug.Stack())))
			if rw := requestWriterOf(w); rw != nil {
				rw.code = middleware.CodeInternal
			}
			middleware.WriteError(w, fmt.Errorf("refserver: panic: %v", v))
		}()
		next.ServeHTTP(w, r)
	})
}
