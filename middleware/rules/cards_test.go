package rules_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/rules"
)

// TestDenyCards: agents whose card declares a denied name or purpose
// (case-insensitively) get 403 forbidden; others, and agents without a
// card, pass; a bad selector or a missing AgentCard is refused by New.
func TestDenyCards(t *testing.T) {
	t.Parallel()
	cards := map[string][2]string{
		"https://a.example/card.json": {"Search Bot", "Search-Indexing"},
		"https://b.example/card.json": {"Trainer", "ai-training"},
		"https://c.example/card.json": {"Helper", "user-action"},
	}
	g, err := rules.New(rules.Config{
		DenyCards: []string{"purpose:search-indexing", "name:trainer"},
		AgentCard: func(u string) (string, string) { c := cards[u]; return c[0], c[1] },
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		keySet string
		denied bool
	}{
		{"https://a.example/card.json", true},
		{"https://b.example/card.json", true},
		{"https://c.example/card.json", false},
		{"https://d.example/.well-known/http-message-signatures-directory", false},
	} {
		res := &middleware.Result{Outcome: middleware.OutcomeVerified, Agent: middleware.Agent{ID: tc.keySet, DirectoryURL: tc.keySet}}
		d := g.Decide(httptest.NewRequest("GET", "/x", nil), res)
		if denied := d.Err != nil && d.Err.Code == middleware.CodeForbidden; denied != tc.denied {
			t.Errorf("%s: decision %v, want denied %v", tc.keySet, d.Err, tc.denied)
		}
	}
	for _, bad := range []rules.Config{
		{DenyCards: []string{"owner:x"}, AgentCard: func(string) (string, string) { return "", "" }},
		{DenyCards: []string{"name:"}, AgentCard: func(string) (string, string) { return "", "" }},
		{DenyCards: []string{"name:x"}},
	} {
		if _, err := rules.New(bad); err == nil || !strings.Contains(err.Error(), "rules: ") {
			t.Errorf("New(%v) = %v, want an error", bad.DenyCards, err)
		}
	}
}
