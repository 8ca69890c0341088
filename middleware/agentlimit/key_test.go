package agentlimit_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/middleware/policy"
)

// TestKeyIsBudget: a verified agent's bucket is "agent " and the name
// policy.Identity.Budget gives it (its uid, its key set's host,
// or its key's thumbprint), then, when its signature covers KeyHeader,
// " #" and one of BucketsPerAgent slots; other requests are keyed by
// address.
func TestKeyIsBudget(t *testing.T) {
	t.Parallel()
	const uid = "agent-0123456789abcdef01234567"
	services := []string{"https://agentid.example"}
	svc, err := policy.ParseServices(services)
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, agentlimit.Config{Services: services})
	split := newLimiter(t, agentlimit.Config{Services: services, KeyHeader: "Signed-Agent-Metadata", BucketsPerAgent: 8})
	long := "https://" + strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + ".example/keys.json"
	agents := []middleware.Agent{
		{ID: "https://" + uid + ".agentid.example"},
		{ID: "https://" + uid + ".agentid.example/k.json?n=1", DirectoryURL: "https://" + uid + ".agentid.example/k.json?n=1"},
		{ID: "https://" + uid + ".other.example", UID: uid},
		{ID: "https://Bots.Example:8443/keys.json"},
		{ID: long},
		{Thumbprint: "tp-0123"},
		{},
	}
	seen := map[string]bool{}
	for _, a := range agents {
		budget := svc.Identity(a).Budget()
		seen[strings.Fields(budget)[0]] = true
		r := request("192.0.2.1:1000")
		r.Header.Set("Signed-Agent-Metadata", "op=acme")
		res := &middleware.Result{Outcome: middleware.OutcomeVerified, Agent: a}
		if key, policy := l.Key(r, res); key != "agent "+budget || policy != agentlimit.PolicyAgent {
			t.Errorf("%+v: key %q %q, want %q %q", a, key, policy, "agent "+budget, agentlimit.PolicyAgent)
		}
		// Not covered: the agent's own budget.
		if key, _ := split.Key(r, res); key != "agent "+budget {
			t.Errorf("%+v, KeyHeader not covered: key %q, want %q", a, key, "agent "+budget)
		}
		res.Agent.Components = []string{`"@authority"`, `"signed-agent-metadata"`}
		key, _ := split.Key(r, res)
		slot, ok := strings.CutPrefix(key, "agent "+budget+" #")
		if n, err := strconv.Atoi(slot); !ok || err != nil || n < 0 || n >= 8 {
			t.Errorf("%+v, KeyHeader covered: key %q, want %q and a slot below 8", a, key, "agent "+budget+" #")
		}
	}
	if !seen["uid"] || !seen["host"] || !seen["key"] {
		t.Errorf("budgets seen %v: want uid, host and key", seen)
	}
	if key, policy := l.Key(request("192.0.2.1:1000"), nil); key != "addr 192.0.2.1" || policy != agentlimit.PolicyAddress {
		t.Errorf("unverified: key %q %q, want addr 192.0.2.1 address", key, policy)
	}
}

// BenchmarkKey names the bucket of a verified agent of a service, without
// and with a covered KeyHeader.
func BenchmarkKey(b *testing.B) {
	services := []string{"https://agentid.example"}
	a := middleware.Agent{ID: "https://agent-0123456789abcdef01234567.agentid.example",
		DirectoryURL: "https://agent-0123456789abcdef01234567.agentid.example/.well-known/http-message-signatures-directory",
		Components:   []string{`"@authority"`, `"signed-agent-metadata"`}}
	res := &middleware.Result{Outcome: middleware.OutcomeVerified, Agent: a}
	r, _ := http.NewRequest("GET", "https://api.example/", nil)
	r.Header.Set("Signed-Agent-Metadata", "op=acme")
	for _, tc := range []struct{ name, header string }{{"agent", ""}, {"keyheader", "Signed-Agent-Metadata"}} {
		l, err := agentlimit.New(agentlimit.Config{Services: services, KeyHeader: tc.header})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				l.Key(r, res)
			}
		})
	}
}
