package refserver_test

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer/signertest"
)

// tcpProxy forwards a local port to PostgreSQL; stopping it is, for the
// server, PostgreSQL going away (refused connections, dropped sessions).
type tcpProxy struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func (p *tcpProxy) start() {
	p.t.Helper()
	addr := p.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.t.Fatalf("proxy listen %s: %v", addr, err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
}

func (p *tcpProxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestPostgresOutage stops PostgreSQL (as seen through a proxy) under a
// running server: requests get 503 database_unavailable and the server
// keeps running; when the database is back, it serves again with no restart.
func TestPostgresOutage(t *testing.T) {
	t.Parallel()
	raw := dbtest.PostgresURL(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{t: t, target: u.Host}
	p.start()
	t.Cleanup(p.stop)
	u.Host = p.addr
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	db := dbtest.Open(t, u.String())
	e := newTestEnv(t, db)
	key := signertest.Key(81)
	uid := e.register(key)

	p.stop()
	checks := []struct {
		name string
		req  func() *http.Request
	}{
		{"readyz", func() *http.Request { return e.request(http.MethodGet, e.base+"/readyz", nil) }},
		{"directory", func() *http.Request { return e.request(http.MethodGet, e.directoryURL(uid), nil) }},
		{"whoami", func() *http.Request { return e.whoamiReq(http.MethodGet, uid, key) }},
		{"register", func() *http.Request { return e.registerReq(signertest.Key(82)) }},
	}
	for _, c := range checks {
		r := e.send(c.req())
		if r.status != http.StatusServiceUnavailable {
			t.Errorf("%s with the database down: status = %d (%s), want 503", c.name, r.status, r.body)
			continue
		}
		if code := r.errorCode(t); code != "database_unavailable" {
			t.Errorf("%s with the database down: code = %s, want database_unavailable", c.name, code)
		}
	}
	if r := e.send(e.request(http.MethodGet, e.base+"/", nil)); r.status != http.StatusOK {
		t.Errorf("liveness with the database down: status = %d, want 200", r.status)
	}

	p.start() // same address: PostgreSQL is back
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := e.send(e.request(http.MethodGet, e.base+"/readyz", nil))
		if r.status == http.StatusOK {
			break
		}
		if r.status != http.StatusServiceUnavailable {
			t.Fatalf("readyz while recovering: status = %d (%s), want 503 or 200", r.status, r.body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not recover: %s", r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range checks {
		r := e.send(c.req())
		if r.status >= 300 {
			t.Errorf("%s after recovery: status = %d (%s), want success", c.name, r.status, r.body)
		}
	}
}
