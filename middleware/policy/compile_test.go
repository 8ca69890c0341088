package policy_test

import (
	"fmt"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/policy"
)

// TestCompiledPolicyAgrees decides every agent below under every policy
// below both ways, ReferenceAllows (the lists read one entry at a time,
// the reference) and the compiled allow list, and wants one
// answer: compiling changes the cost of a decision, not the decision.
func TestCompiledPolicyAgrees(t *testing.T) {
	t.Parallel()
	const uid = "agent-0123456789abcdef01234567"
	const other = "agent-ffffffffffffffffffffffff"
	svc := []string{"https://agentid.example", "http://localhost:3000"}
	policies := []policy.List{
		{},
		{Identities: []string{"https://" + uid + ".agentid.example"}},
		{Identities: []string{"HTTPS://Bots.Example.net:443/keys/jwks.json/", "https://a.example/.well-known/http-message-signatures-directory"}},
		{Identities: []string{"https://a.example/?n=1", "bots.example.net/keys/./jwks.json?v=2"}},
		{Identities: []string{"ftp://a.example"}}, // does not validate
		{Hosts: []string{"*.agentid.example"}},
		{Hosts: []string{" *.AgentID.Example ", "LOCALHOST"}},
		{Hosts: []string{"*.id.example", "example.net", "::1"}},
		{Hosts: []string{"*..example", "*.example."}},
		{Hosts: []string{"*.ſ.example", "ſ.example", "bot\u212a.example"}}, // folded onto s and k by EqualFold
		{Hosts: []string{"*.bücher.example", "ÜBER.example"}},
		{Hosts: []string{"S.example"}},    // EqualFold folds an agent's ſ onto it
		{Hosts: []string{"*.a*.example"}}, // does not validate
		{Hosts: []string{"*."}},           // does not validate
		{UIDs: []string{uid}, Services: svc},
		{UIDs: []string{"agent-0123*"}, Services: svc},
		{UIDs: []string{"agent-?123456789abcdef01234567"}, Services: svc},
		{UIDs: []string{`agent-0\123456789abcdef01234567`}, Services: svc},
		{UIDs: []string{"agent-[0-9]*"}, Services: svc[:1]},
		{UIDs: []string{"*"}, Services: svc[1:]},
		{UIDs: []string{"*"}},                      // uids without a service: does not validate
		{UIDs: []string{"agent-["}, Services: svc}, // does not validate
		{Identities: []string{"https://a.example"}, Hosts: []string{"*.example.net"}, UIDs: []string{other, uid}, Services: svc},
		{Services: svc, Hosts: []string{uid + ".other.example"}},
	}
	ids := []string{
		"", "https://" + uid + ".agentid.example", "https://" + uid + ".agentid.example/k.json?n=1",
		"http://" + uid + ".localhost:3000", "http://" + uid + ".localhost:3001", "https://" + uid + ".other.example",
		"https://" + other + ".agentid.example", "https://a.example", "https://a.example/.well-known/http-message-signatures-directory?n=1",
		"https://bots.example.net/keys/jwks.json", "https://BOTS.example.net/keys/jwks.json?v=2", "http://localhost:8080",
		"http://[::1]:8080/keys", "https://example.net", "https://x.id.example", "https://a..example", "https://a.example.",
		"https://x.s.example", "https://s.example", "https://botk.example", "https://x.xn--bcher-kva.example", "not a url",
	}
	var agents []middleware.Agent
	for _, id := range ids {
		agents = append(agents, middleware.Agent{ID: id, Thumbprint: "tp"})
	}
	// Agents built by hand (a KeySource, a test) with key-set URLs the
	// verifier would not produce: upper case, non-ASCII hosts.
	for _, u := range []string{"https://X.S.Example/keys", "https://x.ſ.example", "https://ſ.example", "https://bot\u212a.example", "https://.example.net", "https://über.example", "https://a.bücher.example/"} {
		agents = append(agents, middleware.Agent{ID: u, DirectoryURL: u})
	}
	allowed, total := 0, 0
	for i, p := range policies {
		c, cerr := policy.Allow(p)
		_, derr := policy.Deny(p)
		if (cerr == nil) != (p.Validate() == nil) || (derr == nil) != (cerr == nil) {
			t.Errorf("policy %d: Allow error %v, Deny error %v, Validate %v", i, cerr, derr, p.Validate())
		}
		for _, a := range agents {
			if got, want := c.Allows(a), policy.ReferenceAllows(p, a); got != want {
				t.Errorf("policy %d %+v, agent %q (%q): compiled Allows = %v, reference %v", i, p, a.ID, a.DirectoryURL, got, want)
			} else if got {
				allowed++
			}
			total++
		}
	}
	// Both answers occur often enough for the comparison to mean something.
	if allowed < 20 || total-allowed < 20 {
		t.Errorf("%d of %d decisions allowed: the table does not exercise both answers", allowed, total)
	}
	t.Logf("%d of %d decisions allowed", allowed, total)
}

// TestCompiledPolicyFolds: the non-ASCII host patterns that
// strings.EqualFold folds onto ASCII letters allow what ReferenceAllows
// allows (TestCompiledPolicyAgrees would pass vacuously if
// neither allowed anything).
func TestCompiledPolicyFolds(t *testing.T) {
	t.Parallel()
	p := policy.List{Hosts: []string{"ſ.example", "bot\u212a.example"}}
	c, err := policy.Allow(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"https://s.example", "https://BOTK.example"} {
		a := middleware.Agent{ID: id}
		if !policy.ReferenceAllows(p, a) || !c.Allows(a) {
			t.Errorf("%s: reference %v, compiled %v; want both true", id, policy.ReferenceAllows(p, a), c.Allows(a))
		}
	}
}

// BenchmarkPolicyDecide measures one decision on lists of 1,000 entries
// for an agent that matches the last one: "per-call" is ReferenceAllows,
// which reads the lists on each call (the baseline); "compiled" is the
// decision Require makes, on the lists compiled once.
func BenchmarkPolicyDecide(b *testing.B) {
	const n = 1000
	svc := []string{"https://agentid.example"}
	uidOf := func(i int) string { return fmt.Sprintf("agent-%024x", i) }
	var ids, hosts, uids []string
	for i := range n {
		ids = append(ids, "https://"+uidOf(i)+".agentid.example")
		hosts = append(hosts, fmt.Sprintf("*.bots-%d.example", i))
		uids = append(uids, uidOf(i))
	}
	last := uidOf(n - 1)
	agent := middleware.Agent{ID: "https://" + last + ".agentid.example", DirectoryURL: "https://" + last + ".agentid.example/.well-known/http-message-signatures-directory"}
	hostAgent := middleware.Agent{ID: fmt.Sprintf("https://a.bots-%d.example", n-1)}
	for _, tc := range []struct {
		name  string
		p     policy.List
		agent middleware.Agent
	}{
		{"identities", policy.List{Identities: ids}, agent},
		{"hosts", policy.List{Hosts: hosts}, hostAgent},
		{"uids", policy.List{UIDs: uids, Services: svc}, agent},
	} {
		c, err := policy.Allow(tc.p)
		if err != nil {
			b.Fatal(err)
		}
		if !policy.ReferenceAllows(tc.p, tc.agent) || !c.Allows(tc.agent) {
			b.Fatalf("%s: the agent is not allowed", tc.name)
		}
		b.Run(tc.name+"/per-call", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				policy.ReferenceAllows(tc.p, tc.agent)
			}
		})
		b.Run(tc.name+"/compiled", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				c.Allows(tc.agent)
			}
		})
	}
}
