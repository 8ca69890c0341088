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

// TestProxyCardCannotClaimOthersKeys: a card a trusted --registry lists,
// whose jwks_uri names a victim's directory, does not describe the victim:
// with deny.cards refusing the hostile card's purpose the victim still
// passes, and neither the access log nor the status page gives the victim
// the hostile card's name. A card whose jwks_uri is on its own origin
// still describes its agent (refused by the same rule). End to end over
// loopback: the proxy, its upstream, the registry and three agent hosts.
func TestProxyCardCannotClaimOthersKeys(t *testing.T) {
	t.Parallel()
	victimKey, ownKey := signertest.Key(0x71), signertest.Key(0x72)
	jwksOf := func(k signer.PrivateKey) map[string]any {
		return map[string]any{"keys": []any{json.RawMessage(k.Public.JWK.MarshalPublic())}}
	}
	serve := func(h http.HandlerFunc) *httptest.Server {
		s := httptest.NewServer(h)
		t.Cleanup(s.Close)
		return s
	}
	directory := func(k signer.PrivateKey) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", signer.DirectoryMediaType)
			json.NewEncoder(w).Encode(jwksOf(k))
		}
	}
	victim := serve(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != signer.DirectoryPath {
			http.NotFound(w, r)
			return
		}
		directory(victimKey)(w, r)
	})
	hostile := serve(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/card.json" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"client_name": "Evil Bot", "web_bot_auth": map[string]any{"purpose": "ai-training"},
			"jwks_uri": victim.URL + signer.DirectoryPath})
	})
	var own *httptest.Server
	own = serve(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case signer.DirectoryPath:
			directory(ownKey)(w, r)
		case "/card.json":
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"client_id": own.URL + "/card.json", "client_name": "Own Bot",
				"web_bot_auth": map[string]any{"purpose": "ai-training"}, "jwks_uri": own.URL + signer.DirectoryPath})
		default:
			http.NotFound(w, r)
		}
	})
	registry := serve(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte(hostile.URL + "/card.json\n" + own.URL + "/card.json\n"))
	})
	up := newEchoUpstream(t)
	cfg := writeConfig(t, `deny: {cards: ["purpose:ai-training"]}
`)
	base, b := startProxy(t, "--config", cfg, "--upstream", up.URL, "--trust", strings.TrimPrefix(registry.URL, "http://"),
		"--trust", strings.TrimPrefix(victim.URL, "http://"), "--allow-http", "--allow-private",
		"--registry", registry.URL+"/list.txt", "--metrics-listen", "127.0.0.1:0", "--access-log", "stdout")
	metricsURL := waitForStderr(t, b, metricsBanner)

	// The own-origin card's agent is refused once the registry is read
	// (401 untrusted_signature_agent until then).
	var owned clitest.Answer
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if owned = clitest.MustSend(t, http.DefaultClient, signedGet(t, base+"/own", ownKey, own.URL, signer.Options{})); owned.Status != 401 {
			break
		}
	}
	if owned.Status != 403 || owned.Code != "forbidden" {
		t.Fatalf("the agent of a card whose jwks_uri is on its own origin: %d %s, want 403 forbidden by deny.cards", owned.Status, owned.Body)
	}
	if a := clitest.MustSend(t, http.DefaultClient, signedGet(t, base+"/victim", victimKey, victim.URL, signer.Options{})); a.Status != 200 {
		t.Errorf("the victim, whose directory the hostile card names: %d %s, want 200 (the hostile card's purpose is not the victim's)", a.Status, a.Body)
	}

	out := b.waitStdout(func(out string) bool { return strings.Contains(out, `"path":"/victim"`) })
	if !strings.Contains(out, `"path":"/own"`) || !strings.Contains(out, `"agent_name":"Own Bot"`) {
		t.Errorf("the access log has no line naming the own-origin card's agent:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, `"path":"/victim"`) && (strings.Contains(line, "Evil Bot") || strings.Contains(line, "agent_purpose")) {
			t.Errorf("the victim's access-log line carries the hostile card's claims: %s", line)
		}
		// Polls made before the registry was read are 401 and unnamed.
		if strings.Contains(line, `"path":"/own"`) && strings.Contains(line, `"status":403`) && !strings.Contains(line, `"agent_name":"Own Bot"`) {
			t.Errorf("the own-origin card's agent is not named by its card: %s", line)
		}
	}
	page := clitest.MustDo(t, "GET", strings.TrimSuffix(metricsURL, "/metrics")+"/status", "", nil, nil)
	if !strings.Contains(page.Body, `data-id="`+victim.URL+`"`) {
		t.Errorf("the status page does not list the victim:\n%s", page.Body)
	}
	if strings.Contains(page.Body, "Evil Bot") {
		t.Errorf("the status page names an agent with the hostile card's name:\n%s", page.Body)
	}
}
