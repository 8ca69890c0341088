package caddyagentid_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/agentid/agentid/middleware/caddyagentid"
	"github.com/agentid/agentid/middleware/internal/redistest"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// caddyBin is the Caddy binary built from ./cmd/caddy by TestMain.
var caddyBin string

// TestMain builds Caddy with the agentid module (the Go build cache makes
// later builds quick) before the tests run it.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "caddyagentid")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	caddyBin = filepath.Join(dir, "caddy")
	build := exec.Command("go", "build", "-o", caddyBin, "./cmd/caddy")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building caddy with the agentid module:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

// startCaddy runs the built Caddy with site (site blocks) on loopback,
// admin endpoint and automatic HTTPS off, until the test ends; it returns
// once 127.0.0.1:port accepts connections.
func startCaddy(t testing.TB, port, site string) {
	t.Helper()
	startCaddyWith(t, port, "", site)
}

// startCaddyWith is startCaddy with more global options (lines of the
// global options block).
func startCaddyWith(t testing.TB, port, global, site string) {
	t.Helper()
	dir := t.TempDir()
	conf := fmt.Sprintf("{\n\tadmin off\n\tauto_https off\n\tdefault_bind 127.0.0.1\n\tstorage file_system %s\n%s}\n\n%s", filepath.Join(dir, "data"), global, site)
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(caddyBin, "run", "--config", file, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("caddy exited before listening (%v):\n%s\nconfig:\n%s", err, out.String(), conf)
		default:
		}
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("caddy does not listen on 127.0.0.1:%s after 30 s:\n%s", port, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// agentKeys serves key's directory, for every host (an agent's origin is
// http://<uid>.localhost:PORT), and returns its port.
func agentKeys(t testing.TB, key signer.PrivateKey) string {
	t.Helper()
	body := `{"keys":[` + string(key.Public.JWK.MarshalPublic()) + `]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != signer.DirectoryPath {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", signer.DirectoryMediaType)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://127.0.0.1:")
}

// upstream records what reaches the service behind Caddy.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string][]seenRequest
}

type seenRequest struct {
	header, trailer http.Header
	body            string
}

func newUpstream(t testing.TB) *upstream {
	u := &upstream{seen: map[string][]seenRequest{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.seen[r.URL.Path] = append(u.seen[r.URL.Path], seenRequest{r.Header.Clone(), r.Trailer.Clone(), string(b)})
		u.mu.Unlock()
		io.WriteString(w, "upstream "+r.URL.Path)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) got(path string) []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[path]
}

// agentHeaders returns the X-Agent-* headers of h (in any spelling), each
// with its values joined.
func agentHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		if proxy.IsAgentHeader(k) {
			out[k] = strings.Join(v, ",")
		}
	}
	return out
}

func sameHeaders(got, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// errorCode reads the code of a JSON error body.
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	json.Unmarshal(body, &e)
	return e.Error.Code
}

// TestCaddyModule runs a Caddy built with the module in front of an echo
// service, with an agent's key directory served on loopback, and checks
// what a client gets through it: a verified request reaches the service
// with the identity headers; unsigned, replayed and tampered requests and
// signatures for another host are refused as the verifier refuses them;
// the route modes; and no X-Agent-* header of the client reaches the
// service, whatever its spelling, nor can Connection remove ours.
func TestCaddyModule(t *testing.T) {
	key := signertest.Key(0x41)
	const uid = "agent-0123456789abcdef01234567"
	keyPort := agentKeys(t, key)
	origin := "http://" + uid + ".localhost:" + keyPort
	up := newUpstream(t)
	port := freePort(t)
	host := "app.example.com:" + port
	// Every host reaches the site (so that a request for another one
	// reaches the module); the module serves app.example.com only.
	startCaddy(t, port, fmt.Sprintf(`http://:%s {
	uri strip_prefix /v1
	agentid {
		authorities %s
		trust *.localhost:*
		allow_http
		allow_private
		agentid_services http://localhost:%s
		mode required
		route /optional/ optional
		route /observe/ observe
		deny hosts *.denied.localhost
	}
	reverse_proxy %s
}
`, port, host, keyPort, strings.TrimPrefix(up.URL, "http://")))
	base := "http://127.0.0.1:" + port
	client := &http.Client{Timeout: 10 * time.Second}

	// signed is method path (with body) signed by the agent for host,
	// addressed to Caddy.
	signed := func(method, host, path, body string, components ...string) *http.Request {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, "http://"+host+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if err := signer.Sign(req, key, signer.Options{SignatureAgent: origin, Components: components}); err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Body = io.NopCloser(strings.NewReader(body))
		}
		req.URL.Scheme, req.URL.Host = "http", "127.0.0.1:"+port
		req.Host = host
		return req
	}
	send := func(req *http.Request) (*http.Response, []byte) {
		t.Helper()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", req.Method, req.URL, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	// refused wants req refused with status and code, Accept-Signature on
	// 401, and the service never reached at path.
	refused := func(what string, req *http.Request, path string, status int, code string) {
		t.Helper()
		resp, body := send(req)
		if resp.StatusCode != status || errorCode(body) != code {
			t.Errorf("%s: %d %s, want %d %s", what, resp.StatusCode, body, status, code)
		}
		if status == http.StatusUnauthorized && resp.Header.Get("Accept-Signature") == "" {
			t.Errorf("%s: a 401 without Accept-Signature", what)
		}
		if n := len(up.got(path)); n != 0 {
			t.Errorf("%s: the service saw %d requests at %s, want none", what, n, path)
		}
	}
	// passed wants req answered by the service at path with exactly the
	// X-Agent-* headers want, and returns what the service saw.
	passed := func(what string, req *http.Request, path string, want map[string]string) seenRequest {
		t.Helper()
		resp, body := send(req)
		if resp.StatusCode != http.StatusOK || string(body) != "upstream "+path {
			t.Fatalf("%s: %d %s, want 200 from the service at %s", what, resp.StatusCode, body, path)
		}
		seen := up.got(path)
		if len(seen) != 1 {
			t.Fatalf("%s: the service saw %d requests at %s, want 1", what, len(seen), path)
		}
		if got := agentHeaders(seen[0].header); !sameHeaders(got, want) {
			t.Errorf("%s: the service got X-Agent-* headers %v, want %v", what, got, want)
		}
		return seen[0]
	}
	verified := map[string]string{"X-Agent-Outcome": "verified", "X-Agent-Verdict": "verified", "X-Agent-Id": origin, "X-Agent-Key-Id": key.KeyID(), "X-Agent-Uid": uid}
	full := []string{"@method", "@authority", "@path", "@query"}

	// Verified, with the client's own X-Agent-* headers in several
	// spellings and a Connection header naming ours.
	req := signed("GET", host, "/api/verified?q=1", "", full...)
	req.Header.Set("X-Agent-Uid", "agent-ffffffffffffffffffffffff")
	req.Header.Set("X-Agent-Verdict", "verified")
	req.Header["x-agent-role"] = []string{"admin"}
	req.Header["X_Agent_Id"] = []string{"https://evil.example"}
	req.Header["X-AGENT-REASON"] = []string{"none"}
	req.Header["X_Agent_Outcome"] = []string{"verified"}
	req.Header.Set("X-Agent-Outcome", "invalid")
	req.Header.Set("Connection", "X-Agent-Uid, x-agent-verdict, X-Agent-Id, X-Agent-Key-Id, X-Agent-Outcome")
	passed("verified", req, "/api/verified", verified)

	// The same signature again: replayed.
	again := signed("GET", host, "/api/replayed", "", full...)
	passed("first use", again.Clone(again.Context()), "/api/replayed", verified)
	resp, body := send(again)
	if resp.StatusCode != http.StatusUnauthorized || errorCode(body) != "replayed_nonce" {
		t.Errorf("replayed signature: %d %s, want 401 replayed_nonce", resp.StatusCode, body)
	}
	if n := len(up.got("/api/replayed")); n != 1 {
		t.Errorf("replayed signature: the service saw %d requests, want 1 (the first)", n)
	}

	// Unsigned on a required route.
	unsigned, _ := http.NewRequest("GET", base+"/api/unsigned", nil)
	unsigned.Host = host
	unsigned.Header.Set("X-Agent-Verdict", "verified")
	refused("unsigned, required", unsigned, "/api/unsigned", http.StatusUnauthorized, "missing_signature")

	// A signature made for another host, sent with that Host.
	other := signed("GET", "other.example.com:"+port, "/api/other", "", full...)
	refused("signed for another host", other, "/api/other", http.StatusMisdirectedRequest, "misdirected_request")
	// The same signature sent with this site's Host: the authority it
	// covers differs.
	other = signed("GET", "other.example.com:"+port, "/api/other", "", full...)
	other.Host = host
	refused("signed for another host, sent to this one", other, "/api/other", http.StatusUnauthorized, "invalid_signature")

	// An agent the deny list names: 403, whatever the route.
	denied, _ := http.NewRequest("GET", "http://"+host+"/optional/denied", nil)
	if err := signer.Sign(denied, key, signer.Options{SignatureAgent: "http://bot.denied.localhost:" + keyPort, Components: full}); err != nil {
		t.Fatal(err)
	}
	denied.URL.Host, denied.Host = "127.0.0.1:"+port, host
	refused("denied agent", denied, "/optional/denied", http.StatusForbidden, "forbidden")

	// A signature over GET /api/a sent as GET /api/b: invalid.
	tampered := signed("GET", host, "/api/a", "", full...)
	tampered.URL.Path = "/api/b"
	refused("path changed", tampered, "/api/b", http.StatusUnauthorized, "invalid_signature")

	// Optional route: unsigned passes as unverified, invalid is refused,
	// verified passes with the identity.
	unsigned, _ = http.NewRequest("GET", base+"/optional/unsigned", nil)
	unsigned.Host = host
	unsigned.Header["X_Agent_Uid"] = []string{uid}
	unsigned.Header.Set("X-Agent-Outcome", "verified")
	passed("unsigned, optional", unsigned, "/optional/unsigned", map[string]string{"X-Agent-Outcome": "not-present", "X-Agent-Verdict": "unverified", "X-Agent-Reason": "unsigned"})
	tampered = signed("GET", host, "/optional/a", "", full...)
	tampered.URL.Path = "/optional/b"
	refused("invalid, optional", tampered, "/optional/b", http.StatusUnauthorized, "invalid_signature")
	passed("verified, optional", signed("GET", host, "/optional/ok", "", full...), "/optional/ok", verified)

	// Observe route: everything passes with its verdict.
	tampered = signed("GET", host, "/observe/a", "", full...)
	tampered.URL.Path = "/observe/b"
	passed("invalid, observe", tampered, "/observe/b", map[string]string{"X-Agent-Outcome": "invalid", "X-Agent-Verdict": "invalid", "X-Agent-Reason": "invalid_signature"})
	unsigned, _ = http.NewRequest("GET", base+"/observe/unsigned", nil)
	unsigned.Host = host
	passed("unsigned, observe", unsigned, "/observe/unsigned", map[string]string{"X-Agent-Outcome": "not-present", "X-Agent-Verdict": "unverified", "X-Agent-Reason": "unsigned"})

	// A body covered by Content-Digest: checked, and passed on whole.
	const payload = `{"amount":1000}`
	seen := passed("POST with content-digest", signed("POST", host, "/api/post", payload, "@method", "@authority", "@path", "content-digest"), "/api/post", verified)
	if seen.body != payload {
		t.Errorf("POST with content-digest: the service got body %q, want %q", seen.body, payload)
	}
	bad := signed("POST", host, "/api/post-bad", payload, "@method", "@authority", "@path", "content-digest")
	bad.Body = io.NopCloser(strings.NewReader(`{"amount":9999}`))
	refused("POST with another body", bad, "/api/post-bad", http.StatusUnauthorized, "content_digest_mismatch")

	// X-Agent-* trailers after a chunked body: the service gets the body
	// and the other trailer, none of those.
	req = signed("POST", host, "/api/trailers", "", full...)
	req.Body, req.ContentLength = io.NopCloser(strings.NewReader(payload)), -1
	req.Trailer = http.Header{"X-Agent-Uid": {"agent-ffffffffffffffffffffffff"}, "X-Agent-Verdict": {"verified"}, "X-Checksum": {"1"}}
	seen = passed("X-Agent-* trailers", req, "/api/trailers", verified)
	if seen.body != payload || seen.trailer.Get("X-Checksum") != "1" {
		t.Errorf("trailers: the service got body %q and trailers %v, want %q and X-Checksum", seen.body, seen.trailer, payload)
	}
	if got := agentHeaders(seen.trailer); len(got) != 0 {
		t.Errorf("trailers: the service got X-Agent-* trailers %v", got)
	}

	// A path that is not normal is refused before any route matches: an
	// optional route's prefix cannot reach a required path.
	for _, path := range []string{"/optional/../api/secret", "/optional/..%2Fapi/secret", "/optional//x/../../api/secret"} {
		req, _ := http.NewRequest("GET", base+"/", nil)
		req.URL.Opaque = path // sent as is
		req.Host = host
		refused("unsigned "+path, req, "/api/secret", http.StatusBadRequest, "invalid_request")
	}

	// uri strip_prefix ran before the module: the signature covers the
	// path the client sent, /v1/api/stripped, and the service gets the
	// rewritten one.
	passed("rewritten path", signed("GET", host, "/v1/api/stripped", "", full...), "/api/stripped", verified)
}

// docBlock returns the Caddyfile example of docs/caddy.md.
func docBlock(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/caddy.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```caddy\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	// The first block is the example; the routing example further down
	// is TestPlaceholderRouting's.
	if len(blocks) == 0 || !strings.HasPrefix(blocks[0][1], "api.example.com {") || !strings.Contains(blocks[0][1], "\tagentid {") {
		t.Fatalf("docs/caddy.md has %d caddy blocks, want the agentid example for api.example.com first", len(blocks))
	}
	return blocks[0][1]
}

// TestCaddyDocExample runs two Caddy instances with the Caddyfile of
// docs/caddy.md, as written there but for the addresses of the
// listener, the service and the agentid service (and the local-development
// trust of an agent on loopback), sharing one Redis as two instances behind
// a load balancer would: a verified request passes with the identity, the
// optional route lets an unsigned request through, the required one does
// not, and a signature one instance accepted is refused by the other.
func TestCaddyDocExample(t *testing.T) {
	redistest.Client(t) // Redis answers (skips, or fails under CI, if not)
	redisURL := redistest.URL(t)
	block := docBlock(t)
	key := signertest.Key(0x42)
	const uid = "agent-89abcdef0123456789abcdef"
	keyPort := agentKeys(t, key)
	origin := "http://" + uid + ".localhost:" + keyPort
	up := newUpstream(t)
	var ports []string
	for range 2 {
		port := freePort(t)
		ports = append(ports, port)
		// The site listens on its own port; it still serves (and its
		// authority is) api.example.com, the public name clients sign for.
		startCaddy(t, port, strings.NewReplacer(
			"api.example.com {", "http://api.example.com:"+port+" {",
			"trust *.agentid.example", "trust *.localhost:*\n\t\tallow_http\n\t\tallow_private",
			"agentid_services https://agentid.example", "agentid_services http://localhost:"+keyPort,
			"redis_url redis://127.0.0.1:6379/0", "redis_url "+redisURL,
			"127.0.0.1:8000", strings.TrimPrefix(up.URL, "http://"),
		).Replace(block))
	}
	client := &http.Client{Timeout: 10 * time.Second}
	// do sends req to the instance on port, with Host api.example.com.
	do := func(port string, req *http.Request) (*http.Response, string) {
		t.Helper()
		req.URL.Host, req.Host = "127.0.0.1:"+port, "api.example.com"
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	// get is GET path, signed when sign is set.
	get := func(path string, sign bool) *http.Request {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://api.example.com"+path, nil)
		if sign {
			if err := signer.Sign(req, key, signer.Options{SignatureAgent: origin, Components: []string{"@method", "@authority", "@path"}}); err != nil {
				t.Fatal(err)
			}
		}
		return req
	}

	first := get("/orders", true)
	replay := first.Clone(first.Context())
	resp, body := do(ports[0], first)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("signed GET /orders: %d %s, want 200", resp.StatusCode, body)
	}
	if seen := up.got("/orders"); len(seen) != 1 {
		t.Fatalf("the service saw %d requests at /orders, want 1", len(seen))
	} else if got, want := agentHeaders(seen[0].header), map[string]string{"X-Agent-Outcome": "verified", "X-Agent-Verdict": "verified", "X-Agent-Id": origin, "X-Agent-Key-Id": key.KeyID(), "X-Agent-Uid": uid}; !sameHeaders(got, want) {
		t.Errorf("signed GET /orders: the service got %v, want %v", got, want)
	}
	resp, body = do(ports[1], replay)
	if resp.StatusCode != http.StatusUnauthorized || errorCode([]byte(body)) != "replayed_nonce" {
		t.Errorf("the same signature at the other instance: %d %s, want 401 replayed_nonce", resp.StatusCode, body)
	}
	if n := len(up.got("/orders")); n != 1 {
		t.Errorf("the service saw %d requests at /orders, want 1", n)
	}
	resp, body = do(ports[1], get("/orders", true))
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a new signature at the other instance: %d %s, want 200", resp.StatusCode, body)
	}
	resp, body = do(ports[0], get("/public/menu", false))
	if resp.StatusCode != http.StatusOK || len(up.got("/public/menu")) != 1 {
		t.Errorf("unsigned GET /public/menu (optional): %d %s, want 200 from the service", resp.StatusCode, body)
	}
	resp, body = do(ports[1], get("/orders/unsigned", false))
	if resp.StatusCode != http.StatusUnauthorized || errorCode([]byte(body)) != "missing_signature" {
		t.Errorf("unsigned GET /orders/unsigned (required): %d %s, want 401 missing_signature", resp.StatusCode, body)
	}
}

// TestReplayKeptAcrossReload: a config reload provisions new handlers
// before the old ones are cleaned up; without redis_url they share the
// process's nonces, so a signature the old configuration accepted is
// refused by the new one, and by another site's handler.
func TestReplayKeptAcrossReload(t *testing.T) {
	key := signertest.Key(0x43)
	keyPort := agentKeys(t, key)
	origin := "http://agent-00000000000000000000abcd.localhost:" + keyPort
	provision := func() *caddyagentid.Handler {
		h := &caddyagentid.Handler{Authorities: []string{"api.example.com"}, Trust: []string{"*.localhost:*"}, AllowHTTP: true, AllowPrivate: true}
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		t.Cleanup(cancel)
		if err := h.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		return h
	}
	serve := func(h *caddyagentid.Handler, req *http.Request) (int, string) {
		t.Helper()
		w := httptest.NewRecorder()
		reached := false
		err := h.ServeHTTP(w, req, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			reached = true
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		if reached {
			return http.StatusOK, ""
		}
		return w.Code, errorCode(w.Body.Bytes())
	}
	req := httptest.NewRequest("GET", "http://api.example.com/orders", nil)
	if err := signer.Sign(req, key, signer.Options{SignatureAgent: origin, Components: []string{"@method", "@authority", "@path"}}); err != nil {
		t.Fatal(err)
	}
	old := provision()
	if status, code := serve(old, req.Clone(req.Context())); status != http.StatusOK {
		t.Fatalf("signed request: %d %s, want it passed on", status, code)
	}
	reloaded := provision() // the new configuration, before the old is cleaned up
	old.Cleanup()
	if status, code := serve(reloaded, req.Clone(req.Context())); status != http.StatusUnauthorized || code != "replayed_nonce" {
		t.Errorf("the same signature after a reload: %d %s, want 401 replayed_nonce", status, code)
	}
	reloaded.Cleanup()
	// Every handler gone: the next configuration starts a new store.
	fresh := provision()
	defer fresh.Cleanup()
	if status, code := serve(fresh, req.Clone(req.Context())); status != http.StatusOK {
		t.Errorf("the same signature once no handler was left: %d %s, want it passed on (a new store)", status, code)
	}
}

// TestPathRefusedBeforeVerification: a request whose path is not normal is
// refused with 400 invalid_request, as idcli proxy refuses it, before any
// verification work: its agent's key set is not fetched and the next
// handler never runs, whatever the route's mode.
func TestPathRefusedBeforeVerification(t *testing.T) {
	key := signertest.Key(0x44)
	var fetches atomic.Int32
	body := `{"keys":[` + string(key.Public.JWK.MarshalPublic()) + `]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Header().Set("Content-Type", signer.DirectoryMediaType)
		io.WriteString(w, body)
	}))
	defer srv.Close()
	origin := "http://agent-0000000000000000000000ef.localhost:" + strings.TrimPrefix(srv.URL, "http://127.0.0.1:")
	h := &caddyagentid.Handler{Authorities: []string{"api.example.com"}, Trust: []string{"*.localhost:*"}, AllowHTTP: true, AllowPrivate: true,
		Routes: []caddyagentid.Route{{Prefix: "/pub/", Mode: "observe"}}}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	if err := h.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.Cleanup()
	serve := func(path string) (status int, code string, reached bool) {
		t.Helper()
		req := httptest.NewRequest("GET", "http://api.example.com"+path, nil)
		if err := signer.Sign(req, key, signer.Options{SignatureAgent: origin, Components: []string{"@method", "@authority", "@path"}}); err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		err := h.ServeHTTP(w, req, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			reached = true
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		return w.Code, errorCode(w.Body.Bytes()), reached
	}
	for _, path := range []string{"/pub/../api/x", "/pub//x", "/pub/%2e%2e/api/x", "/api/x/."} {
		if status, code, reached := serve(path); status != http.StatusBadRequest || code != "invalid_request" || reached {
			t.Errorf("signed GET %s: %d %s (next handler reached: %v), want 400 invalid_request", path, status, code, reached)
		}
	}
	if n := fetches.Load(); n != 0 {
		t.Errorf("the agent's key set was fetched %d times for requests refused by their path, want 0", n)
	}
	// The same agent on a normal path is verified: its key set is fetched.
	if _, _, reached := serve("/api/x"); !reached || fetches.Load() != 1 {
		t.Errorf("signed GET /api/x: next handler reached %v, %d key-set fetches, want it reached after 1", reached, fetches.Load())
	}
}
