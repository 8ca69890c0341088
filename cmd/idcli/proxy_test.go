package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/agentid/agentid/signer/signertest/testenv"
	"github.com/redis/go-redis/v9"
)

// The tests of `idcli proxy` run the command as main would (in-process,
// stopped as SIGTERM stops it) on loopback, in front of a real echo
// service, verifying agents registered on a real reference server whose
// key directories the proxy fetches over HTTP (http://<uid>.localhost:PORT,
// resolved to loopback by keyfetch itself: no test dialer anywhere).

var (
	proxyBanner   = regexp.MustCompile(`idcli proxy listening on (http://\S+)`)
	metricsBanner = regexp.MustCompile(`metrics at (http://\S+)`)
)

// echoUpstream is the service behind the proxy: it answers every request
// with a JSON echo of what it received and remembers the headers it saw,
// by path.
type echoUpstream struct {
	*httptest.Server
	mu    sync.Mutex
	seen  map[string][]http.Header
	delay time.Duration // how long /slow takes
}

// echoBody is the body echoUpstream answers.
type echoBody struct {
	Method  string      `json:"method"`
	Host    string      `json:"host"`
	URI     string      `json:"uri"`
	Headers http.Header `json:"headers"`
}

func newEchoUpstream(t *testing.T) *echoUpstream {
	t.Helper()
	u := &echoUpstream{seen: map[string][]http.Header{}, delay: 300 * time.Millisecond}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen[r.URL.Path] = append(u.seen[r.URL.Path], r.Header.Clone())
		u.mu.Unlock()
		if r.URL.Path == "/slow" {
			time.Sleep(u.delay)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(echoBody{Method: r.Method, Host: r.Host, URI: r.RequestURI, Headers: r.Header})
	}))
	t.Cleanup(u.Close)
	return u
}

// got returns the headers of each request the upstream saw at path.
func (u *echoUpstream) got(path string) []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[path]
}

// localAgent starts a reference server on http://localhost:PORT and
// registers key there; it returns the agent's uid and origin.
func localAgent(t *testing.T, key signer.PrivateKey) (uid, origin string) {
	t.Helper()
	srv := clitest.StartServer(t, clitest.ServerOptions{})
	uid = clitest.Register(t, nil, srv.URL, key)
	return uid, srv.AgentOrigin(uid)
}

// localTrust are the flags that let a proxy verify agents of a local
// reference server.
var localTrust = []string{"--trust", "*.localhost:*", "--allow-http", "--allow-private"}

// agentService is the base URL of the agentid service an agent at origin
// (http://<uid>.<host>) belongs to.
func agentService(uid, origin string) string {
	return strings.Replace(origin, "://"+uid+".", "://", 1)
}

// startProxy runs `idcli proxy --listen 127.0.0.1:0 args…` and returns its
// base URL (from the banner, on stderr).
// Unless args name an --authority, the proxy listens on a port picked
// beforehand and serves that address (127.0.0.1:PORT) as its authority.
func startProxy(t *testing.T, args ...string) (string, *bgCLI) {
	t.Helper()
	listen := "127.0.0.1:0"
	if !slices.Contains(args, "--authority") {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listen = ln.Addr().String()
		ln.Close()
		args = append(args, "--authority", listen)
	}
	b := startCLI(t, t.TempDir(), nil, append([]string{"proxy", "--listen", listen}, args...)...)
	return waitForStderr(t, b, proxyBanner), b
}

// waitForStderr waits until b's stderr matches re and returns the first
// submatch (or the whole match).
func waitForStderr(t *testing.T, b *bgCLI, re *regexp.Regexp) string {
	t.Helper()
	return b.waitIn(t, "stderr", b.stderr, re)
}

// signedGet is GET url signed by key as the agent at origin, with opts.
func signedGet(t *testing.T, url string, key signer.PrivateKey, origin string, opts signer.Options) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts.SignatureAgent = origin
	return clitest.Sign(t, req, key, opts)
}

// spoof adds the X-Agent-* headers a client might send to claim an
// identity.
func spoof(h http.Header) {
	h.Set("X-Agent-Uid", "agent-ffffffffffffffffffffffff")
	h.Set("X-Agent-Id", "https://agent-ffffffffffffffffffffffff.evil.example")
	h.Set("X-Agent-Verdict", "verified")
	h.Set("X-Agent-Outcome", "verified")
	h.Set("X-Agent-Reason", "verified")
	h.Set("X-Agent-Key-Id", "spoofed")
	h["x-agent-role"] = []string{"admin"} // not canonical: sent as is
}

// accessLine is one line of the proxy's JSON access log.
type accessLine struct {
	Msg     string `json:"msg"`
	Method  string `json:"method"`
	Path    string `json:"path"`
	Status  int    `json:"status"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	Agent   string `json:"agent"`
	KeyID   string `json:"kid"`
	UID     string `json:"uid"`
	// DurationMS is the time taken, in milliseconds.
	DurationMS *float64 `json:"duration_ms"`
}

// waitStdout returns b's stdout once done holds of it. The proxy's access
// log is written by a goroutine of its own a few milliseconds after the
// answer, so tests wait for the lines they check; after 10 s waitStdout
// returns stdout as it is, for the caller's checks to report.
func (b *bgCLI) waitStdout(done func(stdout string) bool) string {
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := b.stdout.String()
		if done(out) || time.Now().After(deadline) {
			return out
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// accessLog parses a proxy's stdout, which holds JSON lines only (the
// banner goes to stderr).
func accessLog(t *testing.T, stdout string) map[string][]accessLine {
	t.Helper()
	lines := map[string][]accessLine{}
	for _, l := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		if l == "" {
			continue
		}
		var a accessLine
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("stdout line %q is not JSON: %v", l, err)
		}
		if a.DurationMS == nil {
			t.Errorf("access log line %q has no duration_ms", l)
		}
		lines[a.Path] = append(lines[a.Path], a)
	}
	return lines
}

// TestProxyModes sends, through a proxy in each mode, a verified request,
// an unsigned one, one signed for another host, a replay and one from an
// untrusted signature agent, each carrying spoofed X-Agent-* headers, and
// checks what the client gets, what reaches the upstream, and the access
// log.
func TestProxyModes(t *testing.T) {
	t.Parallel()
	key := signertest.Key(0x31)
	uid, origin := localAgent(t, key)
	up := newEchoUpstream(t)

	type want struct {
		status  int    // the client's answer
		code    string // its error code when refused
		verdict string // X-Agent-Verdict at the upstream ("" = not forwarded)
		reason  string // X-Agent-Reason at the upstream
	}
	fwd := func(verdict, reason string) want {
		return want{status: http.StatusOK, verdict: verdict, reason: reason}
	}
	refused := func(code string) want { return want{status: http.StatusUnauthorized, code: code} }
	kinds := []struct {
		name string
		// requests returns the requests to send to base+path; the last
		// one is judged, every earlier one must pass.
		requests func(t *testing.T, base, path string) []*http.Request
		want     map[string]want // by mode
	}{
		{
			name: "verified",
			requests: func(t *testing.T, base, path string) []*http.Request {
				return []*http.Request{signedGet(t, base+path, key, origin, signer.Options{})}
			},
			want: map[string]want{"required": fwd("verified", ""), "optional": fwd("verified", ""), "observe": fwd("verified", "")},
		},
		{
			name: "unsigned",
			requests: func(t *testing.T, base, path string) []*http.Request {
				r, _ := http.NewRequest(http.MethodGet, base+path, nil)
				return []*http.Request{r}
			},
			want: map[string]want{"required": refused("missing_signature"), "optional": fwd("unverified", ""), "observe": fwd("unverified", "")},
		},
		{
			name: "signed for another host",
			requests: func(t *testing.T, base, path string) []*http.Request {
				r := signedGet(t, "http://api.example"+path, key, origin, signer.Options{})
				r.URL, _ = r.URL.Parse(base + path)
				r.Host = ""
				return []*http.Request{r}
			},
			want: map[string]want{"required": refused("invalid_signature"), "optional": refused("invalid_signature"), "observe": fwd("invalid", "invalid_signature")},
		},
		{
			name: "replayed",
			requests: func(t *testing.T, base, path string) []*http.Request {
				r := signedGet(t, base+path, key, origin, signer.Options{})
				return []*http.Request{r, clitest.CopyRequest(r, nil)}
			},
			want: map[string]want{"required": refused("replayed_nonce"), "optional": refused("replayed_nonce"), "observe": fwd("invalid", "replayed_nonce")},
		},
		{
			name: "untrusted signature agent",
			requests: func(t *testing.T, base, path string) []*http.Request {
				return []*http.Request{signedGet(t, base+path, key, "https://"+uid+".agents.evil.example", signer.Options{})}
			},
			want: map[string]want{"required": refused("untrusted_signature_agent"), "optional": refused("untrusted_signature_agent"), "observe": fwd("unverified", "untrusted_signature_agent")},
		},
	}

	for _, mode := range []string{"required", "optional", "observe"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			base, p := startProxy(t, append([]string{"--upstream", up.URL, "--mode", mode, "--agentid-service", agentService(uid, origin)}, localTrust...)...)
			sent := 0
			for _, k := range kinds {
				path := "/" + mode + "/" + strings.ReplaceAll(k.name, " ", "-")
				w := k.want[mode]
				reqs := k.requests(t, base, path)
				sent += len(reqs)
				var a clitest.Answer
				for i, r := range reqs {
					spoof(r.Header)
					a = clitest.MustSend(t, http.DefaultClient, r)
					if i < len(reqs)-1 && a.Status != http.StatusOK {
						t.Fatalf("%s: first request answered %d %s, want 200", k.name, a.Status, a.Body)
					}
				}
				if a.Status != w.status || a.Code != w.code {
					t.Errorf("%s: answered %d %q (%s), want %d %q", k.name, a.Status, a.Code, a.Body, w.status, w.code)
				}
				seen := up.got(path)
				if w.verdict == "" {
					if len(seen) != len(reqs)-1 {
						t.Errorf("%s: the upstream saw %d requests at %s, want %d (the refused one never reaches it)", k.name, len(seen), path, len(reqs)-1)
					}
					continue
				}
				if len(seen) != len(reqs) {
					t.Fatalf("%s: the upstream saw %d requests at %s, want %d", k.name, len(seen), path, len(reqs))
				}
				h := seen[len(seen)-1]
				checkAgentHeaders(t, k.name, h, w.verdict, w.reason, uid, origin, key.KeyID())
			}

			// One JSON access-log line per request, with verdict and reason.
			log := accessLog(t, p.waitStdout(func(out string) bool { return strings.Count(out, "\n") >= sent }))
			for _, k := range kinds {
				path := "/" + mode + "/" + strings.ReplaceAll(k.name, " ", "-")
				w := k.want[mode]
				lines := log[path]
				if len(lines) == 0 {
					t.Errorf("%s: no access-log line for %s in:\n%s", k.name, path, p.stdout)
					continue
				}
				last := lines[len(lines)-1]
				// The log names the verdict of refused requests too, and
				// the code of every unverified one.
				wantVerdict, wantReason := w.verdict, w.reason
				switch {
				case w.verdict == "unverified" && w.reason == "" || w.code == "missing_signature":
					wantVerdict, wantReason = "unverified", "unsigned"
				case w.code == "untrusted_signature_agent":
					// No verdict on the signature: its key set is not trusted.
					wantVerdict, wantReason = "unverified", w.code
				case w.verdict == "":
					wantVerdict, wantReason = "invalid", w.code
				}
				if last.Status != w.status || last.Verdict != wantVerdict || last.Reason != wantReason {
					t.Errorf("%s: access log %+v, want status %d verdict %s reason %q", k.name, last, w.status, wantVerdict, wantReason)
				}
				if wantVerdict == "verified" && (last.Agent != origin || last.KeyID != key.KeyID()) {
					t.Errorf("%s: access log agent %q kid %q, want %q %q", k.name, last.Agent, last.KeyID, origin, key.KeyID())
				}
			}
		})
	}
}

// checkAgentHeaders checks the X-Agent-* headers an upstream received: the
// verdict, the identity only when verified, the reason only when invalid,
// and nothing a client sent.
func checkAgentHeaders(t *testing.T, what string, h http.Header, verdict, reason, uid, origin, kid string) {
	t.Helper()
	want := map[string]string{"X-Agent-Verdict": verdict, "X-Agent-Outcome": verdict}
	switch verdict {
	case "verified":
		want["X-Agent-Uid"], want["X-Agent-Id"], want["X-Agent-Key-Id"] = uid, origin, kid
	case "invalid":
		want["X-Agent-Reason"] = reason
	case "unverified":
		want["X-Agent-Reason"] = reason
		if reason == "" { // unsigned
			want["X-Agent-Outcome"], want["X-Agent-Reason"] = "not-present", "unsigned"
		}
	}
	for name, values := range h {
		if !strings.HasPrefix(strings.ToLower(name), "x-agent-") {
			continue
		}
		if w, ok := want[http.CanonicalHeaderKey(name)]; !ok || len(values) != 1 || values[0] != w {
			t.Errorf("%s: the upstream got %s: %q, want %s", what, name, values, map[bool]string{true: "only " + w, false: "no such header"}[ok])
		}
	}
	for name, w := range want {
		if got := h.Get(name); got != w {
			t.Errorf("%s: the upstream got %s %q, want %q", what, name, got, w)
		}
	}
}

// TestProxyForwardAuth answers the auth subrequests that Traefik
// (ForwardAuth), Caddy (forward_auth) and nginx (auth_request) send, with
// exactly their headers, for a request signed over @method, @authority,
// @path and @query of the original URL: each is rebuilt from the headers,
// so a signature verifies only for the original request.
func TestProxyForwardAuth(t *testing.T) {
	t.Parallel()
	key := signertest.Key(0x32)
	uid, origin := localAgent(t, key)
	service := agentService(uid, origin)
	// other.example is served too: "another host" is a signature that
	// fails there, while evil.example is not served at all.
	authFor := map[string]string{}
	for _, front := range []string{"nginx", "traefik", "caddy"} {
		authFor[front], _ = startProxy(t, append([]string{"--forward-auth", "--front", front, "--authority", "app.example,other.example", "--agentid-service", service}, localTrust...)...)
	}

	const original = "https://app.example/api/items?color=blue"
	var signFor func(t *testing.T, method, url string) http.Header
	sign := func(t *testing.T, method string) http.Header {
		return signFor(t, method, original)
	}
	signFor = func(t *testing.T, method, original string) http.Header {
		req, _ := http.NewRequest(method, original, nil)
		opts := signer.Options{Components: []string{"@method", "@authority", "@path", "@query"}, SignatureAgent: origin}
		return clitest.Sign(t, req, key, opts).Header
	}
	// The headers a client sent to the front proxy, which copies them into
	// the subrequest (with its own), including the X-Forwarded-* and
	// X-Original-* a client might add to rewrite the original request.
	client := func(sig http.Header) http.Header {
		h := sig.Clone()
		h.Set("User-Agent", "agent/1.0")
		h.Set("Accept", "application/json")
		return h
	}
	// forwarded is a GET of path at the auth address carrying the original
	// headers plus X-Forwarded-For, -Method, -Proto, -Host and -Uri: what
	// Traefik's ForwardAuth sends (path ""), and Caddy's forward_auth (path
	// rewritten to /; X-Forwarded-Method and -Uri its own, -For, -Proto and
	// -Host reverse_proxy's).
	forwarded := func(auth, path string) func(method, host, uri string, sig http.Header) *http.Request {
		return func(method, host, uri string, sig http.Header) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, auth+path, nil)
			r.Header = client(sig)
			// The client's attempt at the nginx headers.
			r.Header.Set("X-Original-Method", "GET")
			r.Header.Set("X-Original-URI", "/api/items?color=blue")
			r.Header.Set("X-Forwarded-For", "203.0.113.7")
			r.Header.Set("X-Forwarded-Method", method)
			r.Header.Set("X-Forwarded-Proto", "https")
			r.Header.Set("X-Forwarded-Host", host)
			r.Header.Set("X-Forwarded-Uri", uri)
			return r
		}
	}
	nginx := func(method, host, uri string, sig http.Header) *http.Request {
		// nginx auth_request to `location = /_agentid { internal;
		// proxy_pass http://auth; proxy_pass_request_body off;
		// proxy_set_header Content-Length ""; proxy_set_header Host
		// $http_host; proxy_set_header X-Original-URI $request_uri;
		// proxy_set_header X-Original-Method $request_method; }`: a GET
		// of /_agentid with the original headers, Host kept, HTTP/1.0
		// (Connection: close).
		r, _ := http.NewRequest(http.MethodGet, authFor["nginx"]+"/_agentid", nil)
		r.Header = client(sig)
		// The client's attempt at the Traefik and Caddy headers.
		r.Header.Set("X-Forwarded-Method", "GET")
		r.Header.Set("X-Forwarded-Host", "app.example")
		r.Header.Set("X-Forwarded-Uri", "/api/items?color=blue")
		r.Host = host
		r.Close = true
		r.Header.Set("X-Original-URI", uri)
		r.Header.Set("X-Original-Method", method)
		return r
	}
	fronts := []struct {
		name string
		req  func(method, host, uri string, sig http.Header) *http.Request
	}{{"Traefik", forwarded(authFor["traefik"], "")}, {"Caddy", forwarded(authFor["caddy"], "/")}, {"nginx", nginx}}

	for _, f := range fronts {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			tests := []struct {
				name         string
				method, host string
				uri          string
				signed       string // method signed; "" = unsigned
				spoofed      bool   // the client sent X-Agent-* headers
				status       int
				code         string
			}{
				{name: "verified GET", method: "GET", host: "app.example", uri: "/api/items?color=blue", signed: "GET", status: 200},
				{name: "verified POST", method: "POST", host: "app.example", uri: "/api/items?color=blue", signed: "POST", status: 200},
				{name: "unsigned", method: "GET", host: "app.example", uri: "/api/items?color=blue", status: 401, code: "missing_signature"},
				{name: "another method", method: "DELETE", host: "app.example", uri: "/api/items?color=blue", signed: "GET", status: 401, code: "invalid_signature"},
				{name: "another host", method: "GET", host: "other.example", uri: "/api/items?color=blue", signed: "GET", status: 401, code: "invalid_signature"},
				{name: "another path", method: "GET", host: "app.example", uri: "/api/admin?color=blue", signed: "GET", status: 401, code: "invalid_signature"},
				{name: "another query", method: "GET", host: "app.example", uri: "/api/items?color=red", signed: "GET", status: 401, code: "invalid_signature"},
				{name: "POST, client claims GET", method: "POST", host: "app.example", uri: "/api/admin", signed: "GET", status: 401, code: "invalid_signature"},
				{name: "X-Agent-* from the client", method: "GET", host: "app.example", uri: "/api/items?color=blue", signed: "GET", spoofed: true, status: 403, code: "forbidden"},
				{name: "signed for a host not served", method: "GET", host: "evil.example", uri: "/api/items?color=blue", signed: "GET", status: 421, code: "misdirected_request"},
			}
			for _, tc := range tests {
				sig := http.Header{}
				switch {
				case tc.host == "evil.example":
					sig = signFor(t, tc.signed, "https://evil.example"+tc.uri)
				case tc.signed != "":
					sig = sign(t, tc.signed)
				}
				req := f.req(tc.method, tc.host, tc.uri, sig)
				if tc.spoofed {
					spoof(req.Header)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var body struct {
					Error struct{ Code string } `json:"error"`
				}
				json.Unmarshal(raw, &body)
				status := tc.status
				if f.name == "nginx" && status == http.StatusMisdirectedRequest {
					// auth_request passes on only 401 and 403; the status
					// travels in X-Agent-Refusal-Status.
					status = http.StatusForbidden
					if got := resp.Header.Get("X-Agent-Refusal-Status"); got != "421" {
						t.Errorf("%s: X-Agent-Refusal-Status %q, want 421", tc.name, got)
					}
				}
				if resp.StatusCode != status || body.Error.Code != tc.code {
					t.Errorf("%s: %d %q, want %d %q", tc.name, resp.StatusCode, body.Error.Code, status, tc.code)
				}
				if tc.status == http.StatusOK {
					if f.name == "Caddy" {
						// The headers copy_headers may name come empty
						// when they do not apply (Caddy 2.6 would pass the
						// placeholder's text for a missing one).
						for name, v := range resp.Header {
							if len(v) == 1 && v[0] == "" && strings.HasPrefix(name, "X-Agent-") {
								delete(resp.Header, name)
							}
						}
					}
					checkAgentHeaders(t, tc.name, resp.Header, "verified", "", uid, origin, key.KeyID())
				} else {
					if resp.Header.Get("Accept-Signature") == "" && tc.status == http.StatusUnauthorized {
						t.Errorf("%s: a refusal without Accept-Signature", tc.name)
					}
					// The refusal's body again, for nginx; no identity.
					if got := resp.Header.Get("X-Agent-Refusal"); got != strings.TrimSpace(string(raw)) {
						t.Errorf("%s: X-Agent-Refusal %q, want the body %q", tc.name, got, raw)
					}
					for name := range resp.Header {
						if strings.HasPrefix(strings.ToLower(name), "x-agent-") && name != "X-Agent-Refusal" && name != "X-Agent-Refusal-Status" {
							t.Errorf("%s: the refusal carries %s: %q", tc.name, name, resp.Header.Values(name))
						}
					}
				}
			}
		})
	}
}

// TestProxyRedisSharedNonces runs two proxy processes on one Redis: a
// signature accepted through the first is refused as a replay through the
// second (and, without Redis, each process would accept it once).
func TestProxyRedisSharedNonces(t *testing.T) {
	t.Parallel()
	redisURL := os.Getenv("AGENTID_TEST_REDIS_URL")
	if redisURL == "" {
		testenv.SkipOrFail(t, "AGENTID_TEST_REDIS_URL is not set: the shared-nonce test needs a Redis")
	}
	// The second process names the same Redis (and database) as a
	// host:port list when it can.
	addr, err := sameRedis(redisURL)
	if err != nil {
		t.Fatal(err)
	}

	key := signertest.Key(0x33)
	_, origin := localAgent(t, key)
	up := newEchoUpstream(t)

	// send signs one request for app.example (the authority both proxies
	// serve), sends it to first, then the same bytes to second.
	send := func(t *testing.T, first, second, path string) (clitest.Answer, clitest.Answer) {
		r := signedGet(t, "http://app.example"+path, key, origin, signer.Options{})
		r.URL, _ = r.URL.Parse(first + path)
		r.Host = "app.example"
		again := clitest.CopyRequest(r, nil)
		a := clitest.MustSend(t, http.DefaultClient, r)
		again.URL, _ = again.URL.Parse(second + path)
		again.Host = "app.example"
		return a, clitest.MustSend(t, http.DefaultClient, again)
	}
	served := []string{"--authority", "app.example"}

	t.Run("one Redis", func(t *testing.T) {
		a, _ := startProxy(t, append([]string{"--upstream", up.URL, "--redis-url", redisURL}, append(served, localTrust...)...)...)
		b, pb := startProxy(t, append([]string{"--upstream", up.URL, "--redis-url", addr}, append(served, localTrust...)...)...)
		if addr != redisURL && !strings.Contains(pb.stderr.String(), "nonces in Redis "+addr) {
			t.Errorf("banner %q does not name the Redis", pb.stderr)
		}
		first, second := send(t, a, b, "/redis/shared")
		if first.Status != http.StatusOK {
			t.Fatalf("through the first proxy: %d %s, want 200", first.Status, first.Body)
		}
		if second.Status != http.StatusUnauthorized || second.Code != "replayed_nonce" {
			t.Errorf("the same signature through the second proxy: %d %s, want 401 replayed_nonce", second.Status, second.Body)
		}
		if n := len(up.got("/redis/shared")); n != 1 {
			t.Errorf("the upstream saw %d requests, want 1", n)
		}
	})
	t.Run("memory stores, for contrast", func(t *testing.T) {
		a, _ := startProxy(t, append([]string{"--upstream", up.URL}, append(served, localTrust...)...)...)
		b, _ := startProxy(t, append([]string{"--upstream", up.URL}, append(served, localTrust...)...)...)
		first, second := send(t, a, b, "/redis/separate")
		if first.Status != http.StatusOK || second.Status != http.StatusOK {
			t.Errorf("without Redis: %d then %d, want 200 twice (each process remembers only its own nonces)", first.Status, second.Status)
		}
	})
}

// TestProxyMetricsListen serves /metrics on its own address, counting the
// proxy's answers and verification outcomes, while /metrics on the
// proxy's listener still belongs to the upstream.
func TestProxyMetricsListen(t *testing.T) {
	t.Parallel()
	key := signertest.Key(0x34)
	_, origin := localAgent(t, key)
	up := newEchoUpstream(t)
	base, p := startProxy(t, append([]string{"--upstream", up.URL, "--metrics-listen", "127.0.0.1:0"}, localTrust...)...)
	metricsURL := waitForStderr(t, p, metricsBanner)

	if a := clitest.MustSend(t, http.DefaultClient, signedGet(t, base+"/metrics", key, origin, signer.Options{})); a.Status != http.StatusOK || len(up.got("/metrics")) != 1 {
		t.Errorf("signed GET /metrics through the proxy: %d %s, upstream saw %d; want the upstream's answer", a.Status, a.Body, len(up.got("/metrics")))
	}
	unsigned, _ := http.NewRequest(http.MethodGet, base+"/x", nil)
	if a := clitest.MustSend(t, http.DefaultClient, unsigned); a.Status != http.StatusUnauthorized {
		t.Errorf("unsigned GET /x: %d, want 401", a.Status)
	}
	req, _ := http.NewRequest(http.MethodGet, metricsURL, nil)
	m := clitest.MustSend(t, http.DefaultClient, req)
	for _, want := range []string{
		`agentid_verifications_total{outcome="ok"} 1`,
		`agentid_verifications_total{outcome="missing_signature"} 1`,
		`agentid_http_requests_total{route="proxy",method="GET",status="200"} 1`,
		`agentid_http_requests_total{route="proxy",method="GET",status="401"} 1`,
	} {
		if !strings.Contains(m.Body, want) {
			t.Errorf("GET %s lacks %s:\n%s", metricsURL, want, m.Body)
		}
	}
}

// TestProxyGracefulShutdown stops the proxy (as SIGTERM does) while a
// request is at the upstream: the request completes, then the command
// exits without error and the port is closed.
func TestProxyGracefulShutdown(t *testing.T) {
	t.Parallel()
	key := signertest.Key(0x35)
	_, origin := localAgent(t, key)
	up := newEchoUpstream(t)
	base, p := startProxy(t, append([]string{"--upstream", up.URL}, localTrust...)...)

	done := make(chan clitest.Answer, 1)
	go func() {
		a, err := clitest.Send(http.DefaultClient, signedGet(t, base+"/slow", key, origin, signer.Options{}))
		if err != nil {
			a.Body = err.Error()
		}
		done <- a
	}()
	for len(up.got("/slow")) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	if err := p.stop(); err != nil {
		t.Errorf("idcli proxy after SIGTERM: %v, want a clean exit", err)
	}
	if a := <-done; a.Status != http.StatusOK {
		t.Errorf("the request in flight at SIGTERM: %d %s, want 200", a.Status, a.Body)
	}
	if _, err := http.Get(base + "/after"); err == nil {
		t.Errorf("the proxy still answers at %s after its exit", base)
	}
}

// TestProxyFlagErrors: every unusable flag combination is refused before
// anything listens, with one line naming the flag.
func TestProxyFlagErrors(t *testing.T) {
	t.Parallel()
	trust := []string{"--trust", "*.agentid.example"}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--upstream", "http://127.0.0.1:1", "--mode", "strict"}, `--mode "strict": want required, optional or observe`},
		{[]string{}, "--upstream is required"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--forward-auth"}, "--upstream excludes --forward-auth"},
		{[]string{"--forward-auth"}, "--front is required with --forward-auth: nginx, traefik or caddy"},
		{[]string{"--forward-auth", "--front", "apache"}, `--front "apache": want nginx, traefik or caddy`},
		{[]string{"--upstream", "http://127.0.0.1:1", "--front", "nginx"}, "--front is for --forward-auth"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--forward-auth-from", "10.0.0.1"}, "--forward-auth-from is for --forward-auth"},
		{[]string{"--forward-auth", "--front", "nginx", "--forward-auth-from", "10.0.0.300"}, `--forward-auth-from "10.0.0.300": want an address or CIDR`},
		{[]string{"--forward-auth", "--front", "nginx", "--forward-auth-from", "127.0.0.1,nginx"}, `--forward-auth-from "nginx": want an address or CIDR`},
		{[]string{"--upstream", "http://127.0.0.1:1", "--agentid-service", "https://agentid.example/agents"}, `--agentid-service: `},
		{[]string{"--upstream", "http://127.0.0.1:1", "--upstream-max-idle", "0"}, "--upstream-max-idle 0: want at least 1"},
		{[]string{"--upstream", "127.0.0.1:8000"}, `--upstream "127.0.0.1:8000": want an http:// or https:// URL`},
		{[]string{"--upstream", "ftp://files.example"}, `--upstream "ftp://files.example"`},
		{[]string{"--upstream", "localhost:8000"}, "did you mean http://localhost:8000?"},
		{[]string{"--forward-auth", "--front", "nginx", "--trust", "https://agents.example"}, `--trust "https://agents.example": want a host such as`},
		{[]string{"--forward-auth", "--front", "nginx", "--listen", "8080"}, `--listen "8080": want host:port`},
		{[]string{"--forward-auth", "--front", "nginx", "--refusal-status", "404"}, "--refusal-status 404: want 401 or 403"},
		{[]string{"--forward-auth", "--front", "nginx", "--access-log", "file"}, `--access-log "file": want stdout, stderr or off`},
		{[]string{"--forward-auth", "--front", "nginx", "--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"--forward-auth", "--front", "nginx", "--redis-url", "http://redis.example"}, `--redis-url: http://redis.example: want redis://`},
		{[]string{"--forward-auth", "--front", "nginx", "--redis-url", "redis-host"}, `--redis-url "redis-host": want redis://`},
		{[]string{"--forward-auth", "--front", "nginx", "--redis-url", "redis://127.0.0.1:1"}, "--redis-url: redis://127.0.0.1:1: Redis does not answer"},
		{[]string{"--forward-auth", "--front", "nginx", "extra"}, `proxy takes no arguments (got "extra")`},
		{[]string{"--forward-auth", "--front", "nginx", "--authority", ","}, "--authority is required"},
		{[]string{"--forward-auth", "--front", "nginx", "--authority", "https://api.example.com"}, `--authority "https://api.example.com" is not host or host:port`},
		{[]string{"--forward-auth", "--front", "nginx", "--authority", "api.example.com/x"}, `--authority "api.example.com/x" is not host or host:port`},
	}
	for _, tc := range tests {
		args := append([]string{"proxy", "--listen", "127.0.0.1:0"}, tc.args...)
		if !strings.Contains(strings.Join(tc.args, " "), "--trust") {
			args = append(args, trust...)
		}
		if !slices.Contains(tc.args, "--authority") {
			args = append(args, "--authority", "api.example.com")
		}
		r := runCLI(t.Context(), t.TempDir(), nil, args...)
		if r.err == nil || !strings.Contains(r.err.Error(), tc.want) || strings.Contains(r.err.Error(), "\n") {
			t.Errorf("idcli %s: error %v, want one line containing %q", strings.Join(args, " "), r.err, tc.want)
		}
		if strings.Contains(r.stdout, "listening") {
			t.Errorf("idcli %s: printed %q, want no banner", strings.Join(args, " "), r.stdout)
		}
	}
	r := runCLI(t.Context(), t.TempDir(), nil, "proxy", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--authority", "api.example.com")
	if r.err == nil || !strings.Contains(r.err.Error(), "--trust is required") {
		t.Errorf("idcli proxy without --trust: %v, want --trust is required", r.err)
	}
	r = runCLI(t.Context(), t.TempDir(), nil, "proxy", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--trust", "*.agentid.example")
	if r.err == nil || !strings.Contains(r.err.Error(), "--authority is required") {
		t.Errorf("idcli proxy without --authority: %v, want --authority is required", r.err)
	}

	// A busy port: one line naming it.
	busy := strings.TrimPrefix(func() string {
		u, _ := startProxy(t, "--forward-auth", "--front", "nginx", "--trust", "*.agentid.example")
		return u
	}(), "http://")
	r = runCLI(context.Background(), t.TempDir(), nil, "proxy", "--forward-auth", "--front", "nginx", "--trust", "*.agentid.example", "--authority", "api.example.com", "--listen", busy)
	if r.err == nil || !strings.Contains(r.err.Error(), "--listen "+busy+": the address is already in use") {
		t.Errorf("idcli proxy --listen %s (busy): %v, want the address is already in use", busy, r.err)
	}
}

// TestProxyBanner names the listen address, the upstream or forward-auth,
// the mode and the trust patterns.
func TestProxyBanner(t *testing.T) {
	t.Parallel()
	up := newEchoUpstream(t)
	_, p := startProxy(t, "--upstream", up.URL, "--mode", "observe", "--trust", "*.agentid.example", "--trust", "bots.example.net")
	if p.stdout.String() != "" {
		t.Errorf("stdout %q before any request, want nothing (the banner goes to stderr)", p.stdout)
	}
	out := p.stderr.String()
	for _, want := range []string{"→ upstream " + up.URL, "mode observe", "serving 127.0.0.1:", "trusting *.agentid.example, bots.example.net", "nonces in memory"} {
		if !strings.Contains(out, want) {
			t.Errorf("banner %q lacks %q", out, want)
		}
	}
	_, p = startProxy(t, "--forward-auth", "--front", "traefik", "--refusal-status", "403", "--trust", "*.agentid.example")
	if out := p.stderr.String(); !strings.Contains(out, "(forward-auth behind traefik: answers auth subrequests with 200 or 403)") || !strings.Contains(out, "mode required") {
		t.Errorf("forward-auth banner %q", out)
	}
}

// TestProxyReplayRespellings sends one signature through the proxy again
// and again, each time with Signature-Agent spelled differently (a query,
// an empty query, an escaped dot, the directory as a jwks_uri member):
// every spelling names the same key, so the signature is accepted exactly
// once.
func TestProxyReplayRespellings(t *testing.T) {
	t.Parallel()
	key := signertest.Key(0x37)
	uid, origin := localAgent(t, key)
	up := newEchoUpstream(t)
	base, _ := startProxy(t, append([]string{"--upstream", up.URL, "--agentid-service", agentService(uid, origin)}, localTrust...)...)

	const path = "/replay/respelled"
	first := signedGet(t, base+path, key, origin, signer.Options{}) // covers @authority, not Signature-Agent
	spellings := []string{
		`sig1="` + origin + `"`,
		`sig1="` + origin + `?r=1"`,
		`sig1="` + origin + `?"`,
		`sig1="` + origin + `/%2Ewell-known/http-message-signatures-directory"`,
		`sig1="` + origin + `/.well-known/http-message-signatures-directory"`,
		`sig1="` + origin + `/.well-known/http-message-signatures-directory";type=jwks_uri`,
		`"` + origin + `"`,
	}
	accepted := 0
	for _, sa := range spellings {
		r := clitest.CopyRequest(first, nil)
		r.Header.Set("Signature-Agent", sa)
		a := clitest.MustSend(t, http.DefaultClient, r)
		if a.Status == http.StatusOK {
			accepted++
		} else if a.Status != http.StatusUnauthorized {
			t.Errorf("Signature-Agent %s: %d %s, want 200 once, else 401", sa, a.Status, a.Body)
		}
		t.Logf("Signature-Agent %s: %d %s", sa, a.Status, a.Code)
	}
	if accepted != 1 || len(up.got(path)) != 1 {
		t.Errorf("one signature under %d spellings of Signature-Agent: accepted %d times, the upstream saw %d; want exactly once", len(spellings), accepted, len(up.got(path)))
	}
}

// TestProxyForwardAuthFrom: a forward-auth endpoint answers only its
// --forward-auth-from addresses (loopback by default).
func TestProxyForwardAuthFrom(t *testing.T) {
	t.Parallel()
	sub := func(auth string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, auth+"/_agentid", nil)
		r.Host = "app.example"
		r.Header.Set("X-Original-Method", "GET")
		r.Header.Set("X-Original-URI", "/x")
		return r
	}
	elsewhere, p := startProxy(t, "--forward-auth", "--front", "nginx", "--forward-auth-from", "192.0.2.0/24,2001:db8::/32", "--trust", "*.agentid.example")
	if a := clitest.MustSend(t, http.DefaultClient, sub(elsewhere)); a.Status != http.StatusForbidden || a.Code != "forbidden" || !strings.Contains(a.Body, "127.0.0.1") {
		t.Errorf("from loopback to a proxy answering 192.0.2.0/24: %d %s, want 403 forbidden naming 127.0.0.1", a.Status, a.Body)
	}
	if !strings.Contains(p.stderr.String(), "subrequests from [192.0.2.0/24 2001:db8::/32]") {
		t.Errorf("banner %q does not name the allowed addresses", p.stderr)
	}
	here, _ := startProxy(t, "--forward-auth", "--front", "nginx", "--trust", "*.agentid.example")
	if a := clitest.MustSend(t, http.DefaultClient, sub(here)); a.Status != http.StatusUnauthorized || a.Code != "missing_signature" {
		t.Errorf("from loopback, by default: %d %s, want 401 missing_signature", a.Status, a.Body)
	}
}

// sameRedis returns a --redis-url naming the Redis database of redisURL:
// its host:port when that names the same one (database 0, no password),
// else redisURL itself (a host:port list always means database 0).
func sameRedis(redisURL string) (string, error) {
	o, err := redis.ParseURL(redisURL)
	if err != nil {
		return "", fmt.Errorf("AGENTID_TEST_REDIS_URL: %w", err)
	}
	if o.DB != 0 || o.Password != "" || o.Username != "" || o.TLSConfig != nil {
		return redisURL, nil
	}
	return o.Addr, nil
}

func TestSameRedis(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"redis://127.0.0.1:6379/0":       "127.0.0.1:6379",
		"redis://127.0.0.1:6379":         "127.0.0.1:6379",
		"redis://127.0.0.1:6379/3":       "redis://127.0.0.1:6379/3",
		"redis://:secret@127.0.0.1:6379": "redis://:secret@127.0.0.1:6379",
	} {
		if got, err := sameRedis(in); err != nil || got != want {
			t.Errorf("sameRedis(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
