package middleware

import "net/http"

// StatusWriter is an http.ResponseWriter that remembers the status and the
// number of body bytes written, for request logs, metrics and proxies: the
// one wrapper of the module (refserver, the proxy and rules use it). The
// first status written wins; a body written without one is 200; Status is
// 0 until the header was written. Flush passes through, and Unwrap lets
// http.ResponseController reach the underlying writer's other abilities
// (Hijack, deadlines).
type StatusWriter struct {
	http.ResponseWriter
	// Status is the status written, 0 until something was.
	Status int
	// Bytes is the number of body bytes written.
	Bytes int64
}

// WriteHeader records code and passes it on.
func (w *StatusWriter) WriteHeader(code int) {
	if w.Status == 0 {
		w.Status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write counts b and passes it on.
func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.Bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher when the underlying writer does (streamed
// answers).
func (w *StatusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		if w.Status == 0 {
			w.Status = http.StatusOK
		}
		f.Flush()
	}
}
