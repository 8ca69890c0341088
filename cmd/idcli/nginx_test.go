package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
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

// startNginx runs nginx (with daemon off) on a free loopback port with
// serverBlock inside its server { } and returns its base URL. It skips the
// test when nginx is not installed (fails under CI, where .ci/run installs
// it).
func startNginx(t *testing.T, serverBlock string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs nginx: skipped with -short")
	}
	bin, err := exec.LookPath("nginx")
	if err != nil {
		testenv.SkipOrFail(t, "nginx is not installed (apt-get install nginx-light): %v", err)
	}
	dir := t.TempDir()
	addr, conf := writeNginxConf(t, dir, serverBlock)
	cmd := exec.Command(bin, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"))
	return runListening(t, "nginx", cmd, syscall.SIGQUIT, addr, func() string {
		errLog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		return fmt.Sprintf("%s\nconfig:\n%s", errLog, conf)
	})
}

// writeNginxConf writes dir/nginx.conf for nginx in the foreground with
// one worker, its pid, error log and temporary files in dir, no access log
// and one server listening on a free loopback port with serverBlock inside
// its server { }. It returns that host:port and the configuration.
func writeNginxConf(t testing.TB, dir, serverBlock string) (addr, conf string) {
	t.Helper()
	addr = "127.0.0.1:" + freePort(t)
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // workers read the temporary folder
	}
	conf = fmt.Sprintf(`%s
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
	return addr, conf
}

// runListening starts cmd (a server the test configured to listen on
// addr), stops it with stop (then kills it after 10 s) when the test ends,
// and returns http://addr once addr accepts connections. If cmd exits
// first, the test fails with its output and exited().
func runListening(t *testing.T, name string, cmd *exec.Cmd, stop os.Signal, addr string, exited func() string) string {
	t.Helper()
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(stop) // graceful stop of the server this test started
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr
		}
		select {
		case <-done:
			t.Fatalf("%s exited: %s\n%s", name, out, exited())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen on %s within 10 s: %s", name, addr, out)
		}
	}
}

// TestProxyBehindNginx runs nginx with the auth_request snippet of docs/proxy.md,
// as written there, in front of an echo service, with idcli proxy
// --forward-auth --front nginx as its auth endpoint, and checks what a
// client can do through it: a signed request reaches the service with the
// agent's identity; the client's X-Forwarded-* cannot change the verified
// method, path or host; no X-Agent-* header of the client, in any
// spelling, reaches the service; refusals reach the client as the proxy's
// body (JSON, or Problem Details when asked for) with Signature-Error,
// Accept-Signature and Vary; the proxy logs the original method and path.
func TestProxyBehindNginx(t *testing.T) {
	t.Parallel()
	blocks := docBlocks(t, "docs/proxy.md", "nginx")
	if len(blocks) != 1 || !strings.Contains(blocks[0], "auth_request /_agentid;") {
		t.Fatalf("docs/proxy.md has %d nginx blocks, want the auth_request snippet", len(blocks))
	}
	key := signertest.Key(0x36)
	uid, origin := localAgent(t, key)
	up := newEchoUpstream(t)

	for _, mode := range []string{"required", "optional"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			// The service answers for app.example (and other.example): nginx
			// passes the client's Host on to the auth endpoint.
			auth, p := startProxy(t, append([]string{"--forward-auth", "--front", "nginx", "--mode", mode, "--authority", "app.example,other.example", "--agentid-service", agentService(uid, origin)}, localTrust...)...)
			snippet := strings.NewReplacer(
				"http://127.0.0.1:8000", up.URL, // your service
				"http://127.0.0.1:8081", auth, // idcli proxy --forward-auth
			).Replace(blocks[0])
			base := startNginx(t, snippet)
			const host = "app.example"
			// get is a GET of path signed for app.example, sent to nginx.
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
				t.Fatalf("signed GET %s through nginx: %d %s, want 200", path, resp.StatusCode, body)
			}
			if seen := up.got(path); len(seen) != 1 {
				t.Fatalf("the service saw %d requests at %s, want 1", len(seen), path)
			} else {
				checkNginxHeaders(t, "signed", seen[0], verified)
			}

			// A signature over GET /public, sent as POST /admin/transfer
			// with X-Forwarded-* naming GET /public: refused.
			public := get("/"+mode+"/public", full)
			path = "/" + mode + "/admin/transfer"
			req, _ = http.NewRequest(http.MethodPost, base+path, strings.NewReader(`{"amount":1000}`))
			req.Host = host
			copySignature(req.Header, public.Header)
			forwarded(req.Header, "GET", host, "/"+mode+"/public")
			checkNginxRefusal(t, "POST with X-Forwarded-* of a signed GET", req, http.StatusUnauthorized, "invalid_signature", "error=invalid_signature")
			if n := len(up.got(path)); n != 0 {
				t.Errorf("the service saw %d requests at %s, want none", n, path)
			}

			// A signature for this host, sent with another Host and
			// X-Forwarded-Host naming this one: refused.
			path = "/" + mode + "/host"
			signed := get(path, full)
			req, _ = http.NewRequest(http.MethodGet, base+path, nil)
			copySignature(req.Header, signed.Header)
			req.Host = "other.example"
			forwarded(req.Header, "GET", host, path)
			checkNginxRefusal(t, "another Host with X-Forwarded-Host", req, http.StatusUnauthorized, "invalid_signature", "error=invalid_signature")

			// What an agent acts on reaches it through nginx: a signature
			// created ahead of the verifier's clock is refused with
			// Signature-Error clock_skew and Accept-Signature, its body in
			// Problem Details when asked for (one Content-Type, whatever
			// the path's extension).
			path = "/" + mode + "/ahead.html"
			req = get(path, signer.Options{Components: full.Components, Created: time.Now().Add(5 * time.Minute)})
			checkNginxRefusal(t, "created ahead", req, http.StatusUnauthorized, "signature_not_yet_valid", "error=clock_skew")
			req = get(path, signer.Options{Components: full.Components, Created: time.Now().Add(5 * time.Minute)})
			req.Header.Set("Accept", "application/problem+json")
			checkNginxRefusal(t, "created ahead, Problem Details", req, http.StatusUnauthorized, "signature_not_yet_valid", "error=clock_skew")
			if n := len(up.got(path)); n != 0 {
				t.Errorf("the service saw %d requests at %s, want none", n, path)
			}

			// Refusals whose status auth_request would turn into 500 reach
			// the client with their own status: a signature for a host
			// the service does not serve (421), and a key set that cannot
			// be fetched (503; nothing listens at its port).
			path = "/" + mode + "/evil"
			req = signedGet(t, "http://evil.example"+path, key, origin, full)
			req.URL, _ = req.URL.Parse(base + path)
			req.Host = "evil.example"
			checkNginxRefusal(t, "signed for a host not served", req, http.StatusMisdirectedRequest, "misdirected_request", "")
			req = signedGet(t, "http://evil.example"+path, key, origin, full)
			req.URL, _ = req.URL.Parse(base + path)
			req.Host = "evil.example"
			req.Header.Set("Accept", "application/problem+json")
			checkNginxRefusal(t, "signed for a host not served, Problem Details", req, http.StatusMisdirectedRequest, "misdirected_request", "")
			path = "/" + mode + "/down"
			req = signedGet(t, "http://"+host+path, key, "http://"+uid+".localhost:"+freePort(t), full)
			req.URL, _ = req.URL.Parse(base + path)
			req.Host = host
			checkNginxRefusal(t, "key set not fetched", req, http.StatusServiceUnavailable, "key_fetch_failed", "")
			for _, p := range []string{"/" + mode + "/evil", path} {
				if n := len(up.got(p)); n != 0 {
					t.Errorf("the service saw %d requests at %s, want none", n, p)
				}
			}

			// X-Agent-* headers from the client, in any spelling: refused
			// by the proxy, or dropped by nginx (underscores); never seen
			// by the service.
			for i, name := range []string{"X-Agent-Uid", "x-AGENT-role", "X-Agent-Reason", "X-Agent-Verdict", "X-Agent-Outcome", "X_Agent_Uid", "X_AGENT_ROLE", "X_AGENT_OUTCOME"} {
				path := fmt.Sprintf("/%s/spoof/%d", mode, i)
				req := get(path, signer.Options{})
				req.Header[name] = []string{"agent-ffffffffffffffffffffffff"}
				if strings.Contains(name, "_") {
					if resp, body := nginxSend(t, req); resp.StatusCode != http.StatusOK {
						t.Errorf("%s (nginx drops it): %d %s, want 200", name, resp.StatusCode, body)
					} else if seen := up.got(path); len(seen) != 1 {
						t.Errorf("%s: the service saw %d requests, want 1", name, len(seen))
					} else {
						checkNginxHeaders(t, name, seen[0], verified)
					}
					continue
				}
				checkNginxRefusal(t, name, req, http.StatusForbidden, "forbidden", "")
				if n := len(up.got(path)); n != 0 {
					t.Errorf("%s: the service saw %d requests, want none", name, n)
				}
			}

			// Unsigned: refused in required mode, passed without any
			// identity in optional mode.
			path = "/" + mode + "/unsigned"
			req, _ = http.NewRequest(http.MethodGet, base+path, nil)
			if mode == "required" {
				checkNginxRefusal(t, "unsigned", req, http.StatusUnauthorized, "missing_signature", "error=invalid_signature")
				if n := len(up.got(path)); n != 0 {
					t.Errorf("unsigned: the service saw %d requests, want none", n)
				}
			} else {
				if resp, body := nginxSend(t, req); resp.StatusCode != http.StatusOK {
					t.Fatalf("unsigned GET %s through nginx: %d %s, want 200", path, resp.StatusCode, body)
				}
				if seen := up.got(path); len(seen) != 1 {
					t.Fatalf("the service saw %d requests at %s, want 1", len(seen), path)
				} else {
					checkNginxHeaders(t, "unsigned", seen[0], map[string]string{"X-Agent-Outcome": "not-present", "X-Agent-Verdict": "unverified", "X-Agent-Reason": "unsigned"})
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

// forwarded sets the X-Forwarded-* headers a client may add to describe
// another request.
func forwarded(h http.Header, method, host, uri string) {
	h.Set("X-Forwarded-Method", method)
	h.Set("X-Forwarded-Host", host)
	h.Set("X-Forwarded-Uri", uri)
	h.Set("X-Forwarded-Proto", "http")
}

// copySignature copies the signature fields of from into h.
func copySignature(h, from http.Header) {
	for _, k := range []string{"Signature", "Signature-Input", "Signature-Agent"} {
		h[k] = from[k]
	}
}

// nginxSend sends req and returns the response and its body.
func nginxSend(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// checkNginxRefusal sends req through nginx and wants the proxy's refusal:
// status, the error body with code (Problem Details when req's Accept asks
// for application/problem+json, else JSON) under one Content-Type, the
// Signature-Error field sig ("" for none), Vary: Accept, and
// Accept-Signature exactly when the status is 401 or 403.
func checkNginxRefusal(t *testing.T, what string, req *http.Request, status int, code, sig string) {
	t.Helper()
	resp, body := nginxSend(t, req)
	ct, want := "application/json", ""
	var e struct {
		Error struct {
			Status int
			Code   string
		} `json:"error"`
		Type   string
		Status int
		Code   string
	}
	err := json.Unmarshal([]byte(body), &e)
	if strings.Contains(req.Header.Get("Accept"), "application/problem+json") {
		// Problem Details: the draft's type for a Signature-Error, else
		// about:blank; our code as a member.
		ct, want = "application/problem+json", "about:blank"
		if sig != "" {
			code, _, _ := strings.Cut(strings.TrimPrefix(sig, "error="), ",")
			want = "urn:ietf:params:sig-error:" + code
		}
		e.Error.Status, e.Error.Code = e.Status, e.Code
	}
	if err != nil || resp.StatusCode != status || e.Error.Code != code || e.Error.Status != status || e.Type != want {
		t.Errorf("%s through nginx: %d %q, want %d with the error %q (type %q)", what, resp.StatusCode, body, status, code, want)
	}
	if got := resp.Header.Values("Content-Type"); len(got) != 1 || got[0] != ct {
		t.Errorf("%s through nginx: Content-Type %q, want %s", what, got, ct)
	}
	if got := resp.Header.Values("Signature-Error"); strings.Join(got, "\n") != sig {
		t.Errorf("%s through nginx: Signature-Error %q, want %q", what, got, sig)
	}
	if got := resp.Header.Values("Vary"); len(got) != 1 || got[0] != "Accept" {
		t.Errorf("%s through nginx: Vary %q, want Accept", what, got)
	}
	as := resp.Header.Get("Accept-Signature")
	if challenge := status == http.StatusUnauthorized || status == http.StatusForbidden; challenge && as == "" {
		t.Errorf("%s through nginx: no Accept-Signature in %v", what, resp.Header)
	} else if !challenge && as != "" {
		t.Errorf("%s through nginx: Accept-Signature %q on a %d", what, as, status)
	}
}

// checkNginxHeaders wants exactly want among every X-Agent-* header (in
// any spelling) the service got.
func checkNginxHeaders(t *testing.T, what string, h http.Header, want map[string]string) {
	t.Helper()
	for name, values := range h {
		if !strings.HasPrefix(strings.ReplaceAll(strings.ToLower(name), "_", "-"), "x-agent-") {
			continue
		}
		if w, ok := want[http.CanonicalHeaderKey(name)]; !ok || len(values) != 1 || values[0] != w {
			t.Errorf("%s: the service behind nginx got %s: %q, want %q", what, name, values, w)
		}
	}
	for name, w := range want {
		if got := h.Get(name); got != w {
			t.Errorf("%s: the service behind nginx got %s %q, want %q", what, name, got, w)
		}
	}
}
