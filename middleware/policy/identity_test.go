package policy_test

import (
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/policy"
	"github.com/agentid/agentid/signer"
)

// TestPolicyIdentityForms: each Signature-Agent form, as the verifier
// resolves it, gets the policy identity docs/signature-agent.md's table
// gives: respellings an owner chooses at will share the budget and the
// deny key; the allow key keeps the query.
func TestPolicyIdentityForms(t *testing.T) {
	svc, err := policy.ParseServices([]string{"https://agentid.example", "http://localhost:3000"})
	if err != nil {
		t.Fatal(err)
	}
	const uid = "agent-0123456789abcdef01234567"
	for _, tc := range []struct {
		member, typ            string
		exact, host, path, uid string
		budget                 string
	}{
		{"https://a.example", "", "https://a.example", "a.example", "", "", "host a.example"},
		{"HTTPS://A.Example:443/", "", "https://a.example", "a.example", "", "", "host a.example"},
		{"https://a.example/.well-known/http-message-signatures-directory", "", "https://a.example", "a.example", "", "", "host a.example"},
		{"https://a.example/.well-known/http-message-signatures-directory?n=1", "", "https://a.example/.well-known/http-message-signatures-directory?n=1", "a.example", "", "", "host a.example"},
		{"https://a.example/?n=1", "", "https://a.example/.well-known/http-message-signatures-directory?n=1", "a.example", "", "", "host a.example"},
		{"https://a.example", "jwks_uri", "https://a.example", "a.example", "", "", "host a.example"},
		{"https://a.example:8443/keys/jwks.json", "", "https://a.example:8443/keys/jwks.json", "a.example", "/keys/jwks.json", "", "host a.example"},
		{"https://a.example/keys/jwks.json/", "jwks_uri", "https://a.example/keys/jwks.json", "a.example", "/keys/jwks.json", "", "host a.example"},
		{"https://a.example/keys/./jwks.json?v=2", "", "https://a.example/keys/jwks.json?v=2", "a.example", "/keys/jwks.json", "", "host a.example"},
		{"https://a.example/card.json", "cimd", "https://a.example/card.json", "a.example", "/card.json", "", "host a.example"},
		{"https://" + uid + ".agentid.example", "", "https://" + uid + ".agentid.example", uid + ".agentid.example", "", uid, "uid " + uid},
		{"https://" + uid + ".agentid.example/?n=7", "", "https://" + uid + ".agentid.example/.well-known/http-message-signatures-directory?n=7", uid + ".agentid.example", "", uid, "uid " + uid},
		{"https://" + uid + ".agentid.example/k.json", "jwks_uri", "https://" + uid + ".agentid.example/k.json", uid + ".agentid.example", "/k.json", uid, "uid " + uid},
		{"http://" + uid + ".localhost:3000", "", "http://" + uid + ".localhost:3000", uid + ".localhost", "", uid, "uid " + uid},
		{"https://" + uid + ".other.example", "", "https://" + uid + ".other.example", uid + ".other.example", "", "", "host " + uid + ".other.example"},
		{"https://" + uid + ".agentid.example.evil.example", "", "https://" + uid + ".agentid.example.evil.example", uid + ".agentid.example.evil.example", "", "", "host " + uid + ".agentid.example.evil.example"},
		{"http://" + uid + ".localhost:3001", "", "http://" + uid + ".localhost:3001", uid + ".localhost", "", "", "host " + uid + ".localhost"},
	} {
		ks, err := signer.AgentMember{Value: tc.member, Type: tc.typ}.KeySet()
		if err != nil {
			t.Fatalf("%s: %v", tc.member, err)
		}
		a := middleware.Agent{ID: ks.Identity(), DirectoryURL: ks.URL, SignatureAgent: ks.Origin()}
		id := svc.Identity(a)
		if id.Exact() != tc.exact || id.Host != tc.host || id.Path != tc.path || id.UID != tc.uid || id.Budget() != tc.budget {
			t.Errorf("%s;type=%s: exact %q host %q path %q uid %q budget %q, want %q %q %q %q %q", tc.member, tc.typ,
				id.Exact(), id.Host, id.Path, id.UID, id.Budget(), tc.exact, tc.host, tc.path, tc.uid, tc.budget)
		}
		// The same from the identity alone (an Agent built by a KeySource).
		if id2 := svc.Identity(middleware.Agent{ID: ks.URL}); id2.Exact() != id.Exact() || id2.Budget() != id.Budget() || id2.Path != id.Path {
			t.Errorf("%s: from the URL alone: %q %q, want %q %q", tc.member, id2.Exact(), id2.Budget(), id.Exact(), id.Budget())
		}
		if p, err := svc.ParseIdentity(tc.member); tc.typ == "" && (err != nil || p.Exact() != id.Exact()) {
			t.Errorf("ParseIdentity(%q) = %q, %v; want %q", tc.member, p.Exact(), err, id.Exact())
		}
	}
	if got := svc.Identity(middleware.Agent{Thumbprint: "tp"}).Budget(); got != "key tp" {
		t.Errorf("no key set: budget %q, want key tp", got)
	}
}
