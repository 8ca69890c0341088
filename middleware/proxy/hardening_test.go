package proxy_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// agentHeaderNames returns the headers of h whose name, case-folded with
// "_" read as "-", starts with x-agent-.
func agentHeaderNames(h http.Header) map[string][]string {
	out := map[string][]string{}
	for k, v := range h {
		if strings.HasPrefix(strings.ReplaceAll(strings.ToLower(k), "_", "-"), "x-agent-") {
			out[k] = v
		}
	}
	return out
}

// TestReverseProxyAgentHeaders sends X-Agent-* headers in spellings a
// client might use to forge or strip the identity, and checks that the
// upstream gets exactly the proxy's headers.
func TestReverseProxyAgentHeaders(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	px := newProxy(t, middleware.Optional, up, nil)
	tests := []struct {
		name   string
		signed bool
		header map[string]string // set raw, not canonicalised
		want   map[string]string // the X-Agent-* headers the upstream must see, exactly
	}{
		{
			name: "Connection names the proxy's headers", signed: true,
			header: map[string]string{"Connection": "close, X-Agent-Verdict, X-Agent-Outcome, X-Agent-Uid, X-Agent-Id, X-Agent-Key-Id"},
			want:   map[string]string{"X-Agent-Verdict": "verified", "X-Agent-Outcome": "verified", "X-Agent-Id": testOrigin, "X-Agent-Uid": testUID, "X-Agent-Key-Id": key.KeyID()},
		},
		{
			name: "Connection names them, unsigned", signed: false,
			header: map[string]string{"Connection": "X-Agent-Verdict", "X-Agent-Verdict": "verified"},
			want:   map[string]string{"X-Agent-Verdict": "unverified", "X-Agent-Outcome": "not-present", "X-Agent-Reason": "unsigned"},
		},
		{
			name:   "underscore spelling",
			header: map[string]string{"X_Agent_Uid": "agent-ffffffffffffffffffffffff", "X_AGENT_VERDICT": "verified", "x_agent-id": "https://evil.example"},
			want:   map[string]string{"X-Agent-Verdict": "unverified", "X-Agent-Outcome": "not-present", "X-Agent-Reason": "unsigned"},
		},
		{
			name:   "other case and other names",
			header: map[string]string{"x-AGENT-role": "admin", "X-Agent-Reason": "none", "x-agent-uid": "agent-ffffffffffffffffffffffff", "x_agent_outcome": "verified"},
			want:   map[string]string{"X-Agent-Verdict": "unverified", "X-Agent-Outcome": "not-present", "X-Agent-Reason": "unsigned"},
		},
		{
			name: "signed, with forged spellings", signed: true,
			header: map[string]string{"X_Agent_Uid": "agent-ffffffffffffffffffffffff", "x-AGENT-role": "admin", "Connection": "x-agent-uid"},
			want:   map[string]string{"X-Agent-Verdict": "verified", "X-Agent-Outcome": "verified", "X-Agent-Id": testOrigin, "X-Agent-Uid": testUID, "X-Agent-Key-Id": key.KeyID()},
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r *http.Request
			if tc.signed {
				r = signed(t, px.URL, nil)
			} else {
				r = unsigned(t, px.URL)
			}
			path := "/h" + string(rune('a'+i))
			r.URL.Path = path
			if tc.signed { // the signature covers only @authority
				r.URL.RawQuery = ""
			}
			for k, v := range tc.header {
				r.Header[k] = []string{v}
			}
			n := len(up.requests())
			resp, body := do(t, r)
			if resp.StatusCode != http.StatusOK || len(up.requests()) != n+1 {
				t.Fatalf("answered %d %s, upstream saw %d requests, want 200 and one", resp.StatusCode, body, len(up.requests())-n)
			}
			got := agentHeaderNames(up.requests()[n])
			for k, v := range got {
				if w, ok := tc.want[http.CanonicalHeaderKey(k)]; !ok || len(v) != 1 || v[0] != w {
					t.Errorf("the upstream got %s: %q, want %q", k, v, w)
				}
			}
			for k, w := range tc.want {
				if g := up.requests()[n].Get(k); g != w {
					t.Errorf("the upstream got %s %q, want %q", k, g, w)
				}
			}
		})
	}
}

// TestUIDOnlyForServices: X-Agent-Uid is given only for an identity
// <scheme>://<uid>.<host> of a configured agentid service.
func TestUIDOnlyForServices(t *testing.T) {
	t.Parallel()
	const uid = "agent-00000000000000000000abcd"
	tests := []struct {
		origin  string
		wantUID string
	}{
		{"https://" + uid + ".agentid.example", uid},
		{"https://" + uid + ".evil.example", ""},
		{"https://" + uid + ".sub.agentid.example", ""},
		{"http://" + uid + ".agentid.example", ""},
		{"https://" + uid + ".agentid.example:8443", ""},
		{"https://" + uid + ".other.example:8443", uid},
	}
	keys := middleware.NewStaticKeys()
	for _, tc := range tests {
		keys.Add(tc.origin, key.Public)
	}
	v, err := middleware.New(middleware.Config{Keys: keys, Now: clock, AllowMissingSignatureAgent: false, Authorities: []string{"api.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t)
	u, _ := url.Parse(up.URL)
	h, err := proxy.New(proxy.Config{Verifier: v, Upstream: u, Services: []string{"https://agentid.example", "other.example:8443"}})
	if err != nil {
		t.Fatal(err)
	}
	px := httptest.NewServer(h)
	t.Cleanup(px.Close)
	// check sends a request signed by agent through pxURL and compares the
	// agent headers the upstream got.
	check := func(label, pxURL, agent, wantID, wantUID string) {
		t.Helper()
		r := signed(t, pxURL, func(o *signer.Options) { o.SignatureAgent = agent })
		n := len(up.requests())
		if resp, body := do(t, r); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s%s: %d %s", label, agent, resp.StatusCode, body)
		}
		got := up.requests()[n]
		if got.Get("X-Agent-Uid") != wantUID || got.Get("X-Agent-Id") != wantID {
			t.Errorf("%s%s: X-Agent-Uid %q X-Agent-Id %q, want %q %q", label, agent, got.Get("X-Agent-Uid"), got.Get("X-Agent-Id"), wantUID, wantID)
		}
	}
	for _, tc := range tests {
		check("", px.URL, tc.origin, tc.origin, tc.wantUID)
	}

	// The strict-01 profile's identity is the URL as fetched, the origin's
	// root URL: it gets the uid too, and a path below the root does not.
	strictKeys := middleware.NewStaticKeys()
	for _, id := range []string{tests[0].origin + "/", tests[0].origin + "/x"} {
		strictKeys.Add(id, key.Public)
	}
	sv, err := middleware.New(middleware.Config{Keys: strictKeys, Now: clock, Profile: middleware.ProfileStrict01, Authorities: []string{"api.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := proxy.New(proxy.Config{Verifier: sv, Upstream: u, Services: []string{"https://agentid.example"}})
	if err != nil {
		t.Fatal(err)
	}
	spx := httptest.NewServer(sh)
	t.Cleanup(spx.Close)
	for _, tc := range []struct{ agent, wantID, wantUID string }{
		{tests[0].origin, tests[0].origin + "/", uid},
		{tests[0].origin + "/x", tests[0].origin + "/x", ""},
	} {
		check("strict-01 ", spx.URL, tc.agent, tc.wantID, tc.wantUID)
	}
}

// subrequest is an auth subrequest to px carrying sig (the signature
// headers of the original request) and extra headers; X-Forwarded-For (the
// client's address, which every front sets) is 192.0.2.1 unless extra sets
// it ("" removes it).
func subrequest(t *testing.T, px string, sig http.Header, extra map[string]string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(http.MethodGet, px+"/_agentid", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("X-Forwarded-For", "192.0.2.1")
	if v, ok := extra["X-Forwarded-For"]; ok && v == "" {
		r.Header.Del("X-Forwarded-For")
		delete(extra, "X-Forwarded-For")
	}
	for k, v := range sig {
		r.Header[k] = v
	}
	for k, v := range extra {
		if k == "Host" {
			r.Host = v
			continue
		}
		r.Header[k] = []string{v}
	}
	return r
}

// signFor signs method https://api.example.com+uri over @method,
// @authority, @path and @query.
func signFor(t *testing.T, method, uri string) http.Header {
	t.Helper()
	r, _ := http.NewRequest(method, "https://api.example.com"+uri, nil)
	if err := signer.Sign(r, key, signer.Options{SignatureAgent: testOrigin, Now: clock, Components: []string{"@method", "@authority", "@path", "@query"}}); err != nil {
		t.Fatal(err)
	}
	return r.Header
}

// errorCode reads the code of a JSON error body.
func errorCode(body string) string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	json.Unmarshal([]byte(body), &e)
	return e.Error.Code
}

// TestForwardAuthReadsOnlyItsFront: each front's endpoint rebuilds the
// original request from that front's headers only, so headers of another
// front (which the client may send) cannot change the verified method,
// path or host.
func TestForwardAuthReadsOnlyItsFront(t *testing.T) {
	t.Parallel()
	nginx := startProxyConfig(t, middleware.Required, proxy.Config{ForwardAuth: proxy.FrontNginx}, nil)
	traefik := startProxyConfig(t, middleware.Required, proxy.Config{ForwardAuth: proxy.FrontTraefik}, nil)
	caddy := startProxyConfig(t, middleware.Required, proxy.Config{ForwardAuth: proxy.FrontCaddy}, nil)
	fwd := func(method, host, uri string) map[string]string {
		return map[string]string{"X-Forwarded-Method": method, "X-Forwarded-Host": host, "X-Forwarded-Uri": uri, "X-Forwarded-Proto": "https"}
	}
	orig := func(method, host, uri string) map[string]string {
		return map[string]string{"X-Original-Method": method, "Host": host, "X-Original-URI": uri}
	}
	merge := func(a, b map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range a {
			out[k] = v
		}
		for k, v := range b {
			out[k] = v
		}
		return out
	}
	tests := []struct {
		name   string
		px     string
		signed [2]string // method, uri the agent signed
		extra  map[string]string
		status int
		code   string
	}{
		// The hole: a signature for GET /public authorising POST
		// /admin/transfer because the client's X-Forwarded-* were
		// believed over nginx's X-Original-*.
		{"nginx, real POST /admin/transfer, client claims GET /public", nginx.URL, [2]string{"GET", "/public"},
			merge(orig("POST", "api.example.com", "/admin/transfer"), fwd("GET", "api.example.com", "/public")), 401, "invalid_signature"},
		{"nginx, real GET /public, client claims POST /admin", nginx.URL, [2]string{"GET", "/public"},
			merge(orig("GET", "api.example.com", "/public"), fwd("POST", "api.example.com", "/admin")), 200, ""},
		{"nginx, client claims another host", nginx.URL, [2]string{"GET", "/public"},
			merge(orig("GET", "evil.example", "/public"), fwd("GET", "api.example.com", "/public")), 421, "misdirected_request"},
		{"nginx, only X-Forwarded-*", nginx.URL, [2]string{"GET", "/public"},
			fwd("GET", "api.example.com", "/public"), 400, "invalid_request"},
		{"traefik, client adds X-Original-*", traefik.URL, [2]string{"GET", "/public"},
			merge(fwd("POST", "api.example.com", "/admin/transfer"), orig("GET", "api.example.com", "/public")), 401, "invalid_signature"},
		{"traefik, its own headers", traefik.URL, [2]string{"GET", "/public"},
			merge(fwd("GET", "api.example.com", "/public"), orig("POST", "api.example.com", "/admin")), 200, ""},
		{"caddy, client adds X-Original-*", caddy.URL, [2]string{"GET", "/public"},
			merge(fwd("POST", "api.example.com", "/admin/transfer"), orig("GET", "api.example.com", "/public")), 401, "invalid_signature"},
		{"traefik, no method", traefik.URL, [2]string{"GET", "/public"},
			map[string]string{"X-Forwarded-Host": "api.example.com", "X-Forwarded-Uri": "/public"}, 400, "invalid_request"},
	}
	for _, tc := range tests {
		resp, body := do(t, subrequest(t, tc.px, signFor(t, tc.signed[0], tc.signed[1]), tc.extra))
		status := tc.status
		if tc.px == nginx.URL && status != 200 && status != 401 && status != 403 {
			status = 403 // nginx's auth_request passes only 401 and 403 on
		}
		if resp.StatusCode != status || errorCode(body) != tc.code {
			t.Errorf("%s: %d %s, want %d %q", tc.name, resp.StatusCode, body, status, tc.code)
		}
		if tc.status == 200 && resp.Header.Get("X-Agent-Verdict") != "verified" {
			t.Errorf("%s: X-Agent-Verdict %q, want verified", tc.name, resp.Header.Get("X-Agent-Verdict"))
		}
		if tc.status != 200 && resp.Header.Get(proxy.HeaderRefusal) != strings.TrimSpace(body) {
			t.Errorf("%s: X-Agent-Refusal %q, want the body %q", tc.name, resp.Header.Get(proxy.HeaderRefusal), body)
		}
	}
}

// TestForwardAuthNginxStatus: nginx's auth_request turns a subrequest's
// answer other than 2xx, 401 and 403 into its own 500, so for nginx every
// refusal names its status in X-Agent-Refusal-Status and one with another
// status is answered 403, the JSON body keeping the real status; other
// fronts get the real status and no X-Agent-Refusal-Status.
func TestForwardAuthNginxStatus(t *testing.T) {
	t.Parallel()
	// The key set of other.example cannot be fetched: 503 key_fetch_failed.
	keys := middleware.NewStaticKeys()
	keys.Add(testOrigin, key.Public)
	down := middleware.KeySourceFunc(func(ctx context.Context, set signer.KeySet, keyID string) (signer.PublicKey, error) {
		if strings.HasPrefix(set.URL, "https://down.agentid.example/") {
			return signer.PublicKey{}, middleware.Fail(middleware.CodeKeyFetchFailed, "the key set could not be fetched")
		}
		return keys.Key(ctx, set, keyID)
	})
	v, err := middleware.New(middleware.Config{Keys: down, Now: clock, Authorities: []string{"api.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	nginx := startProxyConfig(t, middleware.Required, proxy.Config{Verifier: v, ForwardAuth: proxy.FrontNginx}, nil)
	caddy := startProxyConfig(t, middleware.Required, proxy.Config{Verifier: v, ForwardAuth: proxy.FrontCaddy}, nil)
	downSig := func() http.Header {
		r, _ := http.NewRequest(http.MethodGet, "https://api.example.com/public", nil)
		if err := signer.Sign(r, key, signer.Options{SignatureAgent: "https://down.agentid.example", Now: clock}); err != nil {
			t.Fatal(err)
		}
		return r.Header
	}
	good := func() http.Header { return signFor(t, "GET", "/public") }
	orig := func(host string) map[string]string {
		return map[string]string{"X-Original-Method": "GET", "Host": host, "X-Original-URI": "/public",
			"X-Forwarded-Method": "GET", "X-Forwarded-Host": host, "X-Forwarded-Uri": "/public"}
	}
	tests := []struct {
		name   string
		sig    func() http.Header
		host   string
		status int // the real status
		code   string
	}{
		{"verified", good, "api.example.com", 200, ""},
		{"unsigned", http.Header{}.Clone, "api.example.com", 401, "missing_signature"},
		{"X-Agent-* from the client", http.Header{"X-Agent-Uid": {testUID}}.Clone, "api.example.com", 403, "forbidden"},
		{"a host not served", good, "evil.example", 421, "misdirected_request"},
		{"the key set cannot be fetched", downSig, "api.example.com", 503, "key_fetch_failed"},
		{"a Host that does not parse", good, "api.example.com:1:2", 400, "invalid_authority"},
	}
	for _, tc := range tests {
		for _, px := range []*httptest.Server{nginx, caddy} {
			isNginx := px == nginx
			resp, body := do(t, subrequest(t, px.URL, tc.sig(), orig(tc.host)))
			want, wantHeader := tc.status, ""
			if isNginx && tc.status != 200 {
				wantHeader = strconv.Itoa(tc.status)
				if tc.status != 401 && tc.status != 403 {
					want = 403
				}
			}
			var e struct {
				Error struct {
					Status int
					Code   string
				} `json:"error"`
			}
			json.Unmarshal([]byte(body), &e)
			if resp.StatusCode != want || e.Error.Code != tc.code || (tc.status != 200 && e.Error.Status != tc.status) {
				t.Errorf("%s (nginx %v): %d %s, want %d with code %q and status %d in the body", tc.name, isNginx, resp.StatusCode, body, want, tc.code, tc.status)
			}
			if got := resp.Header.Get(proxy.HeaderRefusalStatus); got != wantHeader {
				t.Errorf("%s (nginx %v): %s %q, want %q", tc.name, isNginx, proxy.HeaderRefusalStatus, got, wantHeader)
			}
		}
	}
}

// TestForwardAuthFrom: only configured addresses get an answer.
func TestForwardAuthFrom(t *testing.T) {
	t.Parallel()
	elsewhere := startProxyConfig(t, middleware.Required, proxy.Config{ForwardAuth: proxy.FrontNginx,
		ForwardAuthFrom: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}, nil)
	here := startProxyConfig(t, middleware.Required, proxy.Config{ForwardAuth: proxy.FrontNginx}, nil)
	extra := map[string]string{"X-Original-Method": "GET", "Host": "api.example.com", "X-Original-URI": "/public"}

	resp, body := do(t, subrequest(t, elsewhere.URL, signFor(t, "GET", "/public"), extra))
	if resp.StatusCode != http.StatusForbidden || errorCode(body) != "forbidden" || !strings.Contains(body, "127.0.0.1") ||
		resp.Header.Get("X-Agent-Verdict") != "" || resp.Header.Get(proxy.HeaderRefusal) != strings.TrimSpace(body) {
		t.Errorf("from loopback, only 192.0.2.0/24 allowed: %d %s %v, want 403 forbidden naming the address", resp.StatusCode, body, resp.Header)
	}
	if resp, body := do(t, subrequest(t, here.URL, signFor(t, "GET", "/public"), extra)); resp.StatusCode != http.StatusOK {
		t.Errorf("from loopback, by default: %d %s, want 200", resp.StatusCode, body)
	}
}

// TestForwardAuthAgentHeaders: a forward-auth endpoint cannot remove
// headers from the original request, so one carrying any X-Agent-*
// spelling is refused, in every mode (observe too: the service would read
// them).
func TestForwardAuthAgentHeaders(t *testing.T) {
	t.Parallel()
	for _, mode := range []middleware.Mode{middleware.Required, middleware.Optional, middleware.Observe} {
		px := startProxyConfig(t, mode, proxy.Config{ForwardAuth: proxy.FrontNginx}, nil)
		for _, name := range []string{"X-Agent-Uid", "x-AGENT-role", "X_Agent_Uid", "X-Agent-Reason"} {
			for _, sign := range []bool{true, false} {
				sig := http.Header{}
				if sign {
					sig = signFor(t, "GET", "/public")
				}
				extra := map[string]string{"X-Original-Method": "GET", "Host": "api.example.com", "X-Original-URI": "/public", name: "x"}
				resp, body := do(t, subrequest(t, px.URL, sig, extra))
				what := mode.String() + " " + name
				if resp.StatusCode != http.StatusForbidden || errorCode(body) != "forbidden" || !strings.Contains(strings.ToLower(body), strings.ToLower(name)) {
					t.Errorf("%s (signed %v): %d %s, want 403 forbidden naming the header", what, sign, resp.StatusCode, body)
				}
			}
		}
	}
}

// TestForwardAuthContentDigest: the subrequest has no body, so a signature
// covering content-digest is refused before anything is verified (its
// nonce stays unspent).
func TestForwardAuthContentDigest(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, middleware.Required)
	auth := startProxyConfig(t, middleware.Required, proxy.Config{Verifier: v, ForwardAuth: proxy.FrontNginx}, nil)
	up := newUpstream(t)
	u, _ := url.Parse(up.URL)
	rev := startProxyConfig(t, middleware.Required, proxy.Config{Verifier: v, Upstream: u}, nil)

	for _, comp := range []string{"content-digest", `"content-digest";sf`} {
		digest, _ := signer.ContentDigest(nil, "sha-256")
		r, _ := http.NewRequest(http.MethodPost, "https://api.example.com/transfer", nil)
		r.Header.Set("Content-Digest", digest)
		if err := signer.Sign(r, key, signer.Options{SignatureAgent: testOrigin, Now: clock, Components: []string{"@method", "@authority", "@path", comp}}); err != nil {
			t.Fatal(err)
		}
		extra := map[string]string{"X-Original-Method": "POST", "Host": "api.example.com", "X-Original-URI": "/transfer"}
		resp, body := do(t, subrequest(t, auth.URL, r.Header, extra))
		if resp.StatusCode != http.StatusUnauthorized || errorCode(body) != "invalid_signature_input" || !strings.Contains(body, "content-digest") || resp.Header.Get("Accept-Signature") == "" {
			t.Errorf("%s through forward-auth: %d %s, want 401 invalid_signature_input about content-digest", comp, resp.StatusCode, body)
		}
		// The same signature, with its (empty) body, through the reverse
		// proxy, which sees the body: accepted, so the nonce was unspent.
		fwd, _ := http.NewRequest(http.MethodPost, rev.URL+"/transfer", http.NoBody)
		fwd.Host = "api.example.com"
		for k, vv := range r.Header {
			fwd.Header[k] = vv
		}
		if resp, body := do(t, fwd); resp.StatusCode != http.StatusOK {
			t.Errorf("%s through the reverse proxy: %d %s, want 200", comp, resp.StatusCode, body)
		}
	}
}

// TestUpstreamConnectionReuse counts the connections the upstream accepts
// for many sequential and concurrent proxied requests: the proxy keeps
// them open and reuses them.
func TestUpstreamConnectionReuse(t *testing.T) {
	t.Parallel()
	var accepted atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	px := startProxyConfig(t, middleware.Optional, proxy.Config{Upstream: u}, nil)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	get := func() error {
		r, _ := http.NewRequest(http.MethodGet, px.URL+"/x", nil)
		r.Header.Set("Connection", "close, X-Agent-Verdict") // the client's own connection only
		resp, err := client.Do(r)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return &url.Error{Op: "GET", URL: r.URL.String(), Err: io.ErrUnexpectedEOF}
		}
		return nil
	}
	const sequential = 50
	for range sequential {
		if err := get(); err != nil {
			t.Fatal(err)
		}
	}
	// One connection serves them all; a second may be dialled when a
	// request races the return of the first to the idle pool.
	if n := accepted.Load(); n > 3 {
		t.Errorf("%d sequential requests: the upstream accepted %d connections, want 1 (at most 3)", sequential, n)
	}

	const concurrency, rounds = 16, 6
	before := accepted.Load()
	for range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, concurrency)
		for range concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := get(); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	// Each round needs at most `concurrency` connections; kept idle, they
	// serve the next rounds. Without reuse each round opens most anew.
	if n := accepted.Load() - before; n > 2*concurrency {
		t.Errorf("%d rounds of %d concurrent requests: the upstream accepted %d new connections, want at most %d", rounds, concurrency, n, 2*concurrency)
	}
}

// TestAccessLogFields: JSON lines with duration_ms, and the upstream's
// error on 502.
func TestAccessLogFields(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	var log signertest.SyncBuffer
	px := startProxyConfig(t, middleware.Required, proxy.Config{Upstream: mustURL(up.URL)}, &log)
	up.Close()
	resp, _ := do(t, signed(t, px.URL, nil))
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("upstream down: %d, want 502", resp.StatusCode)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(log.String())), &line); err != nil {
		t.Fatalf("access log %q: %v", log.String(), err)
	}
	if _, ok := line["duration_ms"].(float64); !ok || line["duration"] != nil {
		t.Errorf("access log %v: want a numeric duration_ms and no duration", line)
	}
	if e, _ := line["upstream_error"].(string); !strings.Contains(e, "connect") && !strings.Contains(e, "refused") {
		t.Errorf("access log %v: want the upstream error", line)
	}
	if line["status"] != float64(502) || line["verdict"] != "verified" {
		t.Errorf("access log %v: want status 502 and verdict verified", line)
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// BenchmarkUpstreamPool sends unsigned requests (optional mode) through
// the proxy from many goroutines at once, with the proxy's default
// transport and, as baselines in the same run, with a transport that
// keeps http.DefaultTransport's 2 idle connections per host and with
// NewTransport's http.Transport (the default's pool size, without its
// direct path). It reports the upstream connections opened per 1000
// requests.
func BenchmarkUpstreamPool(b *testing.B) {
	for _, bc := range []struct {
		name      string
		transport func() http.RoundTripper
	}{
		{"idle-2-baseline", func() http.RoundTripper {
			t := http.DefaultTransport.(*http.Transport).Clone()
			t.Proxy = nil
			return t
		}},
		// http.Transport with the default's pool size: the default
		// differs by its direct path for bodiless requests.
		{"http-transport-256", func() http.RoundTripper { return proxy.NewTransport(0) }},
		{"default", func() http.RoundTripper { return nil }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var accepted atomic.Int64
			up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
			up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					accepted.Add(1)
				}
			}
			up.Start()
			defer up.Close()
			keys := middleware.NewStaticKeys()
			v, err := middleware.New(middleware.Config{Keys: keys, Now: clock, Mode: middleware.Optional, Authorities: []string{"api.example.com"}})
			if err != nil {
				b.Fatal(err)
			}
			h, err := proxy.New(proxy.Config{Verifier: v, Upstream: mustURL(up.URL), Transport: bc.transport()})
			if err != nil {
				b.Fatal(err)
			}
			px := httptest.NewServer(h)
			defer px.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Get(px.URL + "/x")
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(accepted.Load())*1000/float64(b.N), "upstream-conns/1000req")
		})
	}
}

// TestForwardAuthCaddyHeaders: Caddy 2.6's copy_headers passes a header
// missing from the answer to the service as its placeholder's text, so
// for Caddy every header it may copy is in the answer, empty when it does
// not apply; Traefik copies only what is there and gets no empty ones.
func TestForwardAuthCaddyHeaders(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, middleware.Optional)
	caddy := startProxyConfig(t, middleware.Optional, proxy.Config{Verifier: v, ForwardAuth: proxy.FrontCaddy, Services: []string{"https://other.example"}}, nil)
	traefik := startProxyConfig(t, middleware.Optional, proxy.Config{Verifier: v, ForwardAuth: proxy.FrontTraefik, Services: []string{"https://other.example"}}, nil)
	fwd := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Host": "api.example.com", "X-Forwarded-Uri": "/public", "X-Forwarded-Proto": "https"}
	all := []string{proxy.HeaderOutcome, proxy.HeaderVerdict, proxy.HeaderID, proxy.HeaderUID, proxy.HeaderKeyID, proxy.HeaderReason}
	tests := []struct {
		name string
		sig  func() http.Header
		want map[string]string // the non-empty X-Agent-* headers
	}{
		// No uid: the agent is not of a configured service.
		{"verified", func() http.Header { return signFor(t, "GET", "/public") }, map[string]string{proxy.HeaderOutcome: "verified", proxy.HeaderVerdict: "verified", proxy.HeaderID: testOrigin, proxy.HeaderKeyID: key.KeyID()}},
		{"unsigned", http.Header{}.Clone, map[string]string{proxy.HeaderOutcome: "not-present", proxy.HeaderVerdict: "unverified", proxy.HeaderReason: "unsigned"}},
	}
	for _, tc := range tests {
		for _, px := range []*httptest.Server{caddy, traefik} {
			isCaddy := px == caddy
			resp, body := do(t, subrequest(t, px.URL, tc.sig(), fwd))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s (caddy %v): %d %s, want 200", tc.name, isCaddy, resp.StatusCode, body)
			}
			for _, name := range all {
				got, present := resp.Header[name]
				w, ok := tc.want[name]
				switch {
				case ok && (len(got) != 1 || got[0] != w):
					t.Errorf("%s (caddy %v): %s %q, want %q", tc.name, isCaddy, name, got, w)
				case !ok && isCaddy && (len(got) != 1 || got[0] != ""):
					t.Errorf("%s (caddy): %s %q (present %v), want present and empty", tc.name, name, got, present)
				case !ok && !isCaddy && present:
					t.Errorf("%s (traefik): %s %q, want none", tc.name, name, got)
				}
			}
		}
	}
}

// TestForwardAuthContentDigestTags: the precheck looks at the signatures
// the verifier checks (those with its tag), as the verification does: a
// signature for another verifier that covers content-digest does not get
// the request refused, and the verifier's own one does.
func TestForwardAuthContentDigestTags(t *testing.T) {
	t.Parallel()
	keys := middleware.NewStaticKeys()
	keys.Add(testOrigin, key.Public)
	v, err := middleware.New(middleware.Config{Keys: keys, Now: clock, Mode: middleware.Required,
		Authorities: []string{"api.example.com"}, Tag: "example-tag"})
	if err != nil {
		t.Fatal(err)
	}
	auth := startProxyConfig(t, middleware.Required, proxy.Config{Verifier: v, ForwardAuth: proxy.FrontNginx}, nil)
	digest, _ := signer.ContentDigest(nil, "sha-256")
	plain := []string{"@method", "@authority", "@path"}
	withDigest := []string{"@method", "@authority", "@path", "content-digest"}
	for _, tt := range []struct {
		name        string
		own, other  []string // components of the verifier's signature and of another tag's
		status      int
		wantRefusal bool
	}{
		{"another tag's signature covers content-digest", plain, withDigest, http.StatusOK, false},
		{"the verifier's signature covers content-digest", withDigest, plain, http.StatusUnauthorized, true},
	} {
		// Two signatures (sig1 with the verifier's tag, sig2 with
		// another), each made on its own copy, then joined as a signer
		// adding a second signature would send them.
		sign := func(label, tag string, comps []string) http.Header {
			r, _ := http.NewRequest(http.MethodPost, "https://api.example.com/transfer", nil)
			r.Header.Set("Content-Digest", digest)
			if err := signer.Sign(r, key, signer.Options{Label: label, Tag: tag, SignatureAgent: testOrigin, Now: clock, Components: comps}); err != nil {
				t.Fatal(err)
			}
			return r.Header
		}
		h1, h2 := sign("sig1", "example-tag", tt.own), sign("sig2", "web-bot-auth", tt.other)
		for _, k := range []string{"Signature", "Signature-Input", "Signature-Agent"} {
			h1.Set(k, h1.Get(k)+", "+h2.Get(k))
		}
		extra := map[string]string{"X-Original-Method": "POST", "Host": "api.example.com", "X-Original-URI": "/transfer"}
		resp, body := do(t, subrequest(t, auth.URL, h1, extra))
		refused := errorCode(body) == "invalid_signature_input" && strings.Contains(body, "content-digest")
		if resp.StatusCode != tt.status || refused != tt.wantRefusal {
			t.Errorf("%s: %d %s, want %d (refused for content-digest: %v)", tt.name, resp.StatusCode, body, tt.status, tt.wantRefusal)
		}
	}
}
