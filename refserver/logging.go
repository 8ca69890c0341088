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
// it remembers the status and size of the answer and collects what the
// request log line and the metrics report besides them: the route
// template (set by handle), the error code and its internal cause (never
// sent to clients).
type requestWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	route  string
	code   middleware.Code
	cause  error
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

func (w *requestWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *requestWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *requestWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logRequests writes one line per request: method, path, status, host,
// duration, bytes, and for errors the code (plus the internal cause for
// 5xx). Headers, signatures, keys and bodies are never logged. Handlers
// note an error's code and cause with noteError through the ResponseWriter,
// so the request and its context are not copied. With Metrics, it also
// counts the request by route template, method and status.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &requestWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		if m := s.cfg.Metrics; m != nil {
			m.ObserveRequest(sw.route, r.Method, sw.status)
		}
		level := slog.LevelInfo
		if sw.status >= 500 {
			level = slog.LevelError
		}
		if !s.log.Enabled(r.Context(), level) {
			return // e.g. --log-level warn: no per-request cost beyond this
		}
		attrs := make([]slog.Attr, 0, 8)
		attrs = append(attrs,
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", sw.status),
			slog.String("host", r.Host),
			slog.Duration("duration", time.Since(start)),
			slog.Int64("bytes", sw.bytes),
		)
		if sw.code != "" {
			attrs = append(attrs, slog.String("code", string(sw.code)))
		}
		if sw.status >= 500 && sw.cause != nil {
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
