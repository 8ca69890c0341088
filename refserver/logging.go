package refserver

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/agentid/agentid/middleware"
)

type requestInfoKey struct{}

// requestInfo collects what the request log line reports besides the
// response: the error code and its internal cause (never sent to clients).
type requestInfo struct {
	code  middleware.Code
	cause error
}

func requestInfoFrom(ctx context.Context) *requestInfo {
	info, _ := ctx.Value(requestInfoKey{}).(*requestInfo)
	return info
}

type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logRequests writes one line per request: method, path, status, host,
// duration, bytes, and for errors the code (plus the internal cause for
// 5xx). Headers, signatures, keys and bodies are never logged.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &requestInfo{}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), requestInfoKey{}, info)))
		if sw.status == 0 {
			sw.status = http.StatusOK
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
		if info.code != "" {
			attrs = append(attrs, slog.String("code", string(info.code)))
		}
		if sw.status >= 500 && info.cause != nil {
			attrs = append(attrs, slog.String("cause", info.cause.Error()))
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
			if info := requestInfoFrom(r.Context()); info != nil {
				info.code = middleware.CodeInternal
			}
			middleware.WriteError(w, fmt.Errorf("refserver: panic: %v", v))
		}()
		next.ServeHTTP(w, r)
	})
}
