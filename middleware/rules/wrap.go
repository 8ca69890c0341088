package rules

import (
	"context"
	"net/http"

	"github.com/agentid/agentid/middleware"
)

// slotKey is the context key of a request's *slot.
type slotKey struct{}

// slot carries one request's decision from OnResult (inside the wrapped
// handler) to the writer and the transport. It is used by the request's
// goroutine only.
type slot struct {
	decided bool
	d       Decision
	res     middleware.Result
}

func slotFrom(ctx context.Context) *slot {
	s, _ := ctx.Value(slotKey{}).(*slot)
	return s
}

// OnResult decides the request res describes, when it came through Wrap.
// Install it as (or call it from) the verifier's Config.OnResult; the
// verifier should run in Observe mode.
func (g *Gate) OnResult(res middleware.Result) {
	if res.Request == nil {
		return
	}
	s := slotFrom(res.Request.Context())
	if s == nil || s.decided {
		return
	}
	s.decided = true
	s.res = res
	s.d = g.Decide(res.Request, &res)
}

// Wrap returns next (a handler that verifies each request itself, with
// OnResult installed on its verifier) behind the rules: when OnResult
// refused the request, whatever next writes is replaced by the refusal;
// otherwise the rate-limit headers are added to next's answer. A request
// next answers without verifying (a malformed forward-auth subrequest) is
// passed through unchanged.
func (g *Gate) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := &slot{}
		gw := &writer{StatusWriter: middleware.StatusWriter{ResponseWriter: w}, g: g, s: s, r: r}
		next.ServeHTTP(gw, r.WithContext(context.WithValue(r.Context(), slotKey{}, s)))
		if s.decided && s.d.Err != nil && !gw.wrote() {
			gw.refuse()
		}
	})
}

// Transport returns base (nil: http.DefaultTransport) refusing, without
// any I/O, the requests the gate refused: the upstream never sees them.
func (g *Gate) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return roundTripper{base}
}

type roundTripper struct{ base http.RoundTripper }

func (t roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if s := slotFrom(req.Context()); s != nil && s.decided && s.d.Err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errRefused
	}
	return t.base.RoundTrip(req)
}

// writer replaces a refused request's answer by the refusal. What reaches
// the client (the refusal, or next's answer) goes through the embedded
// StatusWriter, which records its status and provides Unwrap; the methods
// below only decide what gets through.
type writer struct {
	middleware.StatusWriter
	g       *Gate
	s       *slot
	r       *http.Request
	refused bool // the refusal was written
	scratch http.Header
}

// wrote reports whether the refusal, or the first status, was written.
func (w *writer) wrote() bool { return w.refused || w.Status != 0 }

func (w *writer) refusing() bool { return w.s.decided && w.s.d.Err != nil }

func (w *writer) refuse() {
	w.refused = true
	w.g.write(&w.StatusWriter, w.r, w.s.d)
	if f := w.g.cfg.OnRefuse; f != nil {
		f(w.r, &w.s.res, w.s.d.Err, w.Status)
	}
}

// Header returns a scratch header for a refused request, so that nothing
// the wrapped handler sets reaches the client.
func (w *writer) Header() http.Header {
	if w.refusing() {
		if w.scratch == nil {
			w.scratch = http.Header{}
		}
		return w.scratch
	}
	return w.ResponseWriter.Header()
}

func (w *writer) WriteHeader(code int) {
	if w.refusing() {
		if !w.wrote() {
			w.refuse()
		}
		return
	}
	if !w.wrote() && w.s.decided {
		w.s.d.Limit.SetHeaders(w.ResponseWriter.Header())
	}
	w.StatusWriter.WriteHeader(code)
}

func (w *writer) Write(b []byte) (int, error) {
	if w.refusing() {
		if !w.wrote() {
			w.refuse()
		}
		return len(b), nil
	}
	if !w.wrote() {
		w.WriteHeader(http.StatusOK)
	}
	return w.StatusWriter.Write(b)
}

// Flush implements http.Flusher (streamed answers).
func (w *writer) Flush() {
	if w.refusing() {
		return
	}
	if !w.wrote() {
		w.WriteHeader(http.StatusOK)
	}
	w.StatusWriter.Flush()
}
