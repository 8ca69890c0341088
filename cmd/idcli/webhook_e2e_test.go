package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
)

// freeAddr returns a loopback address nothing listens on (it listened
// there a moment ago).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// serverProc is an `idcli server start` process.
type serverProc struct {
	cmd  *exec.Cmd
	addr string
	log  string
	done chan struct{}
}

func startServerProc(t *testing.T, bin, label, addr string, args ...string) *serverProc {
	t.Helper()
	dir := t.TempDir()
	p := &serverProc{addr: addr, log: filepath.Join(dir, label+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(p.addr)
	p.cmd = exec.Command(bin, append([]string{"server", "start", "--bind", "127.0.0.1", "--port", port}, args...)...)
	p.cmd.Dir, p.cmd.Env = dir, procEnv()
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			out, _ := os.ReadFile(p.log)
			t.Logf("%s log:\n%s", label, out)
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err := net.Dial("tcp", p.addr); err == nil {
			c.Close()
			return p
		}
		select {
		case <-p.done:
			out, _ := os.ReadFile(p.log)
			t.Fatalf("%s exited:\n%s", label, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen on %s", label, p.addr)
		}
	}
}

// balancer forwards every request, its Host kept, to the first backend
// that takes the connection: the load balancer in front of the instances.
func balancer(t *testing.T, backends ...string) string {
	t.Helper()
	var d net.Dialer
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: "http", Host: backends[0]})
			r.Out.Host = r.In.Host
		},
		Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var err error
			for _, b := range backends {
				var c net.Conn
				if c, err = d.DialContext(ctx, "tcp", b); err == nil {
					return c, nil
				}
			}
			return nil, err
		}},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: rp}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// hookReceiver verifies each post with the middleware, trusting the
// service host alone (as docs/recipes/webhook-receiver does), and records
// every verified event id; while hold is open, the first verified post
// waits in the handler until hold is closed.
type hookReceiver struct {
	mu       sync.Mutex
	ids      []string
	refusals int
	held     chan struct{} // closed when a post is being held
	hold     chan struct{} // closed to let it go
	holding  sync.Once
}

func (rc *hookReceiver) start(t *testing.T, addr, serviceHost string) {
	t.Helper()
	keys := keyfetch.New(keyfetch.Config{TrustedHosts: []string{serviceHost}, AllowHTTP: true, AllowPrivateNetworks: true})
	v, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{addr}, RequireBound: true,
		RequiredComponents: []string{"@method", "@path", "content-digest"},
		OnResult: func(r middleware.Result) {
			if r.Err != nil {
				rc.mu.Lock()
				rc.refusals++
				rc.mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr) // the port it refused connections on while down
	if err != nil {
		t.Fatalf("receiver back on %s: %v", addr, err)
	}
	hs := &http.Server{Handler: v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&ev); err != nil || ev.ID == "" {
			http.Error(w, "not an event", http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.ids = append(rc.ids, ev.ID)
		rc.mu.Unlock()
		first := false
		rc.holding.Do(func() { first = true })
		if first {
			close(rc.held)
			<-rc.hold
		}
		w.WriteHeader(http.StatusNoContent)
	}))}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
}

func (rc *hookReceiver) seen() (map[string]int, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	m := map[string]int{}
	for _, id := range rc.ids {
		m[id]++
	}
	return m, rc.refusals
}

// TestWebhooksSurviveReceiverOutageAndSIGKILL: two `idcli server start`
// processes on one PostgreSQL database, behind a balancer, deliver to one
// webhook. The receiver is down while agents register and an operator
// disables one and revokes a key (idcli on the database); it comes back,
// and the instance holding the URL's lease is SIGKILLed while the
// receiver holds its post; more changes follow. The other instance takes
// the URL over when the lease expires: every event of the outbox
// arrives, verified by the middleware against the service's directory,
// the held one at least twice (receivers deduplicate by id), none lost.
func TestWebhooksSurviveReceiverOutageAndSIGKILL(t *testing.T) {
	t.Parallel()
	databaseURL := dbtest.PostgresURL(t)
	bin := idcliBinary(t)
	dbtest.Migrated(t, databaseURL)
	db, err := store.Open(context.Background(), databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	start := time.Now()

	rcvAddr := freeAddr(t) // down: nothing listens there yet
	hook := "http://" + rcvAddr + "/agentid-events?token=s3cret"
	addrA, addrB := freeAddr(t), freeAddr(t)
	lb := balancer(t, addrA, addrB)
	_, lbPort, _ := net.SplitHostPort(lb)
	hostname := "http://localhost:" + lbPort
	args := []string{"--hostname", hostname, "--database-url", databaseURL, "--replay-store", "postgres",
		"--webhook", hook, "--webhook-allow-private", "--webhook-timeout", "2s", "--log-level", "warn"}
	procs := map[int]*serverProc{}
	var pids []int
	for i, addr := range []string{addrA, addrB} {
		p := startServerProc(t, bin, fmt.Sprintf("instance-%c", 'a'+i), addr, args...)
		procs[p.cmd.Process.Pid] = p
		pids = append(pids, p.cmd.Process.Pid)
	}

	register := func(seed byte) string {
		key := signertest.Key(seed)
		ans := clitest.MustSend(t, http.DefaultClient, clitest.RegisterRequest(t, hostname, key))
		var out struct {
			UID string `json:"uid"`
		}
		if ans.Status != http.StatusCreated && ans.Status != http.StatusOK || json.Unmarshal([]byte(ans.Body), &out) != nil || out.UID == "" {
			t.Fatalf("registration through the balancer: %d %s", ans.Status, ans.Body)
		}
		return out.UID
	}
	idcli := func(args ...string) {
		t.Helper()
		out, errOut, code := runBin(t, t.TempDir(), procEnv(), bin, append(append([]string{"server"}, args...), "--database-url", databaseURL)...)
		if code != 0 {
			t.Fatalf("idcli server %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	uids := []string{register(0x31), register(0x32), register(0x33)}
	idcli("agents", "disable", uids[0], "--reason", "abuse report #12")
	idcli("keys", "revoke", uids[1], signertest.Key(0x32).KeyID(), "--reason", "key leaked")

	// The receiver is down: wait for failed attempts to pile up.
	waitCursor := func(what string, ok func(store.WebhookCursor) bool) store.WebhookCursor {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if cs, err := db.WebhookCursors(context.Background()); err == nil && len(cs) == 1 && ok(cs[0]) {
				return cs[0]
			}
		}
		cs, _ := db.WebhookCursors(context.Background())
		t.Fatalf("%s: cursor never got there: %+v", what, cs)
		return store.WebhookCursor{}
	}
	cur := waitCursor("receiver down", func(c store.WebhookCursor) bool { return c.Attempts >= 3 })
	if strings.Contains(cur.URL, "s3cret") || strings.Contains(cur.LastError, "s3cret") || cur.LastError == "" {
		t.Errorf("cursor %+v: want the URL and the error redacted, the error kept", cur)
	}

	rc := &hookReceiver{held: make(chan struct{}), hold: make(chan struct{})}
	rc.start(t, rcvAddr, "localhost:"+lbPort)
	select {
	case <-rc.held:
	case <-time.After(15 * time.Second):
		t.Fatal("no delivery reached the receiver within 15 s of its return")
	}
	owner := waitCursor("a post held", func(c store.WebhookCursor) bool { return c.LeaseOwner != "" }).LeaseOwner
	parts := strings.Split(owner, "/")
	pid, _ := strconv.Atoi(parts[min(1, len(parts)-1)])
	victim, ok := procs[pid]
	if !ok {
		t.Fatalf("the lease owner %q is not one of the instances %v", owner, pids)
	}
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.done
	close(rc.hold)

	// More changes while one instance is dead.
	idcli("agents", "enable", uids[0], "--reason", "resolved")
	register(0x34)

	outbox, err := db.OutboxAfter(context.Background(), 0, 1000)
	if err != nil || len(outbox) != 7 {
		t.Fatalf("outbox: %d rows (%v), want 7: 4 registrations, disable, revoke, enable", len(outbox), err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		seen, _ := rc.seen()
		missing := 0
		for _, e := range outbox {
			if seen[e.EventID] == 0 {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events never arrived (seen %v)", missing, len(outbox), seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
	seen, refusals := rc.seen()
	repeats := 0
	for _, n := range seen {
		repeats += n - 1
	}
	if len(seen) != len(outbox) || repeats < 1 || refusals != 0 {
		t.Errorf("the receiver saw %d distinct events, %d repeats, %d refusals; want %d, at least the held one again, 0",
			len(seen), repeats, refusals, len(outbox))
	}
	// The service key signed them all; its private part is in no log.
	key, err := db.ServiceKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if out, _ := os.ReadFile(p.log); key.JWK().D == "" || strings.Contains(string(out), key.JWK().D) || strings.Contains(string(out), "s3cret") {
			t.Errorf("%s shows the service key's private part or the webhook's secret:\n%s", p.log, out)
		}
	}
	t.Logf("all %d events delivered in %v after one SIGKILL (%d repeats)", len(outbox), time.Since(start).Round(time.Millisecond), repeats)
}
