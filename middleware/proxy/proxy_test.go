package proxy_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

const (
	testUID    = "agent-0123456789abcdef01234567"
	testOrigin = "https://" + testUID + ".agentid.example"
	// testService is the agentid service testOrigin's agent belongs to.
	testService = "https://agentid.example"
)

var (
	key     = signertest.Key(0x5a)
	testNow = time.Unix(1767225600, 0)
)

func clock() time.Time { return testNow }

// upstream is an echo service that records the requests it got.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []http.Header
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Clone())
		u.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "upstream saw "+r.Method+" "+r.Host+r.URL.RequestURI())
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) requests() []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.seen...)
}

// newProxy starts the proxy in front of up (or in forward-auth mode behind
// Traefik when up is nil) with the verifier in mode.
func newProxy(t *testing.T, mode middleware.Mode, up *upstream, log io.Writer) *httptest.Server {
	t.Helper()
	cfg := proxy.Config{ForwardAuth: proxy.FrontTraefik}
	if up != nil {
		cfg.ForwardAuth = ""
		cfg.Upstream, _ = url.Parse(up.URL)
	}
	return startProxyConfig(t, mode, cfg, log)
}

// startProxyConfig starts a proxy with cfg: unless cfg has one, a verifier
// in mode knowing key at testOrigin; unless cfg names some, testOrigin's
// service.
func startProxyConfig(t *testing.T, mode middleware.Mode, cfg proxy.Config, log io.Writer) *httptest.Server {
	t.Helper()
	if cfg.Verifier == nil {
		cfg.Verifier = newVerifier(t, mode)
	}
	if cfg.Services == nil {
		cfg.Services = []string{testService}
	}
	if log != nil {
		cfg.AccessLog = slog.New(slog.NewJSONHandler(log, nil))
	}
	h, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// newVerifier returns a verifier in mode that knows key at testOrigin.
func newVerifier(t *testing.T, mode middleware.Mode) *middleware.Verifier {
	t.Helper()
	keys := middleware.NewStaticKeys()
	keys.Add(testOrigin, key.Public)
	v, err := middleware.New(middleware.Config{Keys: keys, Now: clock, Mode: mode, Authorities: []string{"api.example.com", "other.example"}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// signed returns a GET to the proxy for host api.example.com, signed by key.
func signed(t *testing.T, proxyURL string, mod func(*signer.Options)) *http.Request {
	t.Helper()
	r, err := http.NewRequest(http.MethodGet, proxyURL+"/things?x=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Host = "api.example.com"
	o := signer.Options{SignatureAgent: testOrigin, Now: clock}
	if mod != nil {
		mod(&o)
	}
	if err := signer.Sign(r, key, o); err != nil {
		t.Fatal(err)
	}
	return r
}

func unsigned(t *testing.T, proxyURL string) *http.Request {
	r, err := http.NewRequest(http.MethodGet, proxyURL+"/things", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Host = "api.example.com"
	return r
}

func do(t *testing.T, r *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// spoof adds identity headers a client must never be able to set.
func spoof(r *http.Request) *http.Request {
	r.Header.Set("X-Agent-Uid", "agent-ffffffffffffffffffffffff")
	r.Header.Set("x-agent-id", "https://evil.example")
	r.Header.Set("X-AGENT-VERDICT", "verified")
	r.Header.Set("X-Agent-Whatever", "1")
	r.Header["X_Agent_Outcome"] = []string{"verified"}
	r.Header.Set("X-Agent-Reason", "verified")
	return r
}

func TestReverseProxyModes(t *testing.T) {
	for _, mode := range []middleware.Mode{middleware.Required, middleware.Optional, middleware.Observe} {
		t.Run(mode.String(), func(t *testing.T) {
			up := newUpstream(t)
			var log bytes.Buffer
			px := newProxy(t, mode, up, &log)

			// A verified request is forwarded with the identity, and no
			// header the client sent under X-Agent-* survives.
			good := spoof(signed(t, px.URL, nil))
			replay := good.Clone(good.Context())
			resp, body := do(t, good)
			if resp.StatusCode != 200 || body != "upstream saw GET api.example.com/things?x=1" {
				t.Fatalf("verified: %d %q", resp.StatusCode, body)
			}
			got := up.requests()[0]
			want := map[string]string{"X-Agent-Verdict": "verified", "X-Agent-Outcome": "verified", "X-Agent-Id": testOrigin, "X-Agent-Uid": testUID, "X-Agent-Key-Id": key.KeyID()}
			for k, v := range want {
				if got.Get(k) != v {
					t.Errorf("upstream %s = %q, want %q", k, got.Get(k), v)
				}
			}
			underscored := "X_Agent_Outcome" // a raw, non-canonical key: the spelling nginx and CGI turn into X-Agent-Outcome
			if got.Get("X-Agent-Whatever") != "" || got.Get("X-Agent-Reason") != "" || len(got.Values("X-Agent-Uid")) != 1 || len(got.Values("X-Agent-Outcome")) != 1 || got[underscored] != nil {
				t.Errorf("spoofed headers reached the upstream: %v", got)
			}

			// A replay of that request.
			n := len(up.requests())
			resp, body = do(t, replay)
			forwarded := len(up.requests()) > n
			if mode == middleware.Observe {
				last := up.requests()[len(up.requests())-1]
				if !forwarded || last.Get("X-Agent-Verdict") != "invalid" || last.Get("X-Agent-Outcome") != "invalid" || last.Get("X-Agent-Reason") != "replayed_nonce" || last.Get("X-Agent-Uid") != "" {
					t.Errorf("observe: replay forwarded %v with %v", forwarded, last)
				}
			} else if forwarded || resp.StatusCode != 401 || !strings.Contains(body, `"replayed_nonce"`) {
				t.Errorf("%s: replay answered %d %s, forwarded %v", mode, resp.StatusCode, body, forwarded)
			}

			// An unsigned request, carrying a spoofed identity.
			n = len(up.requests())
			resp, body = do(t, spoof(unsigned(t, px.URL)))
			forwarded = len(up.requests()) > n
			if mode == middleware.Required {
				if forwarded || resp.StatusCode != 401 || !strings.Contains(body, `"missing_signature"`) || resp.Header.Get("Accept-Signature") == "" {
					t.Errorf("required: unsigned answered %d %s (forwarded %v)", resp.StatusCode, body, forwarded)
				}
			} else {
				last := up.requests()[len(up.requests())-1]
				if !forwarded || last.Get("X-Agent-Verdict") != "unverified" || last.Get("X-Agent-Outcome") != "not-present" || last.Get("X-Agent-Reason") != "unsigned" || last.Get("X-Agent-Uid") != "" || last.Get("X-Agent-Id") != "" {
					t.Errorf("%s: unsigned forwarded %v with %v", mode, forwarded, last)
				}
			}

			// A bad signature (made for another host).
			bad := signed(t, px.URL, nil)
			bad.Host = "other.example"
			n = len(up.requests())
			resp, _ = do(t, bad)
			forwarded = len(up.requests()) > n
			if (mode == middleware.Observe) != forwarded || (!forwarded && resp.StatusCode != 401) {
				t.Errorf("%s: bad signature answered %d, forwarded %v", mode, resp.StatusCode, forwarded)
			}

			// One JSON access-log line per request, with verdict and reason.
			lines := strings.Split(strings.TrimSpace(log.String()), "\n")
			if len(lines) != 4 {
				t.Fatalf("%d access-log lines, want 4:\n%s", len(lines), log.String())
			}
			var entry map[string]any
			if err := json.Unmarshal([]byte(lines[1]), &entry); err != nil {
				t.Fatal(err)
			}
			if entry["verdict"] != "invalid" || entry["outcome"] != "invalid" || entry["reason"] != "replayed_nonce" || entry["code"] != "replayed_nonce" {
				t.Errorf("replay log line = %s", lines[1])
			}
		})
	}
}

func TestUpstreamDown(t *testing.T) {
	up := newUpstream(t)
	px := newProxy(t, middleware.Required, up, nil)
	up.Close()
	resp, body := do(t, signed(t, px.URL, nil))
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"upstream_unavailable"`) {
		t.Errorf("upstream down: %d %s", resp.StatusCode, body)
	}
}

// TestForwardAuth sends auth subrequests exactly as Traefik ForwardAuth
// (and Caddy forward_auth) and nginx auth_request send them.
func TestForwardAuth(t *testing.T) {
	// One verifier (one nonce store) behind both fronts.
	v := newVerifier(t, middleware.Required)
	px := startProxyConfig(t, middleware.Required, proxy.Config{Verifier: v, ForwardAuth: proxy.FrontTraefik}, nil)
	pxNginx := startProxyConfig(t, middleware.Required, proxy.Config{Verifier: v, ForwardAuth: proxy.FrontNginx}, nil)
	// The agent signed a request for https://api.example.com/things?x=1.
	orig := signed(t, "https://api.example.com", func(o *signer.Options) { o.Components = []string{"@method", "@authority", "@path", "@query"} })
	traefik := func() *http.Request {
		r, _ := http.NewRequest(http.MethodGet, px.URL+"/auth", nil)
		for k, v := range orig.Header {
			r.Header[k] = v
		}
		r.Header.Set("X-Forwarded-Method", "GET")
		r.Header.Set("X-Forwarded-Proto", "https")
		r.Header.Set("X-Forwarded-Host", "api.example.com")
		r.Header.Set("X-Forwarded-Uri", "/things?x=1")
		r.Header.Set("X-Forwarded-For", "203.0.113.9")
		return r
	}
	nginx := func() *http.Request {
		r, _ := http.NewRequest(http.MethodGet, pxNginx.URL+"/_agentid", nil)
		for k, v := range orig.Header {
			r.Header[k] = v
		}
		r.Host = "api.example.com"
		r.Header.Set("X-Original-URI", "/things?x=1")
		r.Header.Set("X-Original-Method", "GET")
		return r
	}
	resp, body := do(t, traefik())
	if resp.StatusCode != 200 || resp.Header.Get("X-Agent-Verdict") != "verified" || resp.Header.Get("X-Agent-Uid") != testUID ||
		resp.Header.Get("X-Agent-Id") != testOrigin || resp.Header.Get("X-Agent-Key-Id") != key.KeyID() {
		t.Fatalf("traefik: %d %s %v", resp.StatusCode, body, resp.Header)
	}
	// The same signature again, now through nginx: a replay.
	resp, body = do(t, nginx())
	if resp.StatusCode != 401 || !strings.Contains(body, `"replayed_nonce"`) {
		t.Errorf("nginx replay: %d %s", resp.StatusCode, body)
	}
	// A fresh signature through nginx.
	orig = signed(t, "https://api.example.com", func(o *signer.Options) { o.Components = []string{"@method", "@authority", "@path", "@query"} })
	resp, body = do(t, nginx())
	if resp.StatusCode != 200 || resp.Header.Get("X-Agent-Uid") != testUID {
		t.Errorf("nginx: %d %s", resp.StatusCode, body)
	}
	// The path is covered: another original URI is refused.
	orig = signed(t, "https://api.example.com", func(o *signer.Options) { o.Components = []string{"@method", "@authority", "@path", "@query"} })
	r := nginx()
	r.Header.Set("X-Original-URI", "/admin?x=1")
	if resp, body = do(t, r); resp.StatusCode != 401 || !strings.Contains(body, `"invalid_signature"`) {
		t.Errorf("nginx with another URI: %d %s", resp.StatusCode, body)
	}
	// Without the original URI the subrequest is malformed.
	r, _ = http.NewRequest(http.MethodGet, px.URL+"/auth", nil)
	if resp, body = do(t, r); resp.StatusCode != 400 || !strings.Contains(body, `"invalid_request"`) || !strings.Contains(resp.Header.Get(proxy.HeaderRefusal), `"invalid_request"`) {
		t.Errorf("no original URI: %d %s", resp.StatusCode, body)
	}
	// Unsigned: refused in required mode.
	r, _ = http.NewRequest(http.MethodGet, px.URL+"/auth", nil)
	r.Header.Set("X-Forwarded-Method", "GET")
	r.Header.Set("X-Forwarded-Host", "api.example.com")
	r.Header.Set("X-Forwarded-Uri", "/things")
	if resp, _ = do(t, r); resp.StatusCode != 401 || resp.Header.Get("X-Agent-Verdict") != "" {
		t.Errorf("unsigned forward-auth: %d %v", resp.StatusCode, resp.Header)
	}
}

func TestNewValidates(t *testing.T) {
	keys := middleware.NewStaticKeys()
	v, _ := middleware.New(middleware.Config{Keys: keys, Authorities: []string{"api.example.com"}})
	for _, cfg := range []proxy.Config{
		{},
		{Verifier: v},
		{Verifier: v, Upstream: &url.URL{Scheme: "ftp", Host: "x"}},
		{Verifier: v, ForwardAuth: "apache"},
		{Verifier: v, ForwardAuth: proxy.FrontNginx, Upstream: &url.URL{Scheme: "http", Host: "x"}},
		{Verifier: v, ForwardAuth: proxy.FrontNginx, ForwardAuthFrom: []netip.Prefix{{}}},
		{Verifier: v, Upstream: &url.URL{Scheme: "http", Host: "x"}, Services: []string{"https://agentid.example/path"}},
	} {
		if _, err := proxy.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// BenchmarkProxyOverhead sends, in each iteration, one request straight to
// the upstream and one verified request through the proxy (both over
// loopback HTTP with keep-alive), and reports both latencies and the
// difference: the cost the proxy adds (verification plus one more hop).
func BenchmarkProxyOverhead(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	keys := middleware.NewStaticKeys()
	keys.Add(testOrigin, key.Public)
	v, err := middleware.New(middleware.Config{Keys: keys, Now: clock, Authorities: []string{"api.example.com"}})
	if err != nil {
		b.Fatal(err)
	}
	u, _ := url.Parse(up.URL)
	h, err := proxy.New(proxy.Config{Verifier: v, Upstream: u, Services: []string{testService}})
	if err != nil {
		b.Fatal(err)
	}
	px := httptest.NewServer(h)
	defer px.Close()
	reqs := make([]*http.Request, b.N)
	for i := range reqs {
		r, _ := http.NewRequest(http.MethodGet, px.URL+"/things", nil)
		r.Host = "api.example.com"
		if err := signer.Sign(r, key, signer.Options{SignatureAgent: testOrigin, Now: clock}); err != nil {
			b.Fatal(err)
		}
		reqs[i] = r
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	get := func(r *http.Request) {
		resp, err := client.Do(r)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	var direct, proxied time.Duration
	b.ResetTimer()
	for i := range b.N {
		d, _ := http.NewRequest(http.MethodGet, up.URL+"/things", nil)
		t0 := time.Now()
		get(d)
		t1 := time.Now()
		get(reqs[i])
		t2 := time.Now()
		direct += t1.Sub(t0)
		proxied += t2.Sub(t1)
	}
	b.ReportMetric(float64(direct.Nanoseconds())/float64(b.N), "direct-ns/op")
	b.ReportMetric(float64(proxied.Nanoseconds())/float64(b.N), "proxied-ns/op")
	b.ReportMetric(float64((proxied-direct).Nanoseconds())/float64(b.N), "overhead-ns/op")
}
