package keyfetch_test

import (
	"testing"

	"github.com/agentid/agentid/keyfetch"
)

// TestAgentCard: AgentCard finds a verified agent's card by its key-set
// URL alone: a card fetched as the key set itself (;type=cimd), and the
// card a registry lists for the origin of a directory; an agent with
// neither has none.
func TestAgentCard(t *testing.T) {
	t.Parallel()
	w := newRegistryWorld(t)
	ctx := t.Context()

	// Without registries: the card key set, once fetched.
	plain := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"127.0.0.1:" + port(t, w.agents.URL)}, AllowHTTP: true, AllowPrivateNetworks: true})
	cardURL := w.agents.URL + "/card.json"
	if c, ok := plain.AgentCard(cardURL); ok {
		t.Errorf("AgentCard before any fetch = %+v, want none", c)
	}
	if _, err := plain.Key(ctx, keySet(t, cardURL, "cimd"), w.key.Thumbprint); err != nil {
		t.Fatal(err)
	}
	if c, ok := plain.AgentCard(cardURL); !ok || c.Name != "ExampleBot" || c.Registry != "" {
		t.Errorf("AgentCard(card key set) = %+v, %v; want the fetched card, no registry", c, ok)
	}
	dirURL := agentSet(t, w.agents.URL).URL
	if name, purpose := plain.AgentName(dirURL); name != "" || purpose != "" {
		t.Errorf("AgentName(directory, no registry) = %q, %q; want none", name, purpose)
	}

	// With the registry: the directory of a listed card's origin.
	f := keyfetch.New(w.cfg)
	if err := f.RefreshRegistries(ctx); err != nil {
		t.Fatal(err)
	}
	if name, purpose := f.AgentName(dirURL); name != "ExampleBot" || len(purpose) != 256 {
		t.Errorf("AgentName(listed directory) = %q, %q; want the registry's card", name, purpose)
	}
	if name, _ := f.AgentName("http://127.0.0.2:1/.well-known/http-message-signatures-directory"); name != "" {
		t.Errorf("AgentName(unlisted) = %q, want none", name)
	}
}
