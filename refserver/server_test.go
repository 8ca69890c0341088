package refserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

// syncBuffer is signertest.SyncBuffer.
type syncBuffer = signertest.SyncBuffer

// testEnv is a reference server on loopback whose Hostname is
// http://agentid.test:<port>; its client dials the server for every host, so
// agent hosts (<uid>.agentid.test:<port>) and foreign hosts reach it too.
type testEnv struct {
	t      testing.TB
	db     *gorm.DB
	srv    *refserver.Server
	ts     *httptest.Server
	client *http.Client
	host   string // agentid.test:<port>
	base   string // http://agentid.test:<port>
	logs   *syncBuffer
}

func newTestEnv(t testing.TB, db *gorm.DB) *testEnv {
	t.Helper()
	return newTestEnvConfig(t, db, "", nil)
}

// eachEnv runs fn as a subtest per database backend (dbtest.Each) with a
// testEnv on that backend's fresh database, its Config adjusted by
// configure unless nil.
func eachEnv(t *testing.T, configure func(*refserver.Config), fn func(t *testing.T, e *testEnv)) {
	t.Helper()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) { fn(t, newTestEnvConfig(t, db, "", configure)) })
}

// newTestEnvConfig is newTestEnv with the Config adjusted by configure. If
// base is not "", it is the Hostname (a second instance of an existing
// env's service); the client still dials this server.
func newTestEnvConfig(t testing.TB, db *gorm.DB, base string, configure func(*refserver.Config)) *testEnv {
	t.Helper()
	if err := store.Migrate(context.Background(), db, nil); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	ts := httptest.NewUnstartedServer(nil)
	_, port, _ := net.SplitHostPort(ts.Listener.Addr().String())
	e := &testEnv{t: t, db: db, ts: ts, host: "agentid.test:" + port, logs: &syncBuffer{}}
	e.base = "http://" + e.host
	if base != "" {
		e.base = base
		e.host = strings.TrimPrefix(base, "http://")
	}
	cfg := refserver.Config{
		DB:       store.New(db),
		Hostname: e.base,
		Logger:   slog.New(slog.NewTextHandler(e.logs, nil)),
	}
	if configure != nil {
		configure(&cfg)
	}
	srv, err := refserver.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.srv = srv
	ts.Config.Handler = srv.Handler()
	ts.Start()
	t.Cleanup(ts.Close)
	e.client = dialing(ts.Listener.Addr())
	t.Cleanup(e.client.CloseIdleConnections)
	return e
}

// dialing returns a client that sends every request to addr, whatever the
// URL's host (agent hosts and foreign hosts included).
func dialing(addr net.Addr) *http.Client {
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr.String())
		},
		MaxIdleConnsPerHost: 64,
	}}
}

// sibling starts another instance of e's service (same Hostname) on db,
// as a second server behind one load balancer.
func (e *testEnv) sibling(db *gorm.DB, configure func(*refserver.Config)) *testEnv {
	e.t.Helper()
	return newTestEnvConfig(e.t, db, e.base, configure)
}

func (e *testEnv) origin(uid string) string { return "http://" + uid + "." + e.host }

func (e *testEnv) directoryURL(uid string) string {
	return e.origin(uid) + "/.well-known/http-message-signatures-directory"
}

func (e *testEnv) request(method, url string, body []byte) *http.Request {
	e.t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", r.body, err)
	}
	return m
}

// errorCode returns the code of a JSON error body, checking its shape.
func (r response) errorCode(t testing.TB) string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type = %q, want application/json (body %s)", ct, r.body)
	}
	var body struct {
		Error struct {
			Status  int    `json:"status"`
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatalf("error body %q is not JSON: %v", r.body, err)
	}
	if body.Error.Status != r.status {
		t.Errorf("error.status = %d, want the HTTP status %d", body.Error.Status, r.status)
	}
	if body.Error.Message == "" {
		t.Errorf("error.message is empty in %s", r.body)
	}
	return body.Error.Code
}

// wantError reports an error unless r is a JSON error with status and
// code, and returns whether it is.
func (r response) wantError(t testing.TB, what string, status int, code middleware.Code) bool {
	t.Helper()
	got := r.errorCode(t)
	if r.status == status && got == string(code) {
		return true
	}
	t.Errorf("%s: %d %s (%s), want %d %s", what, r.status, got, r.body, status, code)
	return false
}

// do sends req on e's client and reads the answer; unlike send, it may be
// called from any goroutine.
func (e *testEnv) do(req *http.Request) (response, error) {
	resp, err := e.client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}, err
}

// doAll sends reqs at once, each from its own goroutine, and returns
// their answers in order; a request that got no answer has status 0 and
// the error as its body.
func (e *testEnv) doAll(reqs []*http.Request) []response {
	out := make([]response, len(reqs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() {
			<-start
			r, err := e.do(req)
			if err != nil {
				r = response{body: []byte(err.Error())}
			}
			out[i] = r
		})
	}
	close(start)
	wg.Wait()
	return out
}

// send is do that fails the test when there is no answer.
func (e *testEnv) send(req *http.Request) response {
	e.t.Helper()
	r, err := e.do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return r
}

// wantRows checks the number of agents and of key rows (those matching
// keyWhere, as gorm's Where, when given).
func wantRows(t testing.TB, db *gorm.DB, what string, agents, keys int64, keyWhere ...any) {
	t.Helper()
	a, k := countRows(t, db, &store.Agent{}), countRows(t, db, &store.PublicJWK{}, keyWhere...)
	if a != agents || k != keys {
		t.Errorf("%s: %d agents, %d keys; want %d, %d", what, a, k, agents, keys)
	}
}

// countRows counts the rows of model's table, with an optional condition
// (as gorm's Where).
func countRows(t testing.TB, db *gorm.DB, model any, where ...any) int64 {
	t.Helper()
	q := db.Model(model)
	if len(where) > 0 {
		q = q.Where(where[0], where[1:]...)
	}
	var n int64
	if err := q.Count(&n).Error; err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

func jwkBody(jwk signer.JWK) []byte {
	b, _ := json.Marshal(map[string]any{"public_jwk": jwk})
	return b
}

func (e *testEnv) sign(req *http.Request, key signer.PrivateKey, opts signer.Options) *http.Request {
	e.t.Helper()
	if err := signer.Sign(req, key, opts); err != nil {
		e.t.Fatalf("Sign: %v", err)
	}
	return req
}

// registerReq is POST /agents for key, signed by key (proof of possession).
func (e *testEnv) registerReq(key signer.PrivateKey) *http.Request {
	req := e.request(http.MethodPost, e.base+"/agents", jwkBody(key.Public.JWK))
	return e.sign(req, key, signer.Options{Components: signer.WriteComponents})
}

func (e *testEnv) register(key signer.PrivateKey) string {
	e.t.Helper()
	resp := e.send(e.registerReq(key))
	if resp.status != http.StatusCreated && resp.status != http.StatusOK {
		e.t.Fatalf("register: status = %d, want 201 or 200 (%s)", resp.status, resp.body)
	}
	uid, _ := resp.json(e.t)["uid"].(string)
	return uid
}

// rotateReq is PUT /agents/{uid}/keys: sig1 by cur, sig2 by next.
func (e *testEnv) rotateReq(uid string, cur, next signer.PrivateKey) *http.Request {
	return e.rotateReqBody(uid, cur, next, jwkBody(next.Public.JWK))
}

// rotateReqBody is rotateReq with the body body.
func (e *testEnv) rotateReqBody(uid string, cur, next signer.PrivateKey, body []byte) *http.Request {
	req := e.request(http.MethodPut, e.base+"/agents/"+uid+"/keys", body)
	e.sign(req, cur, signer.Options{Components: signer.WriteComponents, SignatureAgent: e.origin(uid)})
	return e.sign(req, next, signer.Options{Label: "sig2", Tag: signer.KeyPossessionTag, Components: signer.WriteComponents})
}

// whoamiReq is a default-profile signed request to /whoami.
func (e *testEnv) whoamiReq(method, uid string, key signer.PrivateKey) *http.Request {
	req := e.request(method, e.base+"/whoami", nil)
	return e.sign(req, key, signer.Options{SignatureAgent: e.origin(uid)})
}

func TestHealth(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		resp := e.send(e.request(http.MethodGet, e.base+"/", nil))
		if resp.status != http.StatusOK {
			t.Fatalf("GET / status = %d, want 200", resp.status)
		}
		got := resp.json(t)
		want := map[string]any{"service": "agentid", "status": "ok", "version": signer.Version}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("health %s = %v, want %v", k, got[k], v)
			}
		}
		resp = e.send(e.request(http.MethodGet, e.base+"/readyz", nil))
		if resp.status != http.StatusOK {
			t.Errorf("GET /readyz status = %d, want 200 (%s)", resp.status, resp.body)
		}
	})
}

func TestDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		key := signertest.Key(1)
		uid := e.register(key)
		sqlDB, err := e.db.DB()
		if err != nil {
			t.Fatal(err)
		}
		sqlDB.Close() // the database goes away under the running server
		tests := []struct {
			name string
			req  *http.Request
		}{
			{"readyz", e.request(http.MethodGet, e.base+"/readyz", nil)},
			{"directory", e.request(http.MethodGet, e.directoryURL(uid), nil)},
			{"whoami", e.whoamiReq(http.MethodGet, uid, key)},
			{"register", e.registerReq(signertest.Key(2))},
			{"rotate", e.rotateReq(uid, key, signertest.Key(3))},
		}
		for _, tt := range tests {
			resp := e.send(tt.req)
			if resp.status != http.StatusServiceUnavailable {
				t.Errorf("%s: status = %d, want 503 (%s)", tt.name, resp.status, resp.body)
				continue
			}
			if code := resp.errorCode(t); code != "database_unavailable" {
				t.Errorf("%s: code = %s, want database_unavailable", tt.name, code)
			}
			if bytes.Contains(bytes.ToLower(resp.body), []byte("sql")) {
				t.Errorf("%s: body leaks database detail: %s", tt.name, resp.body)
			}
		}
		// Liveness does not depend on the database.
		if resp := e.send(e.request(http.MethodGet, e.base+"/", nil)); resp.status != http.StatusOK {
			t.Errorf("GET / with the database down: status = %d, want 200", resp.status)
		}
	})
}

func TestDirectory(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		key := signertest.Key(7)
		uid := e.register(key)

		resp := e.send(e.request(http.MethodGet, e.directoryURL(uid), nil))
		if resp.status != http.StatusOK {
			t.Fatalf("directory status = %d, want 200 (%s)", resp.status, resp.body)
		}
		wantHeaders := map[string]string{
			"Content-Type":                "application/http-message-signatures-directory+json",
			"Cache-Control":               "max-age=60",
			"Access-Control-Allow-Origin": "*",
		}
		for k, v := range wantHeaders {
			if got := resp.header.Get(k); got != v {
				t.Errorf("%s = %q, want %q", k, got, v)
			}
		}
		etag := resp.header.Get("ETag")
		if !strings.HasPrefix(etag, `"`) || !strings.HasSuffix(etag, `"`) || len(etag) < 3 {
			t.Errorf("ETag = %q, want a strong quoted entity tag", etag)
		}
		wantBody := `{"keys":[` + string(key.Public.JWK.MarshalPublic()) + "]}\n"
		if string(resp.body) != wantBody {
			t.Errorf("directory body = %s, want %s", resp.body, wantBody)
		}

		// Conditional GET.
		for _, inm := range []string{etag, "W/" + etag, `"other", ` + etag, "*"} {
			req := e.request(http.MethodGet, e.directoryURL(uid), nil)
			req.Header.Set("If-None-Match", inm)
			r := e.send(req)
			if r.status != http.StatusNotModified || len(r.body) != 0 {
				t.Errorf("If-None-Match %s: status = %d, body %q; want 304, empty", inm, r.status, r.body)
			}
			if got := r.header.Get("ETag"); got != etag {
				t.Errorf("304 ETag = %q, want %q", got, etag)
			}
		}
		req := e.request(http.MethodGet, e.directoryURL(uid), nil)
		req.Header.Set("If-None-Match", `"stale"`)
		if r := e.send(req); r.status != http.StatusOK {
			t.Errorf("stale If-None-Match: status = %d, want 200", r.status)
		}

		// HEAD: headers, no body.
		r := e.send(e.request(http.MethodHead, e.directoryURL(uid), nil))
		if r.status != http.StatusOK || len(r.body) != 0 || r.header.Get("ETag") != etag {
			t.Errorf("HEAD: status %d, body %q, ETag %q; want 200, empty, %q", r.status, r.body, r.header.Get("ETag"), etag)
		}
		if got, want := r.header.Get("Content-Length"), "0"; got == want {
			t.Errorf("HEAD Content-Length = %s, want the GET length", got)
		}

		// Unknown agent, base host, foreign host, bad uid label.
		checks := []struct {
			name       string
			url        string
			wantStatus int
			wantCode   string
		}{
			{"unknown agent", e.directoryURL("agent-000000000000000000000000"), 404, "agent_not_found"},
			{"base host, below the directory", e.base + "/.well-known/http-message-signatures-directory/x", 404, "not_found"},
			{"bad uid label", "http://bob." + e.host + "/.well-known/http-message-signatures-directory", 404, "agent_not_found"},
			{"foreign host", "http://evil.example/.well-known/http-message-signatures-directory", 421, "misdirected_request"},
			{"nested label", "http://x." + uid + "." + e.host + "/.well-known/http-message-signatures-directory", 421, "misdirected_request"},
			{"wrong port", "http://" + uid + ".agentid.test:1/.well-known/http-message-signatures-directory", 421, "misdirected_request"},
		}
		// Only the server's own forms: a query or an escape in the path (each
		// one a new identity to a verifier) is not the directory.
		for _, q := range []string{"?n=1", "?n=10", "?", "?keys", "/?n=1", "%2F", "%68"} {
			u := e.directoryURL(uid) + q
			switch q {
			case "/?n=1":
				u = e.origin(uid) + q
			case "%2F":
				u = e.origin(uid) + "/.well-known%2Fhttp-message-signatures-directory"
			case "%68":
				u = e.origin(uid) + "/.well-known/%68ttp-message-signatures-directory"
			}
			checks = append(checks, struct {
				name       string
				url        string
				wantStatus int
				wantCode   string
			}{"respelled " + q, u, 404, "not_found"})
		}
		for _, c := range checks {
			r := e.send(e.request(http.MethodGet, c.url, nil))
			if r.status != c.wantStatus {
				t.Errorf("%s: status = %d, want %d (%s)", c.name, r.status, c.wantStatus, r.body)
				continue
			}
			if code := r.errorCode(t); code != c.wantCode {
				t.Errorf("%s: code = %s, want %s", c.name, code, c.wantCode)
			}
		}
	})
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		k1, k2 := signertest.Key(11), signertest.Key(12)

		// Register.
		resp := e.send(e.registerReq(k1))
		if resp.status != http.StatusCreated {
			t.Fatalf("register: status = %d, want 201 (%s)", resp.status, resp.body)
		}
		reg := resp.json(t)
		uid, _ := reg["uid"].(string)
		if len(uid) != 30 || !strings.HasPrefix(uid, "agent-") {
			t.Fatalf("uid = %q, want agent-<24 hex>", uid)
		}
		if reg["kid"] != k1.KeyID() || reg["is_new"] != true || reg["well_known_url"] != e.directoryURL(uid) {
			t.Errorf("register body = %s", resp.body)
		}
		if jwk, _ := reg["public_jwk"].(map[string]any); len(jwk) != 4 || jwk["x"] != k1.Public.JWK.X {
			t.Errorf("register public_jwk = %v, want the 4 public members", reg["public_jwk"])
		}

		// Registering the same key again: same agent, is_new false.
		resp = e.send(e.registerReq(k1))
		if resp.status != http.StatusOK {
			t.Fatalf("re-register: status = %d, want 200 (%s)", resp.status, resp.body)
		}
		if again := resp.json(t); again["uid"] != uid || again["is_new"] != false {
			t.Errorf("re-register body = %s, want uid %s and is_new false", resp.body, uid)
		}

		// Directory and whoami.
		if r := e.send(e.request(http.MethodGet, e.directoryURL(uid), nil)); !bytes.Contains(r.body, []byte(k1.KeyID())) {
			t.Errorf("directory %s lacks %s", r.body, k1.KeyID())
		}
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			r := e.send(e.whoamiReq(method, uid, k1))
			if r.status != http.StatusOK {
				t.Fatalf("%s /whoami: status = %d, want 200 (%s)", method, r.status, r.body)
			}
			w := r.json(t)
			if w["uid"] != uid || w["kid"] != k1.KeyID() || w["well_known_url"] != e.directoryURL(uid) || w["signature_agent"] != e.origin(uid) {
				t.Errorf("%s /whoami body = %s", method, r.body)
			}
		}

		// Rotate.
		resp = e.send(e.rotateReq(uid, k1, k2))
		if resp.status != http.StatusOK {
			t.Fatalf("rotate: status = %d, want 200 (%s)", resp.status, resp.body)
		}
		if rot := resp.json(t); rot["uid"] != uid || rot["kid"] != k2.KeyID() || rot["well_known_url"] != e.directoryURL(uid) {
			t.Errorf("rotate body = %s", resp.body)
		}

		// New key works, old key is rejected at once and gone from the directory.
		if r := e.send(e.whoamiReq(http.MethodGet, uid, k2)); r.status != http.StatusOK || r.json(t)["kid"] != k2.KeyID() {
			t.Errorf("whoami with the new key: status = %d (%s), want 200 and kid %s", r.status, r.body, k2.KeyID())
		}
		r := e.send(e.whoamiReq(http.MethodGet, uid, k1))
		if r.status != http.StatusUnauthorized {
			t.Fatalf("whoami with the old key: status = %d, want 401", r.status)
		}
		if code := r.errorCode(t); code != "revoked_key" {
			t.Errorf("whoami with the old key: code = %s, want revoked_key", code)
		}
		dir := e.send(e.request(http.MethodGet, e.directoryURL(uid), nil))
		if want := `{"keys":[` + string(k2.Public.JWK.MarshalPublic()) + "]}\n"; string(dir.body) != want {
			t.Errorf("directory after rotation = %s, want %s", dir.body, want)
		}
		// The revoked key cannot register again (it would resurrect it).
		e.send(e.registerReq(k1)).wantError(t, "register a revoked key", http.StatusConflict, refserver.CodeKeyConflict)
		// The old key cannot rotate any more.
		e.send(e.rotateReq(uid, k1, signertest.Key(13))).wantError(t, "rotate with the old key", http.StatusUnauthorized, middleware.CodeRevokedKey)
		// Rotating to a key another agent holds is a conflict.
		other := signertest.Key(14)
		e.register(other)
		e.send(e.rotateReq(uid, k2, other)).wantError(t, "rotate to another agent's key", http.StatusConflict, refserver.CodeKeyConflict)

		wantRows(t, e.db, "rows", 2, 3)
		var stored store.PublicJWK
		if err := e.db.Where("kid = ?", k2.KeyID()).Take(&stored).Error; err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(stored.JWK, &m); err != nil || len(m) != 4 {
			t.Errorf("stored jwk = %s, want exactly kty, crv, x, kid", stored.JWK)
		}
	})
}

func TestConcurrentRegistration(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		key := signertest.Key(21)
		const n = 20
		reqs := make([]*http.Request, n)
		for i := range reqs {
			reqs[i] = e.registerReq(key)
		}
		created, uids := 0, map[string]bool{}
		for i, r := range e.doAll(reqs) {
			switch r.status {
			case http.StatusCreated:
				created++
			case http.StatusOK:
			default:
				t.Errorf("request %d: status = %d (%s), want 201 or 200", i, r.status, r.body)
				continue
			}
			uid, _ := r.json(t)["uid"].(string)
			uids[uid] = true
		}
		if created != 1 || len(uids) != 1 {
			t.Errorf("%d created, %d distinct uids; want 1, 1", created, len(uids))
		}
		wantRows(t, e.db, "rows (no orphans)", 1, 1)
	})
}

func TestConcurrentRotation(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		cur := signertest.Key(31)
		uid := e.register(cur)
		const n = 20
		reqs := make([]*http.Request, n)
		for i := range reqs {
			reqs[i] = e.rotateReq(uid, cur, signertest.Key(byte(100+i)))
		}
		ok := 0
		for i, r := range e.doAll(reqs) {
			switch {
			case r.status == http.StatusOK:
				ok++
			case r.status == http.StatusUnauthorized && bytes.Contains(r.body, []byte(`"revoked_key"`)):
			default:
				t.Errorf("rotation %d: status = %d (%s), want 200 or 401 revoked_key", i, r.status, r.body)
			}
		}
		if ok != 1 {
			t.Errorf("%d rotations succeeded, want exactly 1", ok)
		}
		active := countRows(t, e.db, &store.PublicJWK{}, "agent_uid = ? AND revoked_at IS NULL", uid)
		if total := countRows(t, e.db, &store.PublicJWK{}, "agent_uid = ?", uid); active != 1 || total != 2 {
			t.Errorf("keys of %s: %d active, %d total; want 1, 2", uid, active, total)
		}
	})
}

func TestReplayAndForgery(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		victim, attacker := signertest.Key(41), signertest.Key(42)
		uid := e.register(victim)

		check := func(name string, resp response, wantStatus int, wantCodes ...string) {
			t.Helper()
			if resp.status != wantStatus {
				t.Errorf("%s: status = %d (%s), want %d", name, resp.status, resp.body, wantStatus)
				return
			}
			code := resp.errorCode(t)
			for _, c := range wantCodes {
				if code == c {
					return
				}
			}
			t.Errorf("%s: code = %s, want one of %v", name, code, wantCodes)
		}

		// Cross-route: a captured /whoami signature replayed on rotation.
		who := e.whoamiReq(http.MethodGet, uid, victim)
		rot := e.request(http.MethodPut, e.base+"/agents/"+uid+"/keys", jwkBody(attacker.Public.JWK))
		for _, h := range []string{"Signature", "Signature-Input", "Signature-Agent"} {
			rot.Header[h] = who.Header[h]
		}
		e.sign(rot, attacker, signer.Options{Label: "sig2", Tag: signer.KeyPossessionTag, Components: signer.WriteComponents})
		check("cross-route replay", e.send(rot), 401, "missing_components")

		// Cross-route with a full write profile signature made for /whoami.
		who2 := e.request(http.MethodPost, e.base+"/whoami", jwkBody(attacker.Public.JWK))
		e.sign(who2, victim, signer.Options{Components: signer.WriteComponents, SignatureAgent: e.origin(uid)})
		rot2 := e.request(http.MethodPut, e.base+"/agents/"+uid+"/keys", jwkBody(attacker.Public.JWK))
		for _, h := range []string{"Signature", "Signature-Input", "Signature-Agent", "Content-Digest"} {
			rot2.Header[h] = who2.Header[h]
		}
		e.sign(rot2, attacker, signer.Options{Label: "sig2", Tag: signer.KeyPossessionTag, Components: signer.WriteComponents})
		check("cross-route replay (write profile)", e.send(rot2), 401, "invalid_signature")

		// Cross-host: headers made for another site, replayed with that Host and with ours.
		foreign, _ := http.NewRequest(http.MethodPut, "https://evil-tool.example/agents/"+uid+"/keys", bytes.NewReader(jwkBody(attacker.Public.JWK)))
		e.sign(foreign, victim, signer.Options{Components: signer.WriteComponents, SignatureAgent: e.origin(uid)})
		e.sign(foreign, attacker, signer.Options{Label: "sig2", Tag: signer.KeyPossessionTag, Components: signer.WriteComponents})
		for _, host := range []string{"evil-tool.example", e.host} {
			r := e.request(http.MethodPut, e.base+"/agents/"+uid+"/keys", jwkBody(attacker.Public.JWK))
			r.Host = host
			for _, h := range []string{"Signature", "Signature-Input", "Signature-Agent", "Content-Digest"} {
				r.Header[h] = foreign.Header[h]
			}
			want, code := 401, "invalid_signature"
			if host != e.host {
				want, code = 421, "misdirected_request"
			}
			check("cross-host replay to "+host, e.send(r), want, code)
		}

		// Replayed nonce: the same signed whoami twice.
		first := e.whoamiReq(http.MethodGet, uid, victim)
		second := e.request(http.MethodGet, e.base+"/whoami", nil)
		second.Header = first.Header.Clone()
		if r := e.send(first); r.status != 200 {
			t.Fatalf("first whoami: status = %d (%s)", r.status, r.body)
		}
		check("replayed whoami", e.send(second), 401, "replayed_nonce")

		// Replayed rotation: the second copy must not rotate again.
		next := signertest.Key(43)
		r1 := e.rotateReq(uid, victim, next)
		r2 := e.request(http.MethodPut, e.base+"/agents/"+uid+"/keys", jwkBody(next.Public.JWK))
		r2.Header = r1.Header.Clone()
		if r := e.send(r1); r.status != 200 {
			t.Fatalf("rotation: status = %d (%s)", r.status, r.body)
		}
		check("replayed rotation", e.send(r2), 401, "replayed_nonce", "revoked_key")

		// A client-claimed kid that is not the thumbprint.
		bad := attacker.Public.JWK
		bad.Kid = "not-the-thumbprint"
		req := e.request(http.MethodPost, e.base+"/agents", jwkBody(bad))
		e.sign(req, attacker, signer.Options{Components: signer.WriteComponents})
		check("kid not thumbprint", e.send(req), 400, "invalid_jwk")

		// A JWK carrying d.
		priv := attacker.JWK()
		req = e.request(http.MethodPost, e.base+"/agents", jwkBody(priv))
		e.sign(req, attacker, signer.Options{Components: signer.WriteComponents})
		resp := e.send(req)
		check("jwk with d", resp, 400, "invalid_jwk")
		if bytes.Contains(resp.body, []byte(priv.D)) {
			t.Errorf("error body echoes the private key")
		}

		// Extra members are dropped: only the canonical four are stored and served.
		extra := map[string]any{"kty": "OKP", "crv": "Ed25519", "x": attacker.Public.JWK.X, "use": "sig", "alg": "EdDSA"}
		b, _ := json.Marshal(map[string]any{"public_jwk": extra})
		req = e.sign(e.request(http.MethodPost, e.base+"/agents", b), attacker, signer.Options{Components: signer.WriteComponents})
		resp = e.send(req)
		if resp.status != http.StatusCreated {
			t.Fatalf("register with extra members: status = %d (%s), want 201", resp.status, resp.body)
		}
		var reg struct {
			PublicJWK json.RawMessage `json:"public_jwk"`
		}
		json.Unmarshal(resp.body, &reg)
		if want := attacker.Public.JWK.MarshalPublic(); !bytes.Equal(reg.PublicJWK, want) {
			t.Errorf("public_jwk = %s, want canonical %s", reg.PublicJWK, want)
		}

		// A signature by a key not in the body cannot register it.
		req = e.sign(e.request(http.MethodPost, e.base+"/agents", jwkBody(signertest.Key(44).Public.JWK)), attacker, signer.Options{Components: signer.WriteComponents})
		check("register without possession", e.send(req), 401, "unknown_key")

		// Another registered agent cannot rotate the victim's keys.
		otherUID := e.register(signertest.Key(45))
		req = e.request(http.MethodPut, e.base+"/agents/"+uid+"/keys", jwkBody(signertest.Key(46).Public.JWK))
		e.sign(req, signertest.Key(45), signer.Options{Components: signer.WriteComponents, SignatureAgent: e.origin(otherUID)})
		e.sign(req, signertest.Key(46), signer.Options{Label: "sig2", Tag: signer.KeyPossessionTag, Components: signer.WriteComponents})
		check("rotate another agent", e.send(req), 403, "forbidden")
	})
}

func TestRequestLog(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		key := signertest.Key(51)
		uid := e.register(key)
		req := e.whoamiReq(http.MethodGet, uid, key)
		if r := e.send(req); r.status != 200 {
			t.Fatalf("whoami: %d %s", r.status, r.body)
		}
		logs := e.logs.String()
		for _, want := range []string{"method=GET", "path=/whoami", "status=200", "host=" + e.host, "duration=", "bytes="} {
			if !strings.Contains(logs, want) {
				t.Errorf("log lacks %q:\n%s", want, logs)
			}
		}
		sig := req.Header.Get("Signature")
		sigValue := sig[strings.Index(sig, ":")+1 : strings.LastIndex(sig, ":")]
		for _, secret := range []string{sigValue, key.Public.JWK.X, req.Header.Get("Signature-Input")} {
			if strings.Contains(logs, secret) {
				t.Errorf("log contains request material %q", secret)
			}
		}
		if got := strings.Count(logs, "path=/whoami"); got != 1 {
			t.Errorf("%d log lines for one request, want 1", got)
		}
		// Query values never reach the log, whatever the parameter's name.
		if r := e.send(e.request(http.MethodGet, e.base+"/?password=hunter2&session=s3cret-value", nil)); r.status != 200 {
			t.Fatalf("GET /?…: %d %s", r.status, r.body)
		}
		logs = e.logs.String()
		for _, secret := range []string{"hunter2", "s3cret-value"} {
			if strings.Contains(logs, secret) {
				t.Errorf("log contains the query value %q:\n%s", secret, logs)
			}
		}
	})
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, "sqlite::memory:")
	tests := []struct {
		name string
		cfg  refserver.Config
	}{
		{"no db", refserver.Config{Hostname: "http://localhost:3000"}},
		{"no hostname", refserver.Config{DB: store.New(db)}},
		{"no scheme", refserver.Config{DB: store.New(db), Hostname: "localhost:3000"}},
		{"bare shell hostname", refserver.Config{DB: store.New(db), Hostname: "3f2a9c1d0b7e"}},
		{"ftp", refserver.Config{DB: store.New(db), Hostname: "ftp://localhost"}},
		{"path", refserver.Config{DB: store.New(db), Hostname: "http://localhost:3000/api"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := refserver.New(tt.cfg); err == nil {
				t.Errorf("New(%+v) error = nil, want an error", tt.cfg.Hostname)
			}
		})
	}
	if _, err := refserver.New(refserver.Config{DB: store.New(db), Hostname: "https://Agentid.Example:443/"}); err != nil {
		t.Errorf("New(valid) error = %v", err)
	}
	// An invalid URL is signer's error, with its one prefix.
	const want = `signer: invalid service URL "http://localhost:3000/api": a path is not allowed`
	if _, err := refserver.ParseHostname("http://localhost:3000/api"); !errors.Is(err, signer.ErrInvalidServiceURL) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("ParseHostname(with a path) error = %v, want %s…", err, want)
	}
}
