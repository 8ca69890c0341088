package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/agentid/agentid/signer/signertest/testenv"
)

// startCaddy runs caddy with site (one site block, its address given as
// http://HOST:PORT) on loopback, with the admin endpoint and automatic
// HTTPS off and its storage in a temporary folder, and stops it when the
// test ends. It skips the test when caddy is not installed (fails under
// CI, where .ci/run installs it).
func startCaddy(t *testing.T, port, site string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs Caddy: skipped with -short")
	}
	bin, err := exec.LookPath("caddy")
	if err != nil {
		testenv.SkipOrFail(t, "caddy is not installed (apt-get install caddy): %v", err)
	}
	dir := t.TempDir()
	conf := fmt.Sprintf(`{
	admin off
	auto_https off
	default_bind 127.0.0.1
	storage file_system %s
}

%s`, filepath.Join(dir, "data"), site)
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", file, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	return runListening(t, "caddy", cmd, syscall.SIGTERM, "127.0.0.1:"+port, func() string {
		return "config:\n" + conf
	})
}

// startCaddySite runs caddy with the site block of docs/proxy.md, its addresses
// replaced: the site is http://host on a free port, the service and the
// forward-auth endpoint are at the base URLs upstream and auth. It returns
// caddy's base URL.
func startCaddySite(t *testing.T, block, host, upstream, auth string) string {
	t.Helper()
	port := freePort(t)
	return startCaddy(t, port, strings.NewReplacer(
		"app.example.com {", "http://"+host+":"+port+" {", // the site, on a free port
		"127.0.0.1:8000", strings.TrimPrefix(upstream, "http://"), // your service
		"127.0.0.1:8081", strings.TrimPrefix(auth, "http://"), // idcli proxy --forward-auth
	).Replace(block))
}

// TestProxyBehindCaddy runs caddy with the forward_auth snippet of docs/proxy.md,
// as written there (only its addresses replaced), in front of an echo
// service, with idcli proxy --forward-auth --front caddy as its auth
// endpoint, and checks what a client can do through it: a signed request
// reaches the service with the agent's identity; the client's
// X-Forwarded-* cannot change the verified method, path or host; no
// X-Agent-* header of the client, in any spelling, reaches the service;
// refusals reach the client as the proxy's body with Signature-Error and
// Accept-Signature, and with their own status (503 too).
func TestProxyBehindCaddy(t *testing.T) {
	t.Parallel()
	blocks := docBlocks(t, "docs/proxy.md", "caddy")
	if len(blocks) != 1 || !strings.Contains(blocks[0], "forward_auth 127.0.0.1:8081 {") || !strings.HasPrefix(blocks[0], "app.example.com {") {
		t.Fatalf("docs/proxy.md has %d caddy blocks, want the forward_auth snippet for app.example.com", len(blocks))
	}
	key := signertest.Key(0x37)
	uid, origin := localAgent(t, key)
	up := newEchoUpstream(t)

	for _, mode := range []string{"required", "optional"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			const host = "app.example.com"
			auth, p := startProxy(t, append([]string{"--forward-auth", "--front", "caddy", "--mode", mode, "--authority", host + ",other.example.com", "--agentid-service", agentService(uid, origin)}, localTrust...)...)
			base := startCaddySite(t, blocks[0], host, up.URL, auth)
			// get is a GET of path signed for host, sent to caddy.
			get := func(path string, opts signer.Options) *http.Request {
				req := signedGet(t, "http://"+host+path, key, origin, opts)
				req.URL, _ = req.URL.Parse(base + path)
				req.Host = host
				return req
			}
			verified := map[string]string{"X-Agent-Outcome": "verified", "X-Agent-Verdict": "verified", "X-Agent-Uid": uid, "X-Agent-Id": origin, "X-Agent-Key-Id": key.KeyID()}
			full := signer.Options{Components: []string{"@method", "@authority", "@path", "@query"}}

			// A signed request, with X-Forwarded-* claiming another one.
			path := "/" + mode + "/signed"
			req := get(path, full)
			forwarded(req.Header, "POST", "evil.example", "/"+mode+"/admin")
			if resp, body := nginxSend(t, req); resp.StatusCode != http.StatusOK {
				t.Fatalf("signed GET %s through caddy: %d %s, want 200", path, resp.StatusCode, body)
			}
			if seen := up.got(path); len(seen) != 1 {
				t.Fatalf("the service saw %d requests at %s, want 1", len(seen), path)
			} else {
				checkCaddyHeaders(t, "signed", seen[0], verified)
			}

			// A signature over GET /public, sent as POST /admin/transfer
			// with X-Forwarded-* naming GET /public: refused.
			public := get("/"+mode+"/public", full)
			path = "/" + mode + "/admin/transfer"
			req, _ = http.NewRequest(http.MethodPost, base+path, strings.NewReader(`{"amount":1000}`))
			req.Host = host
			copySignature(req.Header, public.Header)
			forwarded(req.Header, "GET", host, "/"+mode+"/public")
			checkNginxRefusal(t, "caddy: POST with X-Forwarded-* of a signed GET", req, http.StatusUnauthorized, "invalid_signature", "error=invalid_signature")
			if n := len(up.got(path)); n != 0 {
				t.Errorf("the service saw %d requests at %s, want none", n, path)
			}

			// A signature for another host the endpoint serves, sent to
			// this site with X-Forwarded-Host naming that host: refused
			// (caddy sets X-Forwarded-Host from the Host it got).
			path = "/" + mode + "/host"
			other := signedGet(t, "http://other.example.com"+path, key, origin, full)
			req, _ = http.NewRequest(http.MethodGet, base+path, nil)
			req.Host = host
			copySignature(req.Header, other.Header)
			forwarded(req.Header, "GET", "other.example.com", path)
			checkNginxRefusal(t, "caddy: X-Forwarded-Host of another host", req, http.StatusUnauthorized, "invalid_signature", "error=invalid_signature")

			// A refusal passes through forward_auth as the endpoint wrote
			// it: Signature-Error clock_skew, Accept-Signature, Vary and,
			// when asked for, Problem Details.
			path = "/" + mode + "/ahead"
			ahead := signer.Options{Components: full.Components, Created: time.Now().Add(5 * time.Minute)}
			checkNginxRefusal(t, "caddy: created ahead", get(path, ahead), http.StatusUnauthorized, "signature_not_yet_valid", "error=clock_skew")
			req = get(path, ahead)
			req.Header.Set("Accept", "application/problem+json")
			checkNginxRefusal(t, "caddy: created ahead, Problem Details", req, http.StatusUnauthorized, "signature_not_yet_valid", "error=clock_skew")

			// X-Agent-* headers from the client, in any spelling: removed
			// by the snippet's request_header (dash spellings), or refused
			// by the endpoint (underscores, which caddy passes on); never
			// seen by the service with the client's value.
			for i, name := range []string{"X-Agent-Uid", "x-AGENT-role", "X-Agent-Reason", "X-Agent-Verdict", "X-Agent-Outcome", "X_Agent_Uid", "X_AGENT_ROLE", "X_AGENT_OUTCOME"} {
				path := fmt.Sprintf("/%s/spoof/%d", mode, i)
				req := get(path, signer.Options{})
				req.Header[name] = []string{"agent-ffffffffffffffffffffffff"}
				if strings.Contains(name, "_") {
					checkNginxRefusal(t, "caddy: "+name, req, http.StatusForbidden, "forbidden", "")
					if n := len(up.got(path)); n != 0 {
						t.Errorf("%s: the service saw %d requests, want none", name, n)
					}
					continue
				}
				if resp, body := nginxSend(t, req); resp.StatusCode != http.StatusOK {
					t.Errorf("%s (caddy removes it): %d %s, want 200", name, resp.StatusCode, body)
				} else if seen := up.got(path); len(seen) != 1 {
					t.Errorf("%s: the service saw %d requests, want 1", name, len(seen))
				} else {
					checkCaddyHeaders(t, name, seen[0], verified)
				}
			}

			// A key set that cannot be fetched (nothing listens at its
			// port): 503 reaches the client as the proxy's JSON.
			path = "/" + mode + "/down"
			req = signedGet(t, "http://"+host+path, key, "http://"+uid+".localhost:"+freePort(t), full)
			req.URL, _ = req.URL.Parse(base + path)
			req.Host = host
			checkNginxRefusal(t, "caddy: key set not fetched", req, http.StatusServiceUnavailable, "key_fetch_failed", "")
			if n := len(up.got(path)); n != 0 {
				t.Errorf("key set not fetched: the service saw %d requests, want none", n)
			}

			// Unsigned: refused in required mode, passed without any
			// identity in optional mode.
			path = "/" + mode + "/unsigned"
			req, _ = http.NewRequest(http.MethodGet, base+path, nil)
			req.Host = host
			if mode == "required" {
				checkNginxRefusal(t, "caddy: unsigned", req, http.StatusUnauthorized, "missing_signature", "error=invalid_signature")
				if n := len(up.got(path)); n != 0 {
					t.Errorf("unsigned: the service saw %d requests, want none", n)
				}
			} else {
				if resp, body := nginxSend(t, req); resp.StatusCode != http.StatusOK {
					t.Fatalf("unsigned GET %s through caddy: %d %s, want 200", path, resp.StatusCode, body)
				}
				if seen := up.got(path); len(seen) != 1 {
					t.Fatalf("the service saw %d requests at %s, want 1", len(seen), path)
				} else {
					checkCaddyHeaders(t, "unsigned", seen[0], map[string]string{"X-Agent-Outcome": "not-present", "X-Agent-Verdict": "unverified", "X-Agent-Reason": "unsigned"})
				}
			}

			// The proxy's access log names the original method and path.
			lines := accessLog(t, p.waitStdout(func(out string) bool {
				return strings.Contains(out, `"path":"/`+mode+`/admin/transfer"`)
			}))["/"+mode+"/admin/transfer"]
			if len(lines) != 1 || lines[0].Method != http.MethodPost || lines[0].Reason != "invalid_signature" {
				t.Errorf("access log for POST /%s/admin/transfer: %+v, want one POST line with reason invalid_signature", mode, lines)
			}
		})
	}
}

// TestProxyBehindCaddyObserve: in observe mode an invalid request reaches
// the service through the Caddy snippet of docs/proxy.md with its verdict and
// reason (copy_headers names X-Agent-Reason), and nothing else.
func TestProxyBehindCaddyObserve(t *testing.T) {
	t.Parallel()
	blocks := docBlocks(t, "docs/proxy.md", "caddy")
	if len(blocks) != 1 {
		t.Fatalf("docs/proxy.md has %d caddy blocks, want 1", len(blocks))
	}
	key := signertest.Key(0x38)
	uid, origin := localAgent(t, key)
	up := newEchoUpstream(t)
	const host = "app.example.com"
	auth, _ := startProxy(t, append([]string{"--forward-auth", "--front", "caddy", "--mode", "observe", "--authority", host, "--agentid-service", agentService(uid, origin)}, localTrust...)...)
	base := startCaddySite(t, blocks[0], host, up.URL, auth)

	// A signature over GET /public, sent as POST /admin: invalid.
	public := signedGet(t, "http://"+host+"/public", key, origin, signer.Options{Components: []string{"@method", "@authority", "@path"}})
	req, _ := http.NewRequest(http.MethodPost, base+"/admin", nil)
	req.Host = host
	copySignature(req.Header, public.Header)
	if resp, body := nginxSend(t, req); resp.StatusCode != http.StatusOK {
		t.Fatalf("invalid POST /admin through caddy in observe mode: %d %s, want 200", resp.StatusCode, body)
	}
	if seen := up.got("/admin"); len(seen) != 1 {
		t.Fatalf("the service saw %d requests at /admin, want 1", len(seen))
	} else {
		checkCaddyHeaders(t, "observe, invalid", seen[0], map[string]string{"X-Agent-Outcome": "invalid", "X-Agent-Verdict": "invalid", "X-Agent-Reason": "invalid_signature"})
	}
}

// checkCaddyHeaders wants exactly want among every non-empty X-Agent-*
// header (in any spelling) the service got: Caddy 2.6's copy_headers sets
// the headers the endpoint sends empty (when they do not apply) to "".
func checkCaddyHeaders(t *testing.T, what string, h http.Header, want map[string]string) {
	t.Helper()
	h = h.Clone()
	for name, values := range h {
		if len(values) == 1 && values[0] == "" {
			if _, ok := want[http.CanonicalHeaderKey(name)]; !ok {
				delete(h, name)
			}
		}
	}
	checkNginxHeaders(t, "caddy: "+what, h, want)
}
