package proxy

import (
	"strings"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/policy"
	"github.com/agentid/agentid/signer"
)

// serviceUIDBefore is serviceUID as it was before it read the host with
// signer.ServiceURL.UIDOfHost: the reference its answers must equal.
func serviceUIDBefore(id string, services []signer.ServiceURL) string {
	for _, s := range services {
		rest, ok := strings.CutPrefix(id, s.Scheme+"://")
		if !ok {
			continue
		}
		label, host, ok := strings.Cut(rest, ".")
		if ok && (host == s.Host || host == s.Host+"/") && signer.ValidUID(label) {
			return label
		}
	}
	return ""
}

// TestServiceUIDRespelled: for Signature-Agent members naming an agent
// host in other spellings (upper case, the default port, a trailing dot
// or slash, the same first label under another domain), the uid
// X-Agent-Uid carries is the one it carried before, and the one
// policy.Services gives the rules and budgets. Only where X-Agent-Uid
// is documented to be stricter (another scheme, a key-set URL that is not
// the origin) do the two differ, and the header's answer is pinned.
func TestServiceUIDRespelled(t *testing.T) {
	t.Parallel()
	const uid = "agent-0123456789abcdef01234567"
	urls := []string{"https://agentid.example", "other.example:8443", "http://localhost:3000"}
	var services []signer.ServiceURL
	for _, u := range urls {
		su, err := signer.ParseServiceURL(u)
		if err != nil {
			t.Fatal(err)
		}
		services = append(services, su)
	}
	svc, err := policy.ParseServices(urls)
	if err != nil {
		t.Fatal(err)
	}
	upper := strings.ToUpper(uid)
	for _, tc := range []struct {
		member    string
		header    string // X-Agent-Uid
		policyUID string // Services.Identity(a).UID
	}{
		{"https://" + uid + ".agentid.example", uid, uid},
		{"HTTPS://" + upper + ".AgentID.Example", uid, uid},
		{"https://" + uid + ".AGENTID.EXAMPLE:443", uid, uid},
		{"https://" + uid + ".agentid.example:443/", uid, uid},
		{uid + ".agentid.example", uid, uid}, // no scheme: https
		{"https://" + uid + ".agentid.example/.well-known/http-message-signatures-directory", uid, uid},
		{"https://" + uid + ".agentid.example.", "", ""}, // refused by the verifier: as given
		{"https://" + uid + ".agentid.example./", "", ""},
		{"https://" + uid + ".agentid.example:8443", "", ""},
		{"https://" + uid + ".other.example", "", ""},
		{"https://" + uid + ".other.example:8443", uid, uid},
		{"https://" + upper + ".Other.Example:8443/", uid, uid},
		{"https://" + uid + ".sub.agentid.example", "", ""},
		{"https://" + uid + ".agentid.example.evil.example", "", ""},
		{"https://x." + uid + ".agentid.example", "", ""},
		{"https://agent-0123.agentid.example", "", ""},
		{"http://" + uid + ".localhost:3000", uid, uid},
		{"http://" + uid + ".LOCALHOST:3000", uid, uid},
		{"http://" + uid + ".localhost:3001", "", ""},
		{"http://" + uid + ".localhost", "", ""},
		// X-Agent-Uid only for the service's scheme and an origin.
		{"http://" + uid + ".agentid.example", "", uid},
		{"https://" + uid + ".localhost:3000", "", uid},
		{"https://" + uid + ".agentid.example/keys.json", "", uid},
		{"https://" + uid + ".agentid.example/?n=1", "", uid},
	} {
		// The agent as the verifier builds it; a trailing dot never
		// verifies (no valid host), so that agent is built as given.
		a := middleware.Agent{ID: tc.member}
		if ks, err := (signer.AgentMember{Value: tc.member}).KeySet(); err == nil {
			a = middleware.Agent{ID: ks.Identity(), DirectoryURL: ks.URL}
		} else if !strings.HasSuffix(strings.TrimSuffix(tc.member, "/"), ".") {
			t.Fatalf("%s: %v", tc.member, err)
		}
		got, before, policy := serviceUID(a.ID, services), serviceUIDBefore(a.ID, services), svc.Identity(a).UID
		if got != before || got != tc.header || policy != tc.policyUID {
			t.Errorf("%s (identity %s): X-Agent-Uid %q, before %q, want %q; Services.Identity uid %q, want %q",
				tc.member, a.ID, got, before, tc.header, policy, tc.policyUID)
		}
		// Handler.UID also reads identities it is given as they are.
		for _, raw := range []string{tc.member, tc.member + "/", tc.member + "//", a.ID + "/", strings.ToUpper(a.ID)} {
			if got, want := serviceUID(raw, services), serviceUIDBefore(raw, services); got != want {
				t.Errorf("serviceUID(%q) = %q, before %q", raw, got, want)
			}
		}
	}
	for _, raw := range []string{"", "https://", "https://.agentid.example", "https://agentid.example", "https://" + uid + ".", "https://" + uid + ".agentid.example?x", uid} {
		if got, want := serviceUID(raw, services), serviceUIDBefore(raw, services); got != want {
			t.Errorf("serviceUID(%q) = %q, before %q", raw, got, want)
		}
	}
}
