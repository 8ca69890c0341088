package signer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// The tests of Transport's one retry, end to end over loopback HTTP,
// against the real verifier (package middleware) and proxy where a
// verifier is what answers.

const (
	retryOrigin  = "https://agent-0123456789abcdef01234567.agentid.example"
	retryService = "https://agentid.example"
)

var retryKey = signertest.Key(39)

// retryVerifier returns a verifier in Required mode that knows retryKey
// at retryOrigin, for any authority, configured further by mod.
func retryVerifier(t *testing.T, mod func(*middleware.Config)) *middleware.Verifier {
	t.Helper()
	keys := middleware.NewStaticKeys()
	keys.Add(retryOrigin, retryKey.Public)
	cfg := middleware.Config{Keys: keys, Mode: middleware.Required, AnyAuthority: true}
	if mod != nil {
		mod(&cfg)
	}
	v, err := middleware.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// counted serves h, counting requests and keeping each one's headers.
type counted struct {
	n       atomic.Int32
	mu      sync.Mutex
	headers []http.Header
}

func (c *counted) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.n.Add(1)
		c.mu.Lock()
		c.headers = append(c.headers, r.Header.Clone())
		c.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (c *counted) header(i int) http.Header {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.headers[i]
}

func serve(t *testing.T, h http.Handler) (*httptest.Server, *counted) {
	t.Helper()
	c := &counted{}
	srv := httptest.NewServer(c.wrap(h))
	t.Cleanup(srv.Close)
	return srv, c
}

func retryTransport(mod func(*signer.Transport)) *signer.Transport {
	tr := &signer.Transport{Key: retryKey, Options: signer.Options{SignatureAgent: retryOrigin}}
	if mod != nil {
		mod(tr)
	}
	return tr
}

func do(t *testing.T, tr http.RoundTripper, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func newReq(t *testing.T, method, u string, body io.Reader) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// throughProxy serves our reverse proxy, verifying with v, in front of up.
func throughProxy(t *testing.T, v *middleware.Verifier, up http.Handler) (*httptest.Server, *counted) {
	t.Helper()
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	upURL, _ := url.Parse(upSrv.URL)
	h, err := proxy.New(proxy.Config{Verifier: v, Upstream: upURL, Services: []string{retryService}})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, h)
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })

// TestTransportRetryThroughProxy: a required route whose verifier needs
// @path and content-digest passes on the first call of a Transport that
// signs only the default profile: the proxy's refusal names them, and the
// one re-signed retry carries them (and the body, again).
func TestTransportRetryThroughProxy(t *testing.T) {
	t.Parallel()
	var upBody atomic.Value
	v := retryVerifier(t, func(c *middleware.Config) { c.RequiredComponents = []string{"@path", "content-digest"} })
	px, seen := throughProxy(t, v, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		upBody.Store(string(b))
		fmt.Fprint(w, "ok")
	}))

	// Without the retry the route refuses: the test can fail.
	resp, _ := do(t, retryTransport(func(tr *signer.Transport) { tr.NoRetry = true }),
		newReq(t, http.MethodPost, px.URL+"/orders", strings.NewReader(`{"n":1}`)))
	if resp.StatusCode != http.StatusUnauthorized || seen.n.Load() != 1 {
		t.Fatalf("without retry: %s after %d requests, want 401 after 1", resp.Status, seen.n.Load())
	}
	if as := resp.Header.Get("Accept-Signature"); !strings.Contains(as, `"@path"`) || !strings.Contains(as, `"content-digest"`) {
		t.Fatalf("the refusal's Accept-Signature %q does not name the route's components", as)
	}

	seen.n.Store(0)
	resp, body := do(t, retryTransport(nil), newReq(t, http.MethodPost, px.URL+"/orders", strings.NewReader(`{"n":1}`)))
	if resp.StatusCode != http.StatusOK || body != "ok" {
		t.Fatalf("%s %q, want 200 ok", resp.Status, body)
	}
	if n := seen.n.Load(); n != 2 {
		t.Errorf("the proxy saw %d requests, want 2", n)
	}
	if got := upBody.Load(); got != `{"n":1}` {
		t.Errorf("the upstream got body %q", got)
	}
	if in := seen.header(2).Get("Signature-Input"); !strings.Contains(in, `"@path"`) || !strings.Contains(in, `"content-digest"`) || !strings.Contains(in, `"signature-agent";key="sig1"`) {
		t.Errorf("the retry's Signature-Input %q lacks a component", in)
	}
}

// TestTransportWaitsOutClockSkew: through our proxy, whose verifier's
// clock is 30 s behind the agent's, the first call passes: the proxy's
// refusal carries Signature-Error: error=clock_skew and Date (its
// verifier's clock), the Transport waits the 30 s between that Date and
// its created (on the test's clock) and sends the same created again.
func TestTransportWaitsOutClockSkew(t *testing.T) {
	t.Parallel()
	clock := signertest.NewClock(time.Unix(1_900_000_000, 250e6))
	v := retryVerifier(t, func(c *middleware.Config) { c.Now = clock.Now; c.Skew = 5 * time.Second })
	ahead := func() time.Time { return clock.Now().Add(30 * time.Second) }

	// What the proxy answers for a created 30 s in its verifier's future.
	px, _ := throughProxy(t, v, okHandler)
	resp, _ := do(t, retryTransport(func(tr *signer.Transport) { tr.Options.Now, tr.NoRetry = ahead, true }),
		newReq(t, http.MethodGet, px.URL+"/x", nil))
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Signature-Error") != "error=clock_skew" ||
		resp.Header.Get("Date") != clock.Now().UTC().Format(http.TimeFormat) {
		t.Fatalf("the proxy answers %s, Signature-Error %q, Date %q for a created in its future, want 401 clock_skew at %s",
			resp.Status, resp.Header.Get("Signature-Error"), resp.Header.Get("Date"), clock.Now().UTC().Format(http.TimeFormat))
	}

	px, seen := throughProxy(t, v, okHandler)
	var slept []time.Duration
	tr := retryTransport(func(tr *signer.Transport) {
		tr.Options.Now = ahead
		tr.Sleep = func(ctx context.Context, d time.Duration) error {
			slept = append(slept, d)
			clock.Advance(d)
			return nil
		}
	})
	resp, body := do(t, tr, newReq(t, http.MethodGet, px.URL+"/x", nil))
	if resp.StatusCode != http.StatusOK || body != "ok" {
		t.Fatalf("%s %q, want 200 ok", resp.Status, body)
	}
	if len(slept) != 1 || slept[0] != 30*time.Second {
		t.Errorf("slept %v, want [30s]", slept)
	}
	if n := seen.n.Load(); n != 2 {
		t.Errorf("the proxy saw %d requests, want 2", n)
	}
	first, second := seen.header(0).Get("Signature-Input"), seen.header(1).Get("Signature-Input")
	created := func(in string) string {
		_, s, _ := strings.Cut(in, ";created=")
		c, _, _ := strings.Cut(s, ";")
		return c
	}
	if created(first) != created(second) || created(first) == "" {
		t.Errorf("created %q then %q, want the same", created(first), created(second))
	}
	if nonce := func(in string) string { _, s, _ := strings.Cut(in, ";nonce="); return s }; nonce(first) == nonce(second) {
		t.Errorf("the retry reused the nonce")
	}
}

// TestTransportWaitsOutClockSkewRealTime: the same with a real wait, a
// verifier (the middleware) a little over a second behind.
func TestTransportWaitsOutClockSkewRealTime(t *testing.T) {
	t.Parallel()
	behind := func() time.Time { return time.Now().Add(-1500 * time.Millisecond) }
	v := retryVerifier(t, func(c *middleware.Config) { c.Now = behind; c.Skew = -1 })
	srv, seen := serve(t, v.Middleware(okHandler))
	start := time.Now()
	resp, body := do(t, retryTransport(nil), newReq(t, http.MethodGet, srv.URL+"/x", nil))
	if resp.StatusCode != http.StatusOK || body != "ok" {
		t.Fatalf("%s %q, want 200 ok", resp.Status, body)
	}
	if n := seen.n.Load(); n != 2 {
		t.Errorf("the server saw %d requests, want 2", n)
	}
	if el := time.Since(start); el < 500*time.Millisecond || el > 10*time.Second {
		t.Errorf("the call took %v", el)
	}
}

// challenger answers every request 401 with the headers hdr gives for
// the n-th request (from 1).
func challenger(hdr func(n int32) http.Header) (http.Handler, *atomic.Int32) {
	var n atomic.Int32
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		for k, vs := range hdr(n.Add(1)) {
			w.Header()[k] = vs
		}
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, "refused")
	}), &n
}

func acceptSig(v string) http.Header { return http.Header{"Accept-Signature": {v}} }

// TestTransportRetriesOnlyOnce: a server that always challenges, each time
// for something new, sees exactly two requests; so does one that always
// answers clock_skew (a hostile server: a verifier accepts the created
// it refused once its clock has reached it).
func TestTransportRetriesOnlyOnce(t *testing.T) {
	t.Parallel()
	h, _ := challenger(func(n int32) http.Header {
		return acceptSig(fmt.Sprintf(`sig1=("@authority" "x-%c")`, 'a'+n-1))
	})
	srv, seen := serve(t, h)
	req := newReq(t, http.MethodGet, srv.URL+"/", nil)
	for _, k := range []string{"X-A", "X-B", "X-C"} {
		req.Header.Set(k, "1")
	}
	resp, body := do(t, retryTransport(nil), req)
	if resp.StatusCode != http.StatusUnauthorized || body != "refused" || seen.n.Load() != 2 {
		t.Errorf("%s %q after %d requests, want 401 after 2", resp.Status, body, seen.n.Load())
	}

	var sleeps atomic.Int32
	skew, _ := challenger(func(int32) http.Header {
		return http.Header{"Signature-Error": {"error=clock_skew"}, "Date": {time.Now().Add(-10 * time.Second).UTC().Format(http.TimeFormat)}}
	})
	srv, seen = serve(t, skew)
	resp, _ = do(t, retryTransport(func(tr *signer.Transport) {
		tr.Sleep = func(context.Context, time.Duration) error { sleeps.Add(1); return nil }
	}), newReq(t, http.MethodGet, srv.URL+"/", nil))
	if resp.StatusCode != http.StatusUnauthorized || seen.n.Load() != 2 || sleeps.Load() != 1 {
		t.Errorf("clock_skew: %s after %d requests and %d waits, want 401 after 2 and 1", resp.Status, seen.n.Load(), sleeps.Load())
	}
}

// TestTransportIgnoresChallengeForAnotherHost: a Base that follows a
// redirect by itself gets a challenge from another host; it is not
// obeyed, and the answer is returned as it came.
func TestTransportIgnoresChallengeForAnotherHost(t *testing.T) {
	t.Parallel()
	h, _ := challenger(func(int32) http.Header { return acceptSig(`sig1=("@authority" "@path")`) })
	other, otherSeen := serve(t, h)
	first, firstSeen := serve(t, http.RedirectHandler(other.URL+"/elsewhere", http.StatusFound))
	follows := roundTripFunc(func(r *http.Request) (*http.Response, error) { return http.DefaultClient.Do(r) })
	resp, body := do(t, retryTransport(func(tr *signer.Transport) { tr.Base = follows }), newReq(t, http.MethodGet, first.URL+"/", nil))
	if resp.StatusCode != http.StatusUnauthorized || body != "refused" {
		t.Errorf("%s %q, want the other host's 401", resp.Status, body)
	}
	if a, b := firstSeen.n.Load(), otherSeen.n.Load(); a != 1 || b != 1 {
		t.Errorf("the asked host saw %d requests and the other %d, want 1 and 1", a, b)
	}

	// The same challenge from the host asked is obeyed.
	asked, askedSeen := serve(t, h)
	do(t, retryTransport(func(tr *signer.Transport) { tr.Base = follows }), newReq(t, http.MethodGet, asked.URL+"/", nil))
	if n := askedSeen.n.Load(); n != 2 {
		t.Errorf("the host asked saw %d requests, want 2", n)
	}
}

// TestTransportDoesNotResendUnreplayableBody: a body without GetBody is
// sent once; the refusal comes back whole.
func TestTransportDoesNotResendUnreplayableBody(t *testing.T) {
	t.Parallel()
	h, _ := challenger(func(int32) http.Header { return acceptSig(`sig1=("@authority" "content-digest")`) })
	srv, seen := serve(t, h)
	req := newReq(t, http.MethodPost, srv.URL+"/", io.NopCloser(strings.NewReader("stream")))
	if req.GetBody != nil {
		t.Fatal("the request can replay its body")
	}
	resp, body := do(t, retryTransport(nil), req)
	if resp.StatusCode != http.StatusUnauthorized || body != "refused" || seen.n.Load() != 1 {
		t.Errorf("%s %q after %d requests, want 401 refused after 1", resp.Status, body, seen.n.Load())
	}
	// With GetBody, the body is sent again.
	seen.n.Store(0)
	do(t, retryTransport(nil), newReq(t, http.MethodPost, srv.URL+"/", strings.NewReader("replayable")))
	if n := seen.n.Load(); n != 2 {
		t.Errorf("with GetBody the server saw %d requests, want 2", n)
	}
}

// TestTransportRetryConditions: what is and is not a challenge to act on.
func TestTransportRetryConditions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		hdr    http.Header
		want   int32 // requests the server sees
	}{
		{"401 adds @path", 401, acceptSig(`sig1=("@authority" "@path")`), 2},
		{"400 adds @method", 400, acceptSig(`sig1=("@method")`), 2},
		{"401 invalid_input", 401, http.Header{"Signature-Error": {`error=invalid_input, required_input=("@path")`}}, 2},
		{"403 with Signature-Error", 403, http.Header{"Signature-Error": {`error=invalid_input, required_input=("@path")`}}, 2},
		{"401 asks a nonce already sent", 401, acceptSig(`sig1=("@authority");nonce`), 1},
		{"401 asks a server nonce", 401, acceptSig(`sig1=("@authority");nonce="n-1"`), 2},
		{"403 without Signature-Error", 403, acceptSig(`sig1=("@authority" "@path")`), 1},
		{"429", 429, acceptSig(`sig1=("@authority" "@path")`), 1},
		{"500", 500, http.Header{"Signature-Error": {`error=invalid_input, required_input=("@path")`}}, 1},
		{"401 adds nothing", 401, acceptSig(`sig1=("@authority" "signature-agent";key="sig1");created;keyid;tag="web-bot-auth"`), 1},
		{"401 no challenge", 401, http.Header{"Www-Authenticate": {"Bearer"}}, 1},
		{"401 other code", 401, http.Header{"Signature-Error": {`error=unknown_key`}}, 1},
		{"401 header not in the request", 401, acceptSig(`sig1=("@authority" "x-not-sent")`), 1},
		{"401 signature-key", 401, http.Header{"Signature-Error": {`error=invalid_input, required_input=("@method" "signature-key")`}}, 1},
		{"401 query param absent", 401, acceptSig(`sig1=("@query-param";name="nope")`), 1},
		{"401 another tag", 401, acceptSig(`sig1=("@path");tag="app-123"`), 1},
		{"401 another algorithm", 401, acceptSig(`sig1=("@path");alg="rsa-pss-sha512"`), 1},
		{"401 malformed", 401, acceptSig(`sig1=("@path"`), 1},
		{"401 member for others", 401, acceptSig(`x=("@path");tag="other"`), 1},
		{"401 label not a key", 401, acceptSig(`sig1=("@path"), *=("@path")`), 2},
		{"clock_skew without Date", 401, http.Header{"Signature-Error": {"error=clock_skew"}, "Date": {""}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, seen := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, vs := range tt.hdr {
					w.Header()[k] = vs
				}
				w.WriteHeader(tt.status)
			}))
			resp, _ := do(t, retryTransport(nil), newReq(t, http.MethodGet, srv.URL+"/p?x=1", nil))
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if n := seen.n.Load(); n != tt.want {
				t.Errorf("the server saw %d requests, want %d", n, tt.want)
			}
		})
	}
}

// TestTransportSkewWaitHonoursContext: through a verifier 50 s behind, a
// cancelled call ends the wait at once, and a deadline before the wait's
// end means no wait at all.
func TestTransportSkewWaitHonoursContext(t *testing.T) {
	t.Parallel()
	v := retryVerifier(t, func(c *middleware.Config) {
		c.Now = func() time.Time { return time.Now().Add(-50 * time.Second) }
		c.Skew = -1
	})
	srv, seen := serve(t, v.Middleware(okHandler))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := (&http.Client{Transport: retryTransport(nil)}).Do(newReq(t, http.MethodGet, srv.URL+"/", nil).WithContext(ctx))
	if !errors.Is(err, context.Canceled) || time.Since(start) > 10*time.Second {
		t.Errorf("err %v after %v, want context.Canceled at once", err, time.Since(start))
	}
	if n := seen.n.Load(); n != 1 {
		t.Errorf("the server saw %d requests, want 1", n)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	seen.n.Store(0)
	start = time.Now()
	resp, _ := do(t, retryTransport(nil), newReq(t, http.MethodGet, srv.URL+"/", nil).WithContext(ctx))
	if resp.StatusCode != http.StatusUnauthorized || seen.n.Load() != 1 || time.Since(start) > 4*time.Second {
		t.Errorf("%s after %d requests and %v, want the refusal at once", resp.Status, seen.n.Load(), time.Since(start))
	}
}

// TestTransportSignWhenChallenged: the request goes unsigned; the
// verifier's challenge makes the Transport sign it and send it once more.
func TestTransportSignWhenChallenged(t *testing.T) {
	t.Parallel()
	v := retryVerifier(t, func(c *middleware.Config) { c.RequiredComponents = []string{"@method"} })
	srv, seen := serve(t, v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })))
	tr := retryTransport(func(tr *signer.Transport) { tr.SignWhenChallenged = true })
	resp, body := do(t, tr, newReq(t, http.MethodPut, srv.URL+"/x", strings.NewReader("b")))
	if resp.StatusCode != http.StatusOK || body != "ok" || seen.n.Load() != 2 {
		t.Fatalf("%s %q after %d requests, want 200 ok after 2", resp.Status, body, seen.n.Load())
	}
	if s := seen.header(0).Get("Signature"); s != "" {
		t.Errorf("the first request was signed: %q", s)
	}
	if in := seen.header(1).Get("Signature-Input"); !strings.Contains(in, `"@method"`) {
		t.Errorf("the retry's Signature-Input %q does not cover @method", in)
	}

	// An answer that is no challenge is returned after one unsigned request.
	open, openSeen := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "open") }))
	if resp, body := do(t, tr, newReq(t, http.MethodGet, open.URL, nil)); resp.StatusCode != 200 || body != "open" || openSeen.n.Load() != 1 || openSeen.header(0).Get("Signature") != "" {
		t.Errorf("%s %q after %d requests", resp.Status, body, openSeen.n.Load())
	}
}

// TestTransportRetryDoesNotReadRefusalBody: a refusal whose body trickles
// forever does not hold the retry.
func TestTransportRetryDoesNotReadRefusalBody(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv, seen := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Signature-Input") != "" && strings.Contains(r.Header.Get("Signature-Input"), `"@path"`) {
			fmt.Fprint(w, "ok")
			return
		}
		w.Header().Set("Accept-Signature", `sig1=("@authority" "@path")`)
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, "r")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	client := &http.Client{Transport: retryTransport(nil), Timeout: 10 * time.Second}
	resp, err := client.Get(srv.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || string(b) != "ok" || seen.n.Load() != 2 {
		t.Errorf("%s %q after %d requests, want 200 ok after 2", resp.Status, b, seen.n.Load())
	}
}
