package main

import (
	"fmt"
	"net"
	"net/http"
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

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestProxyReloadUnderLoad runs the idcli binary with --config in front of
// a real upstream, under a steady load of unsigned and signed requests
// over real HTTP, and sends it SIGHUP twice:
//   - the first file adds a required route and denies an agent: no request
//     fails at any point (no transport error, no 5xx), a request held at
//     the upstream across the signal finishes under the old rules, and
//     once a request meets the new rules none meets the old ones again;
//   - the second file is bad: it is refused, the log names the file, line
//     and key, and the rules in force stay.
func TestProxyReloadUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the idcli binary and runs a load")
	}
	t.Parallel()
	bin := idcliBinary(t)
	srv := clitest.StartServer(t, clitest.ServerOptions{})
	key := signertest.Key(0x71)
	origin := srv.AgentOrigin(clitest.Register(t, nil, srv.URL, key))

	release := make(chan struct{})
	var held atomic.Int32
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/b/held" {
			held.Add(1)
			<-release
		}
		w.Write([]byte("ok"))
	})}
	uln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go up.Serve(uln)
	t.Cleanup(func() { up.Close() })

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "proxy.yaml")
	head := "upstream: http://" + uln.Addr().String() + "\nauthorities: [\"" + addr + "\"]\ntrust:\n  hosts: [\"*.localhost:*\"]\n  allow_http: true\n  allow_private: true\naccess_log: \"off\"\n"
	write := func(body string) {
		t.Helper()
		// Written aside and renamed, as an editor or a deploy does, so
		// that the proxy never reads half a file.
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(head+body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write("mode: optional\n")

	var stderr syncBuffer
	cmd := exec.Command(bin, "proxy", "--config", "proxy.yaml", "--listen", addr)
	cmd.Dir, cmd.Stderr = dir, &stderr
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
		}
	})
	waitLog := func(re *regexp.Regexp) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !re.MatchString(stderr.String()) {
			select {
			case err := <-exited:
				t.Fatalf("the proxy exited (%v):\n%s", err, stderr.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s in the log:\n%s", re, stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitLog(regexp.MustCompile(`listening on http://`))
	base := "http://" + addr
	client := &http.Client{Timeout: 20 * time.Second}

	// The load: unsigned requests to /a (optional everywhere: always
	// 200), unsigned to /b/x (200, then 401 once /b/ is required) and the
	// agent's signed requests (200, then 403 once it is denied).
	type probe struct {
		name       string
		req        func() *http.Request
		before     int
		after      int
		sawAfter   atomic.Bool
		n, flipped atomic.Int32 // flipped: old-rule answers to requests sent after a new-rule answer
	}
	probes := []*probe{
		{name: "unsigned /a", before: 200, after: 200, req: func() *http.Request { r, _ := http.NewRequest("GET", base+"/a", nil); return r }},
		{name: "unsigned /b/x", before: 200, after: 401, req: func() *http.Request { r, _ := http.NewRequest("GET", base+"/b/x", nil); return r }},
		{name: "signed /c", before: 200, after: 403, req: func() *http.Request { return signedGet(t, base+"/c", key, origin, signer.Options{}) }},
	}
	var failures []string
	var failMu sync.Mutex
	fail := func(format string, args ...any) {
		failMu.Lock()
		defer failMu.Unlock()
		if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range probes {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 2000; i++ { // bounded, whatever happens
					select {
					case <-stop:
						return
					default:
					}
					// Sent after an answer under the new rules arrived, a
					// request must meet the new rules (one sent before
					// may have been decided under the old ones).
					after := p.sawAfter.Load()
					resp, err := client.Do(p.req())
					if err != nil {
						fail("%s: %v", p.name, err)
						return
					}
					resp.Body.Close()
					p.n.Add(1)
					switch {
					case resp.StatusCode == p.after && p.after != p.before:
						p.sawAfter.Store(true)
					case resp.StatusCode == p.before && after:
						p.flipped.Add(1) // the old rules after the new ones
					case resp.StatusCode != p.before && resp.StatusCode != p.after:
						fail("%s: %d", p.name, resp.StatusCode)
					}
				}
			}()
		}
	}
	defer func() { close(stop); wg.Wait() }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s:\n%s", what, stderr.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("load under the first rules", func() bool {
		for _, p := range probes {
			if p.n.Load() < 20 {
				return false
			}
		}
		return true
	})

	// A request on /b/ that passed the old rules and is held at the
	// upstream across the reload.
	heldDone := make(chan int, 1)
	go func() {
		r, _ := http.NewRequest("GET", base+"/b/held", nil)
		resp, err := client.Do(r)
		if err != nil {
			heldDone <- -1
			return
		}
		resp.Body.Close()
		heldDone <- resp.StatusCode
	}()
	waitFor("the held request to reach the upstream", func() bool { return held.Load() == 1 })

	write("mode: optional\nroutes: [{prefix: /b/, mode: required}]\ndeny:\n  identities: [\"" + origin + "\"]\n")
	cmd.Process.Signal(syscall.SIGHUP)
	waitLog(regexp.MustCompile(`reload: rules, lists and limits applied.*1 routes, allow 0, deny 1`))
	mark := map[string]int32{}
	for _, p := range probes {
		mark[p.name] = p.n.Load()
	}
	waitFor("requests under the new rules", func() bool {
		for _, p := range probes {
			if p.n.Load() < mark[p.name]+20 {
				return false
			}
		}
		return true
	})
	close(release)
	if s := <-heldDone; s != 200 {
		t.Errorf("the request held across the reload: %d, want 200 (it passed the old rules)", s)
	}
	for _, p := range probes[1:] {
		if !p.sawAfter.Load() {
			t.Errorf("%s: never answered %d after the reload", p.name, p.after)
		}
		if n := p.flipped.Load(); n > 0 {
			t.Errorf("%s: %d answers under the old rules after one under the new", p.name, n)
		}
	}

	// A bad file: refused, named, and the rules in force kept.
	write("mode: optional\nroutes:\n  - {prefix: /b/, mode: requierd}\ndeny:\n  identities: [\"" + origin + "\"]\n")
	cmd.Process.Signal(syscall.SIGHUP)
	waitLog(regexp.MustCompile(`reload: the file was refused.*proxy\.yaml:10: routes\[0\]\.mode: \\"requierd\\"`))
	mark["unsigned /b/x"] = probes[1].n.Load()
	waitFor("requests after the bad file", func() bool { return probes[1].n.Load() > mark["unsigned /b/x"]+20 })
	r, _ := http.NewRequest("GET", base+"/b/y", nil)
	if a := clitest.MustSend(t, client, r); a.Status != 401 {
		t.Errorf("after a refused reload, unsigned /b/y: %d, want 401 (the rules in force kept)", a.Status)
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	failMu.Lock()
	defer failMu.Unlock()
	if len(failures) > 0 {
		t.Errorf("failed requests under load:\n%s", strings.Join(failures, "\n"))
	}
	total := int32(0)
	for _, p := range probes {
		total += p.n.Load()
	}
	t.Logf("%d requests through two reloads", total)
}
