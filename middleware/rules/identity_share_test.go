package rules

import (
	"slices"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/policy"
)

// TestAllowIdentityShared: the allow list decides on the identity the deny
// list computed only when both name the same services (what the gate
// compared per request before New did it once), and that identity is the
// one the allow list's own services give.
func TestAllowIdentityShared(t *testing.T) {
	t.Parallel()
	const uid = "agent-0123456789abcdef01234567"
	a, b := "https://agentid.example", "http://localhost:3000"
	agents := []middleware.Agent{
		{ID: "https://" + uid + ".agentid.example"},
		{ID: "https://" + uid + ".agentid.example/k.json?n=1", DirectoryURL: "https://" + uid + ".agentid.example/k.json?n=1"},
		{ID: "http://" + uid + ".localhost:3000"},
		{ID: "https://" + uid + ".other.example"},
		{ID: "https://bots.example/keys.json"},
		{Thumbprint: "tp"},
	}
	for _, tc := range []struct {
		name        string
		allow, deny []string
		shared      bool
	}{
		{"neither names a service", nil, nil, true},
		{"empty and nil", []string{}, nil, true},
		{"the same list", []string{a, b}, []string{a, b}, true},
		{"allow only", []string{a}, nil, false},
		{"deny only", nil, []string{a}, false},
		{"another order", []string{a, b}, []string{b, a}, false},
		{"another spelling", []string{a}, []string{"HTTPS://AgentID.example/"}, false},
		{"other services", []string{a}, []string{b}, false},
	} {
		g, err := New(Config{Allow: policy.List{UIDs: []string{"agent-*"}, Services: tc.allow},
			Deny: policy.List{UIDs: []string{"agent-f*"}, Services: tc.deny}})
		if len(tc.allow) == 0 || len(tc.deny) == 0 {
			// uids need services: decide on hosts instead.
			g, err = New(Config{Allow: policy.List{Hosts: []string{"*.example"}, Services: tc.allow},
				Deny: policy.List{Hosts: []string{"evil.example"}, Services: tc.deny}})
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if g.sameServices != tc.shared || g.sameServices != slices.Equal(tc.allow, tc.deny) {
			t.Errorf("%s: sameServices = %v, want %v", tc.name, g.sameServices, tc.shared)
		}
		for _, ag := range agents {
			got := g.allowIdentity(ag, g.deny.Services().Identity(ag))
			if want := g.allow.Services().Identity(ag); got != want {
				t.Errorf("%s, agent %q: allow identity %+v, want %+v (its own services')", tc.name, ag.ID, got, want)
			}
		}
	}
}
