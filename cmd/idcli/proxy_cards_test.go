package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestProxyCardNames: an agent whose Signature Agent Card a --registry on
// loopback lists is named by the card in the proxy's access-log line
// (agent_name, agent_purpose) and in the status page's top agents, next to
// its identity; an agent without a card is not.
func TestProxyCardNames(t *testing.T) {
	t.Parallel()
	carded, plain := signertest.Key(0x61), signertest.Key(0x62)
	jwksOf := func(k signer.PrivateKey) map[string]any {
		return map[string]any{"keys": []any{json.RawMessage(k.Public.JWK.MarshalPublic())}}
	}
	serveAgent := func(k signer.PrivateKey, card bool) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.URL.Path == signer.DirectoryPath:
				w.Header().Set("Content-Type", signer.DirectoryMediaType)
				json.NewEncoder(w).Encode(jwksOf(k))
			case r.URL.Path == "/card.json" && card:
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(map[string]any{"client_name": "Card Bot", "jwks": jwksOf(k),
					"web_bot_auth": map[string]any{"purpose": "search-indexing"}})
			default:
				http.NotFound(w, r)
			}
		}))
		t.Cleanup(s.Close)
		return s
	}
	cardAgent, plainAgent := serveAgent(carded, true), serveAgent(plain, false)
	registry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte(cardAgent.URL + "/card.json\n"))
	}))
	t.Cleanup(registry.Close)
	up := newEchoUpstream(t)
	base, b := startProxy(t, "--upstream", up.URL, "--trust", strings.TrimPrefix(registry.URL, "http://"),
		"--trust", strings.TrimPrefix(plainAgent.URL, "http://"), "--allow-http", "--allow-private",
		"--registry", registry.URL+"/list.txt", "--metrics-listen", "127.0.0.1:0", "--access-log", "stdout")
	metricsURL := waitForStderr(t, b, metricsBanner)

	status := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if status = clitest.MustSend(t, http.DefaultClient, signedGet(t, base+"/c", carded, cardAgent.URL, signer.Options{})).Status; status == 200 {
			break
		}
	}
	if status != 200 {
		t.Fatalf("the carded agent: status %d, want 200 once the registry is read", status)
	}
	if a := clitest.MustSend(t, http.DefaultClient, signedGet(t, base+"/p", plain, plainAgent.URL, signer.Options{})); a.Status != 200 {
		t.Fatalf("the plain agent: %d %s", a.Status, a.Body)
	}

	var named, unnamed int
	out := b.waitStdout(func(out string) bool { return strings.Contains(out, `"path":"/p"`) })
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(line, `"path":"/c"`) && strings.Contains(line, `"status":200`):
			if !strings.Contains(line, `"agent_name":"Card Bot"`) || !strings.Contains(line, `"agent_purpose":"search-indexing"`) {
				t.Errorf("access-log line %s lacks the card's name and purpose", line)
			}
			named++
		case strings.Contains(line, `"path":"/p"`):
			if strings.Contains(line, "agent_name") {
				t.Errorf("access-log line %s names an agent without a card", line)
			}
			unnamed++
		}
	}
	if named != 1 || unnamed != 1 {
		t.Errorf("%d lines of the carded agent's 200, %d of the plain agent, want 1 and 1:\n%s", named, unnamed, b.stdout)
	}
	// deny.cards refuses the agent whose card declares the purpose, once
	// the registry is read; the agent without a card passes.
	cfg := writeConfig(t, `deny: {cards: ["purpose:Search-Indexing"]}
`)
	denying, _ := startProxy(t, "--config", cfg, "--upstream", up.URL, "--trust", strings.TrimPrefix(registry.URL, "http://"),
		"--trust", strings.TrimPrefix(plainAgent.URL, "http://"), "--allow-http", "--allow-private",
		"--registry", registry.URL+"/list.txt", "--access-log", "off")
	var denied clitest.Answer
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if denied = clitest.MustSend(t, http.DefaultClient, signedGet(t, denying+"/c", carded, cardAgent.URL, signer.Options{})); denied.Status != 401 {
			break // 401 untrusted_signature_agent until the registry is read
		}
	}
	if denied.Status != 403 || denied.Code != "forbidden" {
		t.Errorf("deny.cards purpose: the carded agent got %d %s, want 403 forbidden", denied.Status, denied.Body)
	}
	if a := clitest.MustSend(t, http.DefaultClient, signedGet(t, denying+"/p", plain, plainAgent.URL, signer.Options{})); a.Status != 200 {
		t.Errorf("deny.cards: the agent without a card got %d %s, want 200", a.Status, a.Body)
	}
	r := runCLI(t.Context(), t.TempDir(), nil, "proxy", "--config", writeConfig(t, "allow: {cards: [\"name:Card Bot\"]}\n"))
	if r.err == nil || !strings.Contains(r.err.Error(), "allow.cards: a card's name and purpose are its agent's own claim") {
		t.Errorf("allow.cards: %v, want an error", r.err)
	}

	page := clitest.MustDo(t, "GET", strings.TrimSuffix(metricsURL, "/metrics")+"/status", "", nil, nil)
	if want := `data-id="` + cardAgent.URL + `" data-requests="1" data-verified="1" data-invalid="0" data-name="Card Bot"><td><b class="name">Card Bot</b> <span class="purpose">(search-indexing)</span>`; !strings.Contains(page.Body, want) {
		t.Errorf("the status page lacks %s:\n%s", want, page.Body)
	}
	if strings.Count(page.Body, `class="name"`) != 1 {
		t.Errorf("the status page names %d agents, want 1", strings.Count(page.Body, `class="name"`))
	}
}

// TestProxyTrustedProxies: behind a load balancer listed in
// limits.trusted_proxies, unsigned clients are limited by the rightmost
// X-Forwarded-For address that is not the balancer's, each with its own
// budget; without the list the header is ignored and every request from
// the balancer's address shares one budget.
func TestProxyTrustedProxies(t *testing.T) {
	t.Parallel()
	up := newEchoUpstream(t)
	file := func(extra string) string {
		return writeConfig(t, `upstream: `+up.URL+`
trust: {hosts: ["*.localhost:*"], allow_http: true, allow_private: true}
mode: optional
access_log: "off"
limits:
  address: 1/1h
`+extra)
	}
	behind, b := startProxy(t, "--config", file("  trusted_proxies: [127.0.0.0/8]\n"))
	direct, _ := startProxy(t, "--config", file(""))
	if out := b.stderr.String(); !strings.Contains(out, "client address from X-Forwarded-For when the peer is one of [127.0.0.0/8]") {
		t.Errorf("banner %q does not name the trusted proxies", out)
	}
	get := func(base, xff string) int {
		t.Helper()
		r, _ := http.NewRequest("GET", base+"/u", nil)
		r.Header.Set("X-Forwarded-For", xff)
		return clitest.MustSend(t, http.DefaultClient, r).Status
	}
	for _, tc := range []struct {
		base, xff string
		want      int
	}{
		{behind, "198.51.100.1", 200},
		{behind, "203.0.113.7, 198.51.100.2", 200}, // the client wrote 203.0.113.7
		{behind, "198.51.100.1", 429},
		{behind, "203.0.113.7, 198.51.100.1", 429}, // a written entry buys no new budget
		{direct, "198.51.100.1", 200},
		{direct, "198.51.100.2", 429}, // the header is not believed: one budget
	} {
		if got := get(tc.base, tc.xff); got != tc.want {
			t.Errorf("X-Forwarded-For %q through %s: %d, want %d", tc.xff, tc.base, got, tc.want)
		}
	}

	r := runCLI(t.Context(), t.TempDir(), nil, "proxy", "--config", file("  client_addr_header: X-Real-IP\n"))
	if r.err == nil || !strings.Contains(r.err.Error(), "limits.client_addr_header: \"X-Real-IP\" needs limits.trusted_proxies") {
		t.Errorf("client_addr_header without trusted_proxies: %v, want an error", r.err)
	}
	r = runCLI(t.Context(), t.TempDir(), nil, "proxy", "--config", file("  trusted_proxies: [lb.internal]\n"))
	if r.err == nil || !strings.Contains(r.err.Error(), `limits.trusted_proxies[0]: "lb.internal": want an address or CIDR`) {
		t.Errorf("a host name in trusted_proxies: %v, want an error", r.err)
	}
}
