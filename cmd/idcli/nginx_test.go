package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// startNginx runs nginx (with daemon off) on a free loopback port with
// serverBlock inside its server { } and returns its base URL. It skips the
// test when nginx is not installed (fails under CI, where .ci/run installs
// it).
func startNginx(t *testing.T, serverBlock string) string {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("nginx is not installed: %v", err)
		}
		t.Skipf("nginx is not installed (apt-get install nginx-light): %v", err)
	}
	addr := "127.0.0.1:" + freePort(t)
	dir := t.TempDir()
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // workers read the temporary folder
	}
	conf := fmt.Sprintf(`%s
daemon off;
worker_processes 1;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events {}
http {
    access_log off;
    client_body_temp_path %[2]s/body;
    proxy_temp_path %[2]s/proxy;
    fastcgi_temp_path %[2]s/fastcgi;
    uwsgi_temp_path %[2]s/uwsgi;
    scgi_temp_path %[2]s/scgi;
    server {
        listen %[3]s;
%[4]s
    }
}
`, user, dir, addr, serverBlock)
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"))
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGQUIT) // graceful stop of the nginx this test started
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr
		}
		select {
		case <-exited:
			errLog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited: %s\n%s\nconfig:\n%s", out, errLog, conf)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not listen on %s within 10 s: %s", addr, out)
		}
	}
}

// TestProxyBehindNginx runs nginx with the README's auth_request snippet,
// as written there, in front of an echo service, with idcli proxy
// --forward-auth as its auth endpoint: a signed request reaches the service
// with the agent's identity (the client's own X-Agent-* headers replaced),
// an unsigned one is refused in required mode and reaches it without any
// identity in optional mode.
func TestProxyBehindNginx(t *testing.T) {
	t.Parallel()
	blocks := readmeBlocks(t, "nginx")
	if len(blocks) != 1 || !strings.Contains(blocks[0], "auth_request /_agentid;") {
		t.Fatalf("README has %d nginx blocks, want the auth_request snippet", len(blocks))
	}
	key := signertest.Key(0x36)
	uid, origin := localAgent(t, key)
	up := newEchoUpstream(t)

	for _, mode := range []string{"required", "optional"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			auth, _ := startProxy(t, append([]string{"--forward-auth", "--mode", mode}, localTrust...)...)
			snippet := strings.NewReplacer(
				"http://127.0.0.1:8000", up.URL, // your service
				"http://127.0.0.1:8081", auth, // idcli proxy --forward-auth
			).Replace(blocks[0])
			base := startNginx(t, snippet)

			path := "/" + mode + "/signed"
			req := signedGet(t, base+path, key, origin, signer.Options{})
			spoof(req.Header)
			if a := clitest.MustSend(t, http.DefaultClient, req); a.Status != http.StatusOK {
				t.Fatalf("signed GET %s through nginx: %d %s, want 200", path, a.Status, a.Body)
			}
			if seen := up.got(path); len(seen) != 1 {
				t.Fatalf("the service saw %d requests at %s, want 1", len(seen), path)
			} else {
				checkNginxHeaders(t, "signed", seen[0], map[string]string{
					"X-Agent-Verdict": "verified", "X-Agent-Uid": uid, "X-Agent-Id": origin, "X-Agent-Key-Id": key.KeyID(),
				})
			}

			path = "/" + mode + "/unsigned"
			req, _ = http.NewRequest(http.MethodGet, base+path, nil)
			spoof(req.Header)
			a := clitest.MustSend(t, http.DefaultClient, req)
			seen := up.got(path)
			if mode == "required" {
				if a.Status != http.StatusUnauthorized || len(seen) != 0 {
					t.Errorf("unsigned GET %s through nginx: %d, the service saw %d requests; want 401 and none", path, a.Status, len(seen))
				}
				return
			}
			if a.Status != http.StatusOK || len(seen) != 1 {
				t.Fatalf("unsigned GET %s through nginx: %d, the service saw %d requests; want 200 and one", path, a.Status, len(seen))
			}
			checkNginxHeaders(t, "unsigned", seen[0], map[string]string{"X-Agent-Verdict": "unverified"})
		})
	}
}

// checkNginxHeaders wants exactly want among the X-Agent-* headers the
// snippet passes (the four it sets; any other X-Agent-* header of the
// client, such as X-Agent-Role, is not the snippet's business and the
// service must not trust it).
func checkNginxHeaders(t *testing.T, what string, h http.Header, want map[string]string) {
	t.Helper()
	for _, name := range []string{"X-Agent-Verdict", "X-Agent-Id", "X-Agent-Uid", "X-Agent-Key-Id"} {
		if got := h.Values(name); len(got) > 1 || h.Get(name) != want[name] {
			t.Errorf("%s: the service behind nginx got %s %q, want %q", what, name, got, want[name])
		}
	}
}
