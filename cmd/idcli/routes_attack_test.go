package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// routeAttackPaths are raw request targets whose path starts with an
// optional route (or with no route) but that a normalising server (nginx:
// decoded, "//" merged, dot segments removed) or a lenient one ("\" as
// "/", ";params" or trailing dots dropped) reads under a required route.
var routeAttackPaths = []string{
	"/public/../api/secret",
	"/public/%2e%2e/api/x",
	"/public/%2E%2E/api/x",
	"/public//account/x",
	"/public/x/../account/x",
	"/robots.txt%2F..%2Fadmin",
	"/public/%2e%2e%2fapi/x",
	"/public/..%5capi/x",
	"/public/%252e%252e/api/x",
	"/public/..;/api/x",
	"/api;x/secret",
	"/api./secret",
	"/public/%00/../api/x",
}

// routesConfig is the body of an idcli proxy --config file with /public/
// and /robots.txt optional, /watch/ observe, everything else (/api/,
// /account/, /public/account/, /admin) required; head holds the other
// settings (upstream or forward_auth, limits).
func routesConfig(head string) string {
	return head + `
trust:
  hosts: ["*.localhost:*"]
  allow_http: true
  allow_private: true
mode: required
routes:
  - {prefix: /public/, mode: optional}
  - {prefix: /public/account/, mode: required}
  - {prefix: /robots.txt, mode: optional}
  - {prefix: /api/, mode: required}
  - {prefix: /account/, mode: required}
  - {prefix: /admin, mode: required}
  - {prefix: /watch/, mode: observe}
access_log: "off"
`
}

// startNormalisingService runs nginx as the service: it answers "secret"
// under the required paths and "public" elsewhere, as nginx reads the path
// (normalised), each answer with the path and the X-Agent-Metadata-Role
// header it got.
func startNormalisingService(t *testing.T) string {
	t.Helper()
	answer := `default_type text/plain; return 200 "%s uri=$uri role=$http_x_agent_metadata_role\n";`
	secret, public := fmt.Sprintf(answer, "secret"), fmt.Sprintf(answer, "public")
	return startNginx(t, `
        location /api/ { `+secret+` }
        location /account/ { `+secret+` }
        location /public/account/ { `+secret+` }
        location = /admin { `+secret+` }
        location / { `+public+` }`)
}

// rawSend sends one raw request line (GET target) with host and headers to
// the base URL http://HOST:PORT, from the local address from ("" for any),
// and returns the status and body.
func rawSend(t *testing.T, base, from, target, host string, headers ...string) (int, string) {
	t.Helper()
	d := net.Dialer{Timeout: 10 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	req := "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n"
	for _, h := range headers {
		req += h + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRouteBypassNginxUpstreamAttack: idcli proxy --config with /public/
// optional and /api/ required, in front of nginx, which normalises paths.
// An unsigned request whose raw path starts with /public/ but which nginx
// reads as /api/… (or /account/…, /admin) is refused with 400
// invalid_request and never reaches nginx; normal paths go through.
func TestRouteBypassNginxUpstreamAttack(t *testing.T) {
	t.Parallel()
	service := startNormalisingService(t)
	px, _ := startProxy(t, "--config", writeConfig(t, routesConfig("upstream: "+service)))
	host := strings.TrimPrefix(px, "http://")
	for _, p := range routeAttackPaths {
		status, body := rawSend(t, px, "", p, host)
		if status != http.StatusBadRequest || !strings.Contains(body, `"invalid_request"`) || strings.Contains(body, "secret") {
			t.Errorf("unsigned GET %s: %d %q, want 400 invalid_request", p, status, body)
		}
	}
	if status, body := rawSend(t, px, "", "/public/x", host); status != http.StatusOK || !strings.HasPrefix(body, "public uri=/public/x ") {
		t.Errorf("unsigned GET /public/x: %d %q, want 200 from the service", status, body)
	}
	if status, body := rawSend(t, px, "", "/api/secret", host); status != http.StatusUnauthorized {
		t.Errorf("unsigned GET /api/secret: %d %q, want 401", status, body)
	}
}

// TestForwardAuthNginxRoutesAttack runs the nginx snippet of docs/proxy.md, as
// written there, in front of nginx as the service (which normalises
// paths), with idcli proxy --forward-auth --front nginx --config as its
// auth endpoint: the attack paths are refused (400), a client's own
// X-Agent-Metadata-Role on an observe route never reaches the service,
// and per-address limits key on each client (three requests from one
// client do not get the next one 429).
func TestForwardAuthNginxRoutesAttack(t *testing.T) {
	t.Parallel()
	blocks := docBlocks(t, "docs/proxy.md", "nginx")
	if len(blocks) != 1 || !strings.Contains(blocks[0], "auth_request /_agentid;") {
		t.Fatalf("docs/proxy.md has %d nginx blocks, want the auth_request snippet", len(blocks))
	}
	service := startNormalisingService(t)
	front := func(limits string) string {
		auth, _ := startProxy(t, "--config", writeConfig(t, routesConfig("forward_auth: true\nfront: nginx\nauthorities: [app.example]\n"+limits)))
		return startNginx(t, strings.NewReplacer(
			"http://127.0.0.1:8000", service, // your service
			"http://127.0.0.1:8081", auth, // idcli proxy --forward-auth
		).Replace(blocks[0]))
	}
	const host = "app.example"

	t.Run("paths", func(t *testing.T) {
		t.Parallel()
		base := front("")
		for _, p := range routeAttackPaths {
			status, body := rawSend(t, base, "", p, host)
			if status != http.StatusBadRequest || strings.Contains(body, "secret") {
				t.Errorf("unsigned GET %s through nginx: %d %q, want 400", p, status, body)
			}
		}
		if status, body := rawSend(t, base, "", "/public/x", host); status != http.StatusOK || !strings.HasPrefix(body, "public uri=/public/x ") {
			t.Errorf("unsigned GET /public/x through nginx: %d %q, want 200 from the service", status, body)
		}
		if status, body := rawSend(t, base, "", "/api/secret", host); status != http.StatusUnauthorized || strings.Contains(body, "secret uri") {
			t.Errorf("unsigned GET /api/secret through nginx: %d %q, want 401", status, body)
		}
	})

	t.Run("observe route headers", func(t *testing.T) {
		t.Parallel()
		base := front("")
		for _, name := range []string{"X-Agent-Metadata-Role", "x-agent-metadata-role"} {
			status, body := rawSend(t, base, "", "/watch/x", host, name+": admin")
			if status != http.StatusForbidden || strings.Contains(body, "role=admin") || !strings.Contains(body, `"forbidden"`) {
				t.Errorf("GET /watch/x with %s through nginx: %d %q, want 403 forbidden", name, status, body)
			}
		}
		if status, body := rawSend(t, base, "", "/watch/x", host); status != http.StatusOK || body != "public uri=/watch/x role=\n" {
			t.Errorf("GET /watch/x through nginx: %d %q, want 200 from the service", status, body)
		}
	})

	t.Run("client address", func(t *testing.T) {
		t.Parallel()
		base := front("limits:\n  address: 3/1h\n")
		for i := 1; i <= 3; i++ {
			if status, body := rawSend(t, base, "127.0.0.2", "/public/x", host); status != http.StatusOK {
				t.Fatalf("request %d from 127.0.0.2: %d %q, want 200", i, status, body)
			}
		}
		if status, body := rawSend(t, base, "127.0.0.2", "/public/x", host); status != http.StatusTooManyRequests || !strings.Contains(body, `"rate_limited"`) {
			t.Errorf("4th request from 127.0.0.2: %d %q, want 429 rate_limited", status, body)
		}
		if status, body := rawSend(t, base, "127.0.0.3", "/public/x", host, "X-Forwarded-For: 127.0.0.2"); status != http.StatusOK {
			t.Errorf("first request from 127.0.0.3: %d %q, want 200", status, body)
		}
	})
}

// TestForwardAuthCaddyRoutesAttack: the same paths through the Caddy
// snippet of docs/proxy.md, in front of nginx as the service, with idcli proxy
// --forward-auth --front caddy --config: none reaches a required path of
// the service unsigned; a client's X-Agent-Metadata-Role on an observe
// route never reaches it (the snippet removes it); per-address limits key
// on each client (X-Forwarded-For, which Caddy sets).
func TestForwardAuthCaddyRoutesAttack(t *testing.T) {
	t.Parallel()
	blocks := docBlocks(t, "docs/proxy.md", "caddy")
	if len(blocks) != 1 || !strings.Contains(blocks[0], "forward_auth 127.0.0.1:8081 {") {
		t.Fatalf("docs/proxy.md has %d caddy blocks, want the forward_auth snippet", len(blocks))
	}
	service := startNormalisingService(t)
	auth, _ := startProxy(t, "--config", writeConfig(t, routesConfig("forward_auth: true\nfront: caddy\nauthorities: [app.example]\n")))
	base := startCaddySite(t, blocks[0], "app.example", service, auth)
	for _, p := range routeAttackPaths {
		status, body := rawSend(t, base, "", p, "app.example")
		if status < 400 || strings.Contains(body, "secret") {
			t.Errorf("unsigned GET %s through caddy: %d %q, want a refusal", p, status, body)
		}
	}
	if status, body := rawSend(t, base, "", "/public/x", "app.example"); status != http.StatusOK || !strings.HasPrefix(body, "public uri=/public/x ") {
		t.Errorf("unsigned GET /public/x through caddy: %d %q, want 200 from the service", status, body)
	}
	if status, body := rawSend(t, base, "", "/watch/x", "app.example", "X-Agent-Metadata-Role: admin"); strings.Contains(body, "role=admin") {
		t.Errorf("GET /watch/x with X-Agent-Metadata-Role through caddy: %d %q: the service got it", status, body)
	}

	auth, _ = startProxy(t, "--config", writeConfig(t, routesConfig("forward_auth: true\nfront: caddy\nauthorities: [app.example]\nlimits:\n  address: 3/1h\n")))
	base = startCaddySite(t, blocks[0], "app.example", service, auth)
	for i := 1; i <= 3; i++ {
		if status, body := rawSend(t, base, "127.0.0.2", "/public/x", "app.example"); status != http.StatusOK {
			t.Fatalf("request %d from 127.0.0.2 through caddy: %d %q, want 200", i, status, body)
		}
	}
	if status, body := rawSend(t, base, "127.0.0.2", "/public/x", "app.example"); status != http.StatusTooManyRequests {
		t.Errorf("4th request from 127.0.0.2 through caddy: %d %q, want 429", status, body)
	}
	if status, body := rawSend(t, base, "127.0.0.3", "/public/x", "app.example", "X-Forwarded-For: 127.0.0.2"); status != http.StatusOK {
		t.Errorf("first request from 127.0.0.3 through caddy: %d %q, want 200", status, body)
	}
}
