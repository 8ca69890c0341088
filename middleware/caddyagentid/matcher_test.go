package caddyagentid_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestCaddyMatcherAgentHeadersAttack runs a Caddy built with the module
// whose agentid directive has a matcher (a named one on one site, a path
// on the other): a request the matcher skips is not verified, but the
// client's X-Agent-* headers and trailers, in any spelling, must still not
// reach the service (they used to: X-Agent-Uid: evil arrived as the
// service's word). Requests the matcher selects are verified as before.
func TestCaddyMatcherAgentHeadersAttack(t *testing.T) {
	key := signertest.Key(0x45)
	const uid = "agent-0000000000000000000045ab"
	keyPort := agentKeys(t, key)
	origin := "http://" + uid + ".localhost:" + keyPort
	up := newUpstream(t)
	named, inline := freePort(t), freePort(t)
	block := func(matcher string) string {
		return fmt.Sprintf(`agentid %s {
		authorities app.example.com
		trust *.localhost:*
		allow_http
		allow_private
		agentid_services http://localhost:%s
	}
	reverse_proxy %s`, matcher, keyPort, strings.TrimPrefix(up.URL, "http://"))
	}
	// Caddy drops headers spelled with "_" unless the server expects
	// them; a site that does (for a CGI-style backend, say) lets the
	// client's x_agent_uid reach the handlers, where the module must
	// remove it. That option also drops the hyphenated spellings on
	// arrival, so the other site (Caddy's default) is the one whose
	// X-Agent-Uid reaches the module.
	startCaddyWith(t, named, fmt.Sprintf("\tservers 127.0.0.1:%s {\n\t\texpected_underscore_headers x_agent_* X_Agent_*\n\t}\n", named),
		fmt.Sprintf("http://:%s {\n\t@api path /api/*\n\t%s\n}\n\nhttp://:%s {\n\t%s\n}\n",
			named, block("@api"), inline, block("/api/*")))
	client := &http.Client{Timeout: 10 * time.Second}
	send := func(req *http.Request) (int, string) {
		t.Helper()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", req.Method, req.URL, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	forged := func(req *http.Request) {
		req.Header["X-Agent-Uid"] = []string{"evil"}
		req.Header["x_agent_uid"] = []string{"evil"}
		req.Header["X-AGENT-VERDICT"] = []string{"verified"}
		req.Header["X_Agent_Id"] = []string{"https://evil.example"}
		req.Header["x-agent-metadata-role"] = []string{"admin"}
	}
	for _, port := range []string{named, inline} {
		base := "http://127.0.0.1:" + port
		site := map[string]string{named: "@api", inline: "/api/*"}[port]

		// Skipped by the matcher, with forged headers: reaches the
		// service without any of them.
		path := "/public/" + port
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Host = "app.example.com"
		forged(req)
		if status, body := send(req); status != http.StatusOK {
			t.Fatalf("%s: GET %s (skipped by the matcher): %d %s, want 200 from the service", site, path, status, body)
		}
		if seen := up.got(path); len(seen) != 1 {
			t.Fatalf("%s: the service saw %d requests at %s, want 1", site, len(seen), path)
		} else if got := agentHeaders(seen[0].header); len(got) != 0 {
			t.Errorf("%s: a request the matcher skips reached the service with the client's X-Agent-* headers %v", site, got)
		}

		// Skipped, with X-Agent-* trailers after a chunked body.
		path = "/public/trailers/" + port
		req, _ = http.NewRequest("POST", base+path, io.NopCloser(strings.NewReader("payload")))
		req.Host, req.ContentLength = "app.example.com", -1
		req.Trailer = http.Header{"X-Agent-Uid": {"evil"}, "X-Checksum": {"1"}}
		if status, body := send(req); status != http.StatusOK {
			t.Fatalf("%s: POST %s (skipped, with trailers): %d %s, want 200", site, path, status, body)
		}
		if seen := up.got(path); len(seen) != 1 {
			t.Fatalf("%s: the service saw %d requests at %s, want 1", site, len(seen), path)
		} else if got := agentHeaders(seen[0].trailer); len(got) != 0 || seen[0].trailer.Get("X-Checksum") != "1" || seen[0].body != "payload" {
			t.Errorf("%s: skipped request with trailers: the service got body %q, X-Agent-* trailers %v, X-Checksum %q; want the body, none of ours, X-Checksum 1",
				site, seen[0].body, got, seen[0].trailer.Get("X-Checksum"))
		}

		// Selected by the matcher: unsigned is refused, signed passes
		// with the module's headers only.
		path = "/api/unsigned/" + port
		req, _ = http.NewRequest("GET", base+path, nil)
		req.Host = "app.example.com"
		forged(req)
		if status, body := send(req); status != http.StatusUnauthorized || !strings.Contains(body, "missing_signature") {
			t.Errorf("%s: unsigned GET %s: %d %s, want 401 missing_signature", site, path, status, body)
		}
		if n := len(up.got(path)); n != 0 {
			t.Errorf("%s: the service saw %d unsigned requests at %s, want none", site, n, path)
		}
		path = "/api/signed/" + port
		req, _ = http.NewRequest("GET", "http://app.example.com"+path, nil)
		if err := signer.Sign(req, key, signer.Options{SignatureAgent: origin, Components: []string{"@method", "@authority", "@path"}}); err != nil {
			t.Fatal(err)
		}
		req.URL.Host = "127.0.0.1:" + port
		forged(req)
		if status, body := send(req); status != http.StatusOK {
			t.Fatalf("%s: signed GET %s: %d %s, want 200", site, path, status, body)
		}
		want := map[string]string{"X-Agent-Outcome": "verified", "X-Agent-Verdict": "verified", "X-Agent-Id": origin, "X-Agent-Key-Id": key.KeyID(), "X-Agent-Uid": uid}
		if seen := up.got(path); len(seen) != 1 {
			t.Fatalf("%s: the service saw %d requests at %s, want 1", site, len(seen), path)
		} else if got := agentHeaders(seen[0].header); !sameHeaders(got, want) {
			t.Errorf("%s: signed request: the service got %v, want %v", site, got, want)
		}
	}
}
