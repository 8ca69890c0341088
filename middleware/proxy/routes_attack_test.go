package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/middleware/rules"
)

// routeAttackPaths are paths a normalising server (or a servlet container,
// or a server reading "\" as "/" or dropping trailing dots) reads as a path
// under /api/, /account/ or /admin, while the raw path starts with the
// optional /public/ (or with nothing any route names).
var routeAttackPaths = []string{
	"/public/../api/secret",
	"/public/%2e%2e/api/x",
	"/public/%2E%2E/api/x",
	"/public//account/x",
	"/public/x/../account/x",
	"/robots.txt%2F..%2Fadmin",
	"/robots.txt%2f..%2fadmin",
	"/public/..\\api\\x",
	"/public/%5c..%5capi/x",
	"/public/%252e%252e/api/x",
	"/public/..;/api/x",
	"/public/%3b/../api/x",
	"/api;x/secret",
	"/api./secret",
	"/public/%00/../api/x",
	"/public/./../api/x",
}

// normalisingUpstream answers 200 "secret" for any request whose path,
// read as lenient servers read it (decoded, "\" as "/", ";params"
// dropped, trailing dots dropped, "//" merged, dot segments removed, then
// decoded once more), is a required one (see routeGate); else 200
// "public". It records the raw request targets it got.
func normalisingUpstream(t *testing.T) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.RequestURI)
		mu.Unlock()
		p := r.URL.Path
		for i := 0; i < 2; i++ {
			segs := strings.Split(strings.ReplaceAll(p, "\\", "/"), "/")
			for j, s := range segs {
				s, _, _ = strings.Cut(s, ";")
				segs[j] = strings.TrimRight(s, ".")
				if s == "." || s == ".." {
					segs[j] = s
				}
			}
			p = path.Clean("/" + strings.Join(segs, "/"))
			if q, err := url.PathUnescape(p); err == nil {
				p = q
			}
		}
		if strings.HasPrefix(p, "/api/") || strings.HasPrefix(p, "/account/") || strings.HasPrefix(p, "/public/account/") || p == "/admin" {
			w.Write([]byte("secret"))
			return
		}
		w.Write([]byte("public"))
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), got...) }
}

// routeGate is the gate of the attack: /public/ optional, as is every
// path no route names; /api/, /account/, /public/account/ and /admin
// required.
func routeGate(t *testing.T) *rules.Gate {
	t.Helper()
	g, err := rules.New(rules.Config{Mode: middleware.Optional, Routes: []rules.Route{
		{Prefix: "/public/", Mode: middleware.Optional},
		{Prefix: "/public/account/", Mode: middleware.Required},
		{Prefix: "/api/", Mode: middleware.Required},
		{Prefix: "/account/", Mode: middleware.Required},
		{Prefix: "/admin", Mode: middleware.Required},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// rawGet sends "GET target" with the given headers on a new connection to
// addr and returns the answer's status and body.
func rawGet(t *testing.T, addr, target string, headers map[string]string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b strings.Builder
	b.WriteString("GET " + target + " HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n")
	for k, v := range headers {
		b.WriteString(k + ": " + v + "\r\n")
	}
	b.WriteString("\r\n")
	status, _, body, _, err := rawExchange(t, c, bufio.NewReader(c), http.MethodGet, b.String())
	if err != nil {
		t.Fatalf("%s: %v", target, err)
	}
	return status, body
}

// TestRouteBypassByPathAttack: with /public/ optional and /api/ required,
// an unsigned request whose raw path starts with /public/ but which a
// normalising upstream reads as /api/… is refused (400 invalid_request)
// and never forwarded; normal paths still go through as sent.
func TestRouteBypassByPathAttack(t *testing.T) {
	t.Parallel()
	up, got := normalisingUpstream(t)
	upURL, _ := url.Parse(up.URL)
	g := routeGate(t)
	px := startProxyConfig(t, middleware.Observe, proxy.Config{Upstream: upURL, Decide: g.Apply}, nil)
	addr := px.Listener.Addr().String()
	for _, p := range routeAttackPaths {
		status, body := rawGet(t, addr, p, nil)
		if status != http.StatusBadRequest || errorCode(body) != "invalid_request" {
			t.Errorf("GET %s: %d %s, want 400 invalid_request", p, status, body)
		}
	}
	if g := got(); len(g) != 0 {
		t.Errorf("the upstream got %q, want nothing", g)
	}
	// Normal paths: the optional route passes unsigned, the required does not.
	if status, body := rawGet(t, addr, "/public/x?a=1", nil); status != http.StatusOK || body != "public" {
		t.Errorf("GET /public/x: %d %s, want 200 public", status, body)
	}
	if status, body := rawGet(t, addr, "/api/secret", nil); status != http.StatusUnauthorized {
		t.Errorf("GET /api/secret unsigned: %d %s, want 401", status, body)
	}
	if g := got(); len(g) != 1 || g[0] != "/public/x?a=1" {
		t.Errorf("the upstream got %q, want exactly [/public/x?a=1]", g)
	}
}

// TestForwardAuthRouteBypassByPathAttack: the same paths as the original
// URI of a forward-auth subrequest (nginx's X-Original-URI is
// $request_uri, the path as the client sent it; Traefik's and Caddy's
// X-Forwarded-Uri likewise) are refused, never answered 200: for nginx 403
// with X-Agent-Refusal-Status 400, which docs/proxy.md's nginx snippet
// restores.
func TestForwardAuthRouteBypassByPathAttack(t *testing.T) {
	t.Parallel()
	for _, front := range proxy.Fronts {
		g := routeGate(t)
		px := startProxyConfig(t, middleware.Observe, proxy.Config{ForwardAuth: front, Decide: g.Apply}, nil)
		for _, p := range append(routeAttackPaths, "/public/ok") {
			extra := map[string]string{"X-Original-Method": "GET", "X-Original-URI": p, "Host": "api.example.com",
				"X-Forwarded-Method": "GET", "X-Forwarded-Uri": p, "X-Forwarded-Host": "api.example.com", "X-Forwarded-For": "192.0.2.7"}
			resp, body := do(t, subrequest(t, px.URL, nil, extra))
			what := string(front) + " " + p
			switch {
			case p == "/public/ok":
				if resp.StatusCode != http.StatusOK {
					t.Errorf("%s: %d %s, want 200", what, resp.StatusCode, body)
				}
			case front == proxy.FrontNginx:
				if resp.StatusCode != http.StatusForbidden || resp.Header.Get(proxy.HeaderRefusalStatus) != "400" || errorCode(body) != "invalid_request" {
					t.Errorf("%s: %d %s %s, want 403 with refusal status 400 invalid_request", what, resp.StatusCode, resp.Header.Get(proxy.HeaderRefusalStatus), body)
				}
			default:
				if resp.StatusCode != http.StatusBadRequest || errorCode(body) != "invalid_request" {
					t.Errorf("%s: %d %s, want 400 invalid_request", what, resp.StatusCode, body)
				}
			}
		}
	}
}

// TestForwardAuthObserveRouteAgentHeadersAttack: behind nginx, whose
// auth_request cannot remove the client's headers from the request it
// then proxies, a client's own X-Agent-Metadata-Role on an observe route
// (the rules run the verifier in Observe mode) is refused, never answered
// 200: the service would read it as the proxy's word.
func TestForwardAuthObserveRouteAgentHeadersAttack(t *testing.T) {
	t.Parallel()
	g, err := rules.New(rules.Config{Mode: middleware.Required, Routes: []rules.Route{{Prefix: "/public/", Mode: middleware.Observe}}})
	if err != nil {
		t.Fatal(err)
	}
	px := startProxyConfig(t, middleware.Observe, proxy.Config{ForwardAuth: proxy.FrontNginx, Decide: g.Apply}, nil)
	for _, name := range []string{"X-Agent-Metadata-Role", "X-Agent-Uid", "x-agent-id", "X_Agent_Verdict"} {
		for _, sign := range []bool{false, true} {
			sig := http.Header{}
			if sign {
				sig = signFor(t, "GET", "/public/x")
			}
			extra := map[string]string{"X-Original-Method": "GET", "X-Original-URI": "/public/x", "Host": "api.example.com", "X-Forwarded-For": "192.0.2.7", name: "admin"}
			resp, body := do(t, subrequest(t, px.URL, sig, extra))
			if resp.StatusCode != http.StatusForbidden || errorCode(body) != "forbidden" {
				t.Errorf("%s (signed %v) on an observe route: %d %s, want 403 forbidden", name, sign, resp.StatusCode, body)
			}
		}
	}
	// Without them the observe route passes.
	resp, body := do(t, subrequest(t, px.URL, nil, map[string]string{"X-Original-Method": "GET", "X-Original-URI": "/public/x", "Host": "api.example.com", "X-Forwarded-For": "192.0.2.7"}))
	if resp.StatusCode != http.StatusOK {
		t.Errorf("observe route, no X-Agent-* header: %d %s, want 200", resp.StatusCode, body)
	}
}

// TestReverseProxyAgentTrailersAttack: X-Agent-* fields a client sends as
// trailers of a chunked body never reach the service either, in any mode.
func TestReverseProxyAgentTrailersAttack(t *testing.T) {
	t.Parallel()
	for _, mode := range []middleware.Mode{middleware.Optional, middleware.Observe} {
		var mu sync.Mutex
		var trailers []http.Header
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			mu.Lock()
			trailers = append(trailers, r.Trailer.Clone())
			mu.Unlock()
		}))
		t.Cleanup(up.Close)
		upURL, _ := url.Parse(up.URL)
		px := startProxyConfig(t, mode, proxy.Config{Upstream: upURL}, nil)
		c, err := net.Dial("tcp", px.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		req := "POST /things HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\nTrailer: X-Agent-Uid, X-Agent-Metadata-Role\r\nConnection: close\r\n\r\n" +
			"2\r\nhi\r\n0\r\nX-Agent-Uid: agent-ffffffffffffffffffffffff\r\nX-Agent-Metadata-Role: admin\r\n\r\n"
		status, _, body, _, err := rawExchange(t, c, bufio.NewReader(c), http.MethodPost, req)
		c.Close()
		if err != nil || status != http.StatusOK {
			t.Fatalf("%s: %d %s %v", mode, status, body, err)
		}
		mu.Lock()
		for _, tr := range trailers {
			if names := agentHeaderNames(tr); len(names) > 0 {
				t.Errorf("%s: the upstream got trailers %v", mode, names)
			}
		}
		if len(trailers) != 1 {
			t.Errorf("%s: upstream got %d requests, want 1", mode, len(trailers))
		}
		mu.Unlock()
	}
}

// TestForwardAuthClientAddressAttack: behind a front, every subrequest
// comes from the front's address; the per-address limit keys on the
// client the front names (the rightmost X-Forwarded-For entry, read only
// from a trusted front), so three requests from one client do not get the
// next client 429. A client's own X-Forwarded-For entries (further left)
// change nothing.
func TestForwardAuthClientAddressAttack(t *testing.T) {
	t.Parallel()
	for _, front := range proxy.Fronts {
		lim, err := agentlimit.New(agentlimit.Config{Address: agentlimit.Limit{Quota: 3, Window: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		g, err := rules.New(rules.Config{Mode: middleware.Optional, Limiter: lim})
		if err != nil {
			t.Fatal(err)
		}
		px := startProxyConfig(t, middleware.Observe, proxy.Config{ForwardAuth: front, Decide: g.Apply}, nil)
		send := func(xff string) int {
			extra := map[string]string{"X-Original-Method": "GET", "X-Original-URI": "/x", "Host": "api.example.com",
				"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/x", "X-Forwarded-Host": "api.example.com", "X-Forwarded-For": xff}
			resp, _ := do(t, subrequest(t, px.URL, nil, extra))
			return resp.StatusCode
		}
		want429 := http.StatusTooManyRequests
		if front == proxy.FrontNginx {
			want429 = http.StatusForbidden // with X-Agent-Refusal-Status 429
		}
		for i := 0; i < 3; i++ {
			// The client's own entry on the left is not its address.
			if got := send(fmt.Sprintf("10.9.9.%d, 198.51.100.1", i)); got != http.StatusOK {
				t.Fatalf("%s: request %d from the first client: %d, want 200", front, i+1, got)
			}
		}
		if got := send("198.51.100.1"); got != want429 {
			t.Errorf("%s: 4th request from the first client: %d, want %d", front, got, want429)
		}
		if got := send("198.51.100.2"); got != http.StatusOK {
			t.Errorf("%s: first request from the next client: %d, want 200", front, got)
		}
		if got := send("2001:db8::1"); got != http.StatusOK {
			t.Errorf("%s: first request from an IPv6 client: %d, want 200", front, got)
		}
		if got := send("not-an-address"); got == http.StatusOK {
			t.Errorf("%s: X-Forwarded-For not ending with an address: 200, want a refusal", front)
		}
	}
}
