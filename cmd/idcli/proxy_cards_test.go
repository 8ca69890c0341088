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
	for _, line := range strings.Split(b.stdout.String(), "\n") {
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
	page := clitest.MustDo(t, "GET", strings.TrimSuffix(metricsURL, "/metrics")+"/status", "", nil, nil)
	if want := `data-id="` + cardAgent.URL + `" data-requests="1" data-verified="1" data-invalid="0" data-name="Card Bot"><td><b class="name">Card Bot</b> <span class="purpose">(search-indexing)</span>`; !strings.Contains(page.Body, want) {
		t.Errorf("the status page lacks %s:\n%s", want, page.Body)
	}
	if strings.Count(page.Body, `class="name"`) != 1 {
		t.Errorf("the status page names %d agents, want 1", strings.Count(page.Body, `class="name"`))
	}
}
