package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/envfile"
)

// The tests of this file run the idcli binary against the reference server
// behind a loopback proxy that, once armed, holds the service's answer to
// a directory refresh (PUT /agents/{uid}/directory-signatures): a slow or
// hanging service as the agent sees it.

// refreshProxy forwards every request to a reference server, keeping the
// Host header (the server's HOSTNAME is the proxy's URL).
type refreshProxy struct {
	srv *httptest.Server
	rp  *httputil.ReverseProxy

	mode     atomic.Int32  // proxyPass, proxyHold or proxyHang
	puts     atomic.Int32  // directory refreshes received
	answered chan struct{} // proxyHold: closed once the server has answered the held refresh
	release  chan struct{} // proxyHold: closed by the test to pass the answer on
	gone     chan struct{} // closed when the test ends: every held request ends
}

const (
	proxyPass = iota // forward everything
	proxyHold        // forward the next refresh, hold its answer until release
	proxyHang        // never forward nor answer a refresh
)

// startRefreshProxy starts a reference server (on databaseURL) whose
// HOSTNAME is a proxy in front of it, and returns the proxy.
func startRefreshProxy(t *testing.T, databaseURL string) *refreshProxy {
	t.Helper()
	p := &refreshProxy{answered: make(chan struct{}), release: make(chan struct{}), gone: make(chan struct{})}
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(p.serve))
	srv := clitest.StartServer(t, clitest.ServerOptions{DatabaseURL: databaseURL, Hostname: "http://" + p.srv.Listener.Addr().String()})
	target, _ := url.Parse("http://" + srv.Addr)
	p.rp = &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host
	}}
	p.srv.Start()
	t.Cleanup(p.srv.Close)
	t.Cleanup(func() { close(p.gone) }) // runs first: held handlers return
	return p
}

// URL is the service's base URL, the agent's AGENT_HOSTNAME.
func (p *refreshProxy) URL() string { return p.srv.URL }

func (p *refreshProxy) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/directory-signatures") {
		p.rp.ServeHTTP(w, r)
		return
	}
	p.puts.Add(1)
	switch {
	case p.mode.Load() == proxyHang:
		<-p.gone
	case p.mode.CompareAndSwap(proxyHold, proxyPass):
		rec := httptest.NewRecorder()
		p.rp.ServeHTTP(rec, r)
		close(p.answered)
		select {
		case <-p.release:
		case <-p.gone:
			return
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	default:
		p.rp.ServeHTTP(w, r)
	}
}

// binaryCmd is the idcli binary with args in dir, its environment holding
// only PATH and HOME, stdout and stderr captured.
func binaryCmd(t *testing.T, ctx context.Context, dir string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	cmd := exec.CommandContext(ctx, idcliBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	return cmd, &out, &errb
}

// envVar is the value of name in dir/.env ("" when absent).
func envVar(t *testing.T, dir, name string) string {
	t.Helper()
	f, err := envfile.Read(filepath.Join(dir, ".env"))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := f.Get(name)
	return v
}

// envKid is the kid of the private JWK in dir/.env.
func envKid(t *testing.T, dir string) string {
	t.Helper()
	k, err := signer.ParsePrivateJWK([]byte(envVar(t, dir, "AGENT_PRIVATE_JWK")))
	if err != nil {
		t.Fatalf("AGENT_PRIVATE_JWK in .env: %v", err)
	}
	return k.KeyID()
}

// A rotation that lands while a directory refresh is in flight keeps its
// new key: the refresh, whose answer comes back after the rotation wrote
// the credentials file, finds another key there and drops its record
// instead of writing back the file it read before its request (the revoked
// key). Each step is the idcli binary, against the reference server.
func TestAgentRotationDuringRefreshKeepsNewKey(t *testing.T) {
	clitest.EachDatabase(t, func(t *testing.T, databaseURL string) {
		p := startRefreshProxy(t, databaseURL)
		dir := t.TempDir()
		if r := runBinary(t, dir, nil, "agent", "init", "--hostname", p.URL()); r.code != 0 {
			t.Fatalf("agent init: %v", r)
		}
		oldKid := envKid(t, dir)

		p.mode.Store(proxyHold)
		refresh, _, refreshErr := binaryCmd(t, t.Context(), dir, "agent", "directory", "refresh")
		if err := refresh.Start(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.answered: // the server stored the old key's signature; the answer is held
		case <-t.Context().Done():
			t.Fatal("the refresh never reached the server")
		}

		r := runBinary(t, dir, nil, "agent", "rotate", "--json")
		if r.code != 0 {
			close(p.release)
			t.Fatalf("agent rotate during the refresh: %v", r)
		}
		var rot agentJSON
		if err := json.Unmarshal([]byte(r.stdout), &rot); err != nil || rot.Kid == "" || rot.Kid == oldKid {
			t.Fatalf("agent rotate --json = %q (%v); want a new kid", r.stdout, err)
		}

		close(p.release)
		err := refresh.Wait()
		t.Logf("the refresh: %v, %s", err, refreshErr)
		if got := envKid(t, dir); got != rot.Kid {
			t.Errorf(".env holds kid %s after the refresh ended (%v, %s), want the rotated %s (old %s)", got, err, refreshErr, rot.Kid, oldKid)
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !strings.Contains(refreshErr.String(), "rotat") {
			t.Errorf("the refresh that lost its key ended with %v, stderr %q; want a failure naming the rotation", err, refreshErr)
		}

		r = runBinary(t, dir, nil, "agent", "curl", p.URL()+"/whoami")
		var w whoamiBody
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &w) != nil || w.Kid != rot.Kid {
			t.Errorf("signed /whoami after the race: %v; want 200 with kid %s", r, rot.Kid)
		}
	})
}

// makeDue rewrites the directory signature record of dir/.env as made two
// hours ago and valid one hour: past half its validity, so the next signed
// call refreshes it.
func makeDue(t *testing.T, dir string) {
	t.Helper()
	path := filepath.Join(dir, ".env")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-2 * time.Hour).Unix()
	b = regexp.MustCompile(`AGENT_DIRECTORY_SIGNED_AT=[0-9]+`).ReplaceAll(b, []byte("AGENT_DIRECTORY_SIGNED_AT="+strconv.FormatInt(at, 10)))
	b = regexp.MustCompile(`AGENT_DIRECTORY_SIGNED_UNTIL=[0-9]+`).ReplaceAll(b, []byte("AGENT_DIRECTORY_SIGNED_UNTIL="+strconv.FormatInt(at+3600, 10)))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// `idcli agent curl` against a service that takes a directory refresh and
// never answers: the call is made and answered while the refresh runs, the
// process waits for the refresh a short while only and records the failed
// attempt; the next run, within the backoff, does not try again. The first
// run must end well before the 30 s a refresh may take (the bound below is
// that limit, not a measurement: a run that waited for the refresh would
// be killed by it).
func TestAgentCurlHangingRefreshBacksOff(t *testing.T) {
	clitest.EachDatabase(t, func(t *testing.T, databaseURL string) {
		p := startRefreshProxy(t, databaseURL)
		dir := t.TempDir()
		if r := runBinary(t, dir, nil, "agent", "init", "--hostname", p.URL()); r.code != 0 {
			t.Fatalf("agent init: %v", r)
		}
		uid := envVar(t, dir, "AGENT_UID")
		makeDue(t, dir)
		p.mode.Store(proxyHang)
		before := p.puts.Load()

		curl := func(name string) (string, string) {
			t.Helper()
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			cmd, out, errb := binaryCmd(t, ctx, dir, "agent", "curl", p.URL()+"/whoami")
			err := cmd.Run()
			if ctx.Err() != nil {
				t.Fatalf("%s: agent curl still running after 20 s (killed): it waited for the hanging refresh\nstderr: %s", name, errb)
			}
			var w whoamiBody
			if err != nil || json.Unmarshal(out.Bytes(), &w) != nil || w.UID != uid {
				t.Fatalf("%s: agent curl /whoami: %v\nstdout %s\nstderr %s", name, err, out, errb)
			}
			return out.String(), errb.String()
		}
		_, stderr := curl("first run")
		t.Logf("first run: %s", stderr)
		if got := p.puts.Load() - before; got != 1 {
			t.Errorf("first run: %d directory refreshes sent, want 1", got)
		}
		if !strings.Contains(stderr, "warning:") || !strings.Contains(stderr, "refresh") {
			t.Errorf("first run: stderr %q; want a warning that the refresh did not finish", stderr)
		}
		if got := envVar(t, dir, "AGENT_DIRECTORY_REFRESH_FAILURES"); got != "1" {
			t.Errorf("AGENT_DIRECTORY_REFRESH_FAILURES = %q after the first run, want 1", got)
		}

		_, stderr = curl("second run")
		if got := p.puts.Load() - before; got != 1 {
			t.Errorf("second run: %d directory refreshes sent in all, want still 1 (backing off)", got)
		}
		if strings.Contains(stderr, "warning:") {
			t.Errorf("second run: stderr %q; want no refresh attempted", stderr)
		}
	})
}
