package caddyagentid_test

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/agentid/agentid/signer/signertest/testenv"
)

// localCaddyfile is the docs' Caddyfile for a local idcli server.
const localCaddyfile = "../../docs/recipes/caddy/Caddyfile"

// TestLocalCaddyfile: the docs' local Caddyfile adapts and validates with
// the module (caddy adapt --validate provisions the handler), and runs:
// with its addresses moved to free ports, an agent of the local server
// (its key directory at <uid>.localhost:PORT) reaches the service
// verified, with its uid, and an unsigned request is refused but under
// /public/.
func TestLocalCaddyfile(t *testing.T) {
	conf, err := os.ReadFile(localCaddyfile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	adapt := exec.Command(caddyBin, "adapt", "--config", localCaddyfile, "--adapter", "caddyfile", "--validate")
	adapt.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	out, err := adapt.Output()
	if err != nil {
		t.Fatalf("caddy adapt --validate %s: %v\n%s", localCaddyfile, err, out)
	}
	if !strings.Contains(string(out), `"handler":"agentid"`) {
		t.Errorf("adapted without the agentid handler:\n%s", out)
	}

	key := signertest.Key(0x42)
	const uid = "agent-00112233445566778899aabb"
	keyPort := agentKeys(t, key)
	origin := "http://" + uid + ".localhost:" + keyPort
	up := newUpstream(t)
	port := freePort(t)
	site := strings.NewReplacer(
		"127.0.0.1:8080", "127.0.0.1:"+port,
		"localhost:3000", "localhost:"+keyPort,
		"127.0.0.1:8000", strings.TrimPrefix(up.URL, "http://"),
	).Replace(string(conf))
	startCaddy(t, port, site)
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(path string, sign bool) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest("GET", "http://127.0.0.1:"+port+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if sign {
			if err := signer.Sign(req, key, signer.Options{SignatureAgent: origin}); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, body := get("/hello", true); resp.StatusCode != http.StatusOK || body != "upstream /hello" {
		t.Fatalf("signed: %d %s, want the service's answer", resp.StatusCode, body)
	}
	if seen := up.got("/hello"); len(seen) != 1 || seen[0].header.Get("X-Agent-Uid") != uid || seen[0].header.Get("X-Agent-Id") != origin {
		t.Errorf("the service saw %v, want one request from %s (%s)", seen, uid, origin)
	}
	if resp, body := get("/private", false); resp.StatusCode != http.StatusUnauthorized || len(up.got("/private")) != 0 {
		t.Errorf("unsigned: %d %s, want 401 and the service never reached", resp.StatusCode, body)
	}
	if resp, _ := get("/public/x", false); resp.StatusCode != http.StatusOK {
		t.Errorf("unsigned under /public/: %d, want 200", resp.StatusCode)
	}
}

// TestBuildOutputIgnored: the Caddy binaries the docs' build lines write
// inside the tree (go build -o caddy here; xcaddy's ./caddy at the root)
// are ignored by git, so that building leaves the tree clean. The tests
// build theirs in a temporary directory.
func TestBuildOutputIgnored(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		testenv.SkipOrFail(t, "git is not installed")
	}
	if err := exec.Command("git", "rev-parse", "--git-dir").Run(); err != nil {
		t.Skip("not in a git work tree")
	}
	for _, p := range []string{"caddy", filepath.Join("..", "..", "caddy")} {
		if out, err := exec.Command("git", "check-ignore", "--no-index", p).CombinedOutput(); err != nil {
			t.Errorf("%s is not ignored by git: %v %s", p, err, out)
		}
	}
}
