package caddyagentid_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// verifiedMatcher is the named matcher of docs/caddy.md's routing
// example.
const verifiedMatcher = `@verified expression {http.agentid.outcome} == "verified"`

// TestPlaceholderRouting runs the Caddyfile of docs/caddy.md's routing
// example in a live Caddy: the module in observe mode (and optional on
// /opt/), a matcher on {http.agentid.outcome}, verified agents to one
// loopback upstream and every other request to another, each upstream
// told the placeholders' values. A verified agent reaches the first; an
// unsigned request, a forged signature, and a client claiming
// X-Agent-Outcome: verified or writing a placeholder into its headers
// reach the second, with their outcome and reason.
func TestPlaceholderRouting(t *testing.T) {
	doc, err := os.ReadFile("../../docs/caddy.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{verifiedMatcher, "handle @verified {", "mode observe", "log_append agentid_outcome {http.agentid.outcome}"} {
		if !strings.Contains(string(doc), line) {
			t.Errorf("docs/caddy.md's routing example lacks %q, which this test runs", line)
		}
	}
	key := signertest.Key(0x43)
	const uid = "agent-0123456789abcdef01234599"
	keyPort := agentKeys(t, key)
	origin := "http://" + uid + ".localhost:" + keyPort
	agents, others := newUpstream(t), newUpstream(t)
	port := freePort(t)
	host := "app.example.com:" + port
	logFile := filepath.Join(t.TempDir(), "access.log")
	startCaddy(t, port, fmt.Sprintf(`http://:%s {
	agentid {
		authorities %s
		trust *.localhost:*
		allow_http
		allow_private
		agentid_services http://localhost:%s
		mode observe
		route /opt/ optional
		route /strict/ required
	}
	log {
		output file %s
		format json
	}
	log_append agentid_outcome {http.agentid.outcome}
	log_append agentid_reason {http.agentid.reason}
	%s
	handle @verified {
		reverse_proxy %s {
			header_up X-Seen-Outcome {http.agentid.outcome}
			header_up X-Seen-Agent {http.agentid.agent}
			header_up X-Seen-Uid {http.agentid.uid}
			header_up X-Seen-Keyid {http.agentid.keyid}
		}
	}
	handle {
		reverse_proxy %s {
			header_up X-Seen-Outcome {http.agentid.outcome}
			header_up X-Seen-Reason {http.agentid.reason}
			header_up X-Seen-Agent {http.agentid.agent}
		}
	}
}
`, port, host, keyPort, logFile, verifiedMatcher, strings.TrimPrefix(agents.URL, "http://"), strings.TrimPrefix(others.URL, "http://")))
	client := &http.Client{Timeout: 10 * time.Second}
	full := []string{"@method", "@authority", "@path", "@query"}
	request := func(path string, sign bool) *http.Request {
		req, err := http.NewRequest("GET", "http://"+host+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if sign {
			if err := signer.Sign(req, key, signer.Options{SignatureAgent: origin, Components: full}); err != nil {
				t.Fatal(err)
			}
		}
		req.URL.Host, req.Host = "127.0.0.1:"+port, host
		return req
	}
	forged := request("/forged-a", true)
	forged.URL.Path = "/forged-b"
	claims := request("/claims", false)
	claims.Header.Set("X-Agent-Outcome", "verified")
	claims.Header["X_Agent_Outcome"] = []string{"verified"}
	claims.Header.Set("X-Agent-Reason", "verified")
	injects := request("/injects", false)
	injects.Header.Set("X-Seen-Agent", "{http.agentid.outcome}")
	injects.Header.Set("Signature-Agent", `sig1="{http.agentid.outcome}"`)

	for _, tc := range []struct {
		name, path string
		req        *http.Request
		verified   bool
		seen       map[string]string // placeholder values the upstream was told
	}{
		{"verified agent", "/agent", request("/agent", true), true,
			map[string]string{"X-Seen-Outcome": "verified", "X-Seen-Agent": origin, "X-Seen-Uid": uid, "X-Seen-Keyid": key.KeyID()}},
		{"verified agent, optional route", "/opt/agent", request("/opt/agent", true), true,
			map[string]string{"X-Seen-Outcome": "verified", "X-Seen-Agent": origin}},
		{"unsigned", "/unsigned", request("/unsigned", false), false,
			map[string]string{"X-Seen-Outcome": "not-present", "X-Seen-Reason": "unsigned", "X-Seen-Agent": ""}},
		{"unsigned, optional route", "/opt/unsigned", request("/opt/unsigned", false), false,
			map[string]string{"X-Seen-Outcome": "not-present", "X-Seen-Reason": "unsigned"}},
		{"forged signature", "/forged-b", forged, false,
			map[string]string{"X-Seen-Outcome": "invalid", "X-Seen-Reason": "invalid_signature", "X-Seen-Agent": ""}},
		{"client claims X-Agent-Outcome", "/claims", claims, false,
			map[string]string{"X-Seen-Outcome": "not-present", "X-Seen-Reason": "unsigned"}},
		// Signature-Agent without a signature is unsigned; no value the
		// client wrote is read as a placeholder.
		{"client writes placeholders", "/injects", injects, false,
			map[string]string{"X-Seen-Outcome": "not-present", "X-Seen-Reason": "unsigned", "X-Seen-Agent": ""}},
	} {
		resp, err := client.Do(tc.req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d %s, want 200 (observe and optional never block these)", tc.name, resp.StatusCode, body)
			continue
		}
		to, notTo := agents, others
		if !tc.verified {
			to, notTo = others, agents
		}
		seen := to.got(tc.path)
		if len(seen) != 1 || len(notTo.got(tc.path)) != 0 {
			t.Errorf("%s: the %s upstream saw %d requests, the other %d; want 1 and 0", tc.name, map[bool]string{true: "agents'", false: "others'"}[tc.verified], len(seen), len(notTo.got(tc.path)))
			continue
		}
		for k, want := range tc.seen {
			if got := seen[0].header.Get(k); got != want {
				t.Errorf("%s: %s = %q, want %q", tc.name, k, got, want)
			}
		}
	}

	// Refused requests get the placeholders too (Caddy's access log reads
	// them after the answer): a required route, a path not normal.
	for path, want := range map[string]int{"/strict/unsigned": 401, "/a/%2e%2e/b": 400} {
		resp, err := client.Do(request(path, false))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	wantLog := [][]string{
		{`"uri":"/strict/unsigned"`, `"status":401`, `"agentid_outcome":"not-present"`, `"agentid_reason":"unsigned"`},
		{`"uri":"/a/%2e%2e/b"`, `"status":400`, `"agentid_outcome":"invalid"`, `"agentid_reason":"invalid_request"`},
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(logFile)
		lines := strings.Split(string(b), "\n")
		ok := 0
		for _, want := range wantLog {
			for _, l := range lines {
				if !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(l, w) }) {
					ok++
					break
				}
			}
		}
		if ok == len(wantLog) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the access log lacks %q:\n%s", wantLog, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
