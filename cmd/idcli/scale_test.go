package main

// Scale-out and fault tests (issue 7): two server instances sharing one
// database and replay store, and PostgreSQL going away under load. The
// servers run in-process on loopback; PostgreSQL is reached through a TCP
// proxy the test can stop, so the shared PostgreSQL is never touched.

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/replaypg"
	"github.com/agentid/agentid/signer"
	"gorm.io/gorm"
)

// scaleHostname is the HOSTNAME every instance shares (as behind one load
// balancer); each instance's client dials that instance's address.
const scaleHostname = "http://agentid.test"

type scaleInstance struct {
	ts     *httptest.Server
	client *http.Client
}

// newScaleInstance starts a reference server on db with the database
// replay store, as `idcli server start --replay-store postgres` would.
func newScaleInstance(t *testing.T, db *gorm.DB, configure func(*refserver.Config)) *scaleInstance {
	t.Helper()
	store, err := replaypg.New(replaypg.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	cfg := refserver.Config{DB: db, Hostname: scaleHostname, Replay: store}
	if configure != nil {
		configure(&cfg)
	}
	srv, err := refserver.New(cfg)
	if err != nil {
		t.Fatalf("refserver.New: %v", err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	addr := ts.Listener.Addr().String()
	var d net.Dialer
	c := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, "tcp", addr)
			},
			MaxIdleConnsPerHost: 64,
		},
	}
	t.Cleanup(c.CloseIdleConnections)
	return &scaleInstance{ts: ts, client: c}
}

func scaleKey(seed byte) signer.PrivateKey {
	return signer.NewPrivateKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize)))
}

func scaleOrigin(uid string) string { return "http://" + uid + ".agentid.test" }

func scaleJWKBody(k signer.PrivateKey) []byte {
	b, _ := json.Marshal(struct {
		PublicJWK json.RawMessage `json:"public_jwk"`
	}{json.RawMessage(k.Public.JWK.MarshalPublic())})
	return b
}

func scaleSign(t testing.TB, req *http.Request, key signer.PrivateKey, opts signer.Options) *http.Request {
	t.Helper()
	if err := signer.Sign(req, key, opts); err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return req
}

func scaleRegisterReq(t testing.TB, key signer.PrivateKey) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, scaleHostname+"/agents", bytes.NewReader(scaleJWKBody(key)))
	req.Header.Set("Content-Type", "application/json")
	return scaleSign(t, req, key, signer.Options{Components: signer.WriteComponents})
}

func scaleWhoamiReq(t testing.TB, uid string, key signer.PrivateKey) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, scaleHostname+"/whoami", nil)
	return scaleSign(t, req, key, signer.Options{SignatureAgent: scaleOrigin(uid)})
}

func scaleRotateReq(t testing.TB, uid string, cur, next signer.PrivateKey) *http.Request {
	req, _ := http.NewRequest(http.MethodPut, scaleHostname+"/agents/"+uid+"/keys", bytes.NewReader(scaleJWKBody(next)))
	req.Header.Set("Content-Type", "application/json")
	scaleSign(t, req, cur, signer.Options{Components: signer.WriteComponents, SignatureAgent: scaleOrigin(uid)})
	return scaleSign(t, req, next, signer.Options{Label: "sig2", Tag: signer.KeyPossessionTag, Components: signer.WriteComponents})
}

// scaleAnswer is a response's status, error code (if any) and uid (if any).
type scaleAnswer struct {
	status    int
	code, uid string
}

func scaleSend(c *http.Client, req *http.Request) (scaleAnswer, error) {
	resp, err := c.Do(req)
	if err != nil {
		return scaleAnswer{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var v struct {
		UID   string `json:"uid"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	json.Unmarshal(body, &v)
	return scaleAnswer{status: resp.StatusCode, code: v.Error.Code, uid: v.UID}, nil
}

func mustSend(t testing.TB, c *http.Client, req *http.Request) scaleAnswer {
	t.Helper()
	a, err := scaleSend(c, req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return a
}

// copyReq returns a request with req's method, URL and headers and body.
func copyReq(req *http.Request, body []byte) *http.Request {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	c, _ := http.NewRequest(req.Method, req.URL.String(), r)
	c.Header = req.Header.Clone()
	return c
}

func TestScaleTwoInstancesShareReplayAndKeys(t *testing.T) {
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			u := b.URL(t)
			dbtest.Migrated(t, u)
			// Separate connection pools, as separate processes would have.
			a := newScaleInstance(t, dbtest.Open(t, u), nil)
			bb := newScaleInstance(t, dbtest.Open(t, u), nil)

			key := scaleKey(71)
			reg := mustSend(t, a.client, scaleRegisterReq(t, key))
			if reg.status != http.StatusCreated {
				t.Fatalf("register via A: status = %d (%s), want 201", reg.status, reg.code)
			}
			uid := reg.uid

			t.Run("nonce accepted by one is replayed on the other", func(t *testing.T) {
				for _, order := range []struct {
					name        string
					first, then *scaleInstance
				}{{"A then B", a, bb}, {"B then A", bb, a}} {
					req := scaleWhoamiReq(t, uid, key)
					if got := mustSend(t, order.first.client, copyReq(req, nil)); got.status != http.StatusOK {
						t.Fatalf("%s: first: status = %d (%s), want 200", order.name, got.status, got.code)
					}
					got := mustSend(t, order.then.client, copyReq(req, nil))
					if got.status != http.StatusUnauthorized || got.code != "replayed_nonce" {
						t.Errorf("%s: replay: status = %d code %q, want 401 replayed_nonce", order.name, got.status, got.code)
					}
				}
			})

			t.Run("key rotated through A is refused by B within 1 s", func(t *testing.T) {
				next := scaleKey(72)
				// B accepts the current key before the rotation.
				if got := mustSend(t, bb.client, scaleWhoamiReq(t, uid, key)); got.status != http.StatusOK {
					t.Fatalf("B before rotation: status = %d (%s), want 200", got.status, got.code)
				}
				if got := mustSend(t, a.client, scaleRotateReq(t, uid, key, next)); got.status != http.StatusOK {
					t.Fatalf("rotate via A: status = %d (%s), want 200", got.status, got.code)
				}
				rotated := time.Now()
				for {
					got := mustSend(t, bb.client, scaleWhoamiReq(t, uid, key))
					if got.status == http.StatusUnauthorized && (got.code == "revoked_key" || got.code == "unknown_key") {
						t.Logf("old key refused by B %v after the rotation committed (%s)", time.Since(rotated), got.code)
						break
					}
					if got.status != http.StatusOK {
						t.Fatalf("B with the old key: status = %d code %q, want 401 revoked_key", got.status, got.code)
					}
					if time.Since(rotated) > time.Second {
						t.Fatalf("B still accepts the old key %v after the rotation", time.Since(rotated))
					}
					time.Sleep(20 * time.Millisecond)
				}
				if got := mustSend(t, bb.client, scaleWhoamiReq(t, uid, next)); got.status != http.StatusOK {
					t.Errorf("B with the new key: status = %d (%s), want 200", got.status, got.code)
				}
			})
		})
	}
}

// tcpProxy forwards loopback connections to a target; Stop closes the
// listener and every connection (the database "goes away"), Start listens
// again on the same address.
type tcpProxy struct {
	target, addr string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]struct{}
	wg           sync.WaitGroup
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	p := &tcpProxy{target: target, addr: "127.0.0.1:0", conns: map[net.Conn]struct{}{}}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	p.addr = p.ln.Addr().String()
	t.Cleanup(func() { p.Stop(); p.wg.Wait() })
	return p
}

func (p *tcpProxy) Start() error {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.pipe(c) }()
		}
	}()
	return nil
}

func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) pipe(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c) || !p.track(up) {
		c.Close()
		up.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// Stop closes the listener and every open connection.
func (p *tcpProxy) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// scaleResult is one request of the load run.
type scaleResult struct {
	target     string
	start, end time.Time
	status     int
	uid        string
	err        error
}

func TestScalePostgresStoppedUnderLoad(t *testing.T) {
	direct := dbtest.PostgresURL(t) // skips without AGENTID_TEST_DATABASE_URL
	check := dbtest.Migrated(t, direct)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, u.Host)
	u.Host = proxy.addr
	proxied := dbtest.Open(t, u.String())

	const dbTimeout = 2 * time.Second
	inst := newScaleInstance(t, proxied, func(c *refserver.Config) { c.DBTimeout = dbTimeout })
	key := scaleKey(81)
	reg := mustSend(t, inst.client, scaleRegisterReq(t, key))
	if reg.status != http.StatusCreated {
		t.Fatalf("register: status = %d (%s), want 201", reg.status, reg.code)
	}
	uid := reg.uid

	var (
		mu      sync.Mutex
		results []scaleResult
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				var req *http.Request
				target := "whoami"
				if (w+i)%2 == 0 {
					target = "register"
					k, err := signer.GenerateKey(rand.Reader)
					if err != nil {
						panic(err)
					}
					req = scaleRegisterReq(t, k)
				} else {
					req = scaleWhoamiReq(t, uid, key)
				}
				r := scaleResult{target: target, start: time.Now()}
				a, err := scaleSend(inst.client, req)
				r.end, r.status, r.uid, r.err = time.Now(), a.status, a.uid, err
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		}()
	}

	time.Sleep(700 * time.Millisecond)
	down := time.Now()
	proxy.Stop()
	time.Sleep(1500 * time.Millisecond)
	up := time.Now()
	if err := proxy.Start(); err != nil {
		t.Fatalf("restart the proxy: %v", err)
	}
	time.Sleep(3 * time.Second)
	cancel()
	wg.Wait()

	sort.Slice(results, func(i, j int) bool { return results[i].start.Before(results[j].start) })
	var (
		maxLatency       time.Duration
		whileDown503     int
		recovered        = up // every request started at or after this succeeded
		successAfter     = map[string]int{}
		registered       []string
		statusesWhenDown = map[int]int{}
	)
	for _, r := range results {
		maxLatency = max(maxLatency, r.end.Sub(r.start))
		if r.err != nil {
			t.Errorf("%s at %v: transport error (crash or hang?): %v", r.target, r.start.Sub(down), r.err)
			continue
		}
		ok := r.status == http.StatusOK || r.status == http.StatusCreated
		if !ok && r.status != http.StatusServiceUnavailable {
			t.Errorf("%s at %v: status %d, want 2xx or 503", r.target, r.start.Sub(down), r.status)
		}
		if r.target == "register" && ok {
			registered = append(registered, r.uid)
		}
		// Requests wholly inside the outage (after pooled connections have
		// been found dead) cannot have succeeded.
		if r.start.After(down.Add(200*time.Millisecond)) && r.end.Before(up) {
			statusesWhenDown[r.status]++
			if r.status == http.StatusServiceUnavailable {
				whileDown503++
			}
		}
		if !r.start.Before(up) && !ok && r.end.After(recovered) {
			recovered = r.end
		}
	}
	for _, r := range results {
		if r.err == nil && r.start.After(recovered) && (r.status == http.StatusOK || r.status == http.StatusCreated) {
			successAfter[r.target]++
		}
	}
	t.Logf("%d requests; max latency %v; while down: %v; full service %v after PostgreSQL returned; %d registrations got 2xx",
		len(results), maxLatency, statusesWhenDown, recovered.Sub(up), len(registered))

	if whileDown503 == 0 {
		t.Errorf("no 503 while PostgreSQL was down (statuses %v)", statusesWhenDown)
	}
	for s, n := range statusesWhenDown {
		if s != http.StatusServiceUnavailable {
			t.Errorf("%d answers %d while PostgreSQL was down, want only 503", n, s)
		}
	}
	if maxLatency > dbTimeout+2*time.Second {
		t.Errorf("slowest request took %v, want at most the %v database timeout plus 2 s", maxLatency, dbTimeout)
	}
	if d := recovered.Sub(up); d > 2*time.Second {
		t.Errorf("full service %v after PostgreSQL returned, want within 2 s", d)
	}
	for _, target := range []string{"whoami", "register"} {
		if successAfter[target] == 0 {
			t.Errorf("no successful %s after recovery", target)
		}
	}

	// Every registration answered 2xx is in the database.
	var found int64
	if len(registered) > 0 {
		if err := check.Table("agents").Where("uid IN ?", registered).Count(&found).Error; err != nil {
			t.Fatalf("count agents: %v", err)
		}
	}
	if found != int64(len(registered)) {
		t.Errorf("agents in the database = %d, want all %d that got 2xx", found, len(registered))
	}
	var keys int64
	if len(registered) > 0 {
		if err := check.Table("public_jwks").Where("agent_uid IN ? AND revoked_at IS NULL", registered).Count(&keys).Error; err != nil {
			t.Fatalf("count keys: %v", err)
		}
	}
	if keys != int64(len(registered)) {
		t.Errorf("active keys of those agents = %d, want %d", keys, len(registered))
	}
}
