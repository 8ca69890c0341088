package policy_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/policy"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

const (
	testUID    = "agent-0123456789abcdef01234567"
	testOrigin = "https://" + testUID + ".agentid.example"
	testURL    = "https://api.example.com/v1/data"
)

func TestAllowListAllows(t *testing.T) {
	t.Parallel()
	agent := middleware.Agent{ID: testOrigin, UID: testUID}
	svc := []string{"https://agentid.example"}
	keySet := middleware.Agent{ID: "https://bots.example.net/keys/jwks.json"}
	tests := []struct {
		name   string
		policy policy.List
		agent  middleware.Agent
		want   bool
	}{
		{"zero list allows nobody", policy.List{}, agent, false},
		{"exact identity", policy.List{Identities: []string{testOrigin}}, agent, true},
		{"identity of a key-set URL", policy.List{Identities: []string{keySet.ID}}, keySet, true},
		{"identity prefix is not enough", policy.List{Identities: []string{"https://bots.example.net"}}, keySet, false},
		{"host wildcard", policy.List{Hosts: []string{"*.agentid.example"}}, agent, true},
		{"host wildcard, upper case", policy.List{Hosts: []string{"*.AgentID.example"}}, agent, true},
		{"host wildcard on a label boundary", policy.List{Hosts: []string{"*.id.example"}}, agent, false},
		{"host wildcard does not match the suffix itself", policy.List{Hosts: []string{"*.example.net"}}, middleware.Agent{ID: "https://example.net"}, false},
		{"exact host of a key-set URL", policy.List{Hosts: []string{"bots.example.net"}}, keySet, true},
		{"exact host, any port", policy.List{Hosts: []string{"localhost"}}, middleware.Agent{ID: "http://localhost:8080"}, true},
		{"bracketed IPv6 host", policy.List{Hosts: []string{"::1"}}, middleware.Agent{ID: "http://[::1]:8080/keys"}, true},
		{"host of an upper-case identity", policy.List{Hosts: []string{"bots.example.net"}}, middleware.Agent{ID: "https://BOTS.example.net"}, true},
		{"uid pattern", policy.List{UIDs: []string{"agent-0123*"}, Services: svc}, agent, true},
		{"uid pattern mismatch", policy.List{UIDs: []string{"agent-ffff*"}, Services: svc}, agent, false},
		{"uid pattern needs a uid", policy.List{UIDs: []string{"*"}, Services: svc}, keySet, false},
		{"uid of another host is not the service's uid", policy.List{UIDs: []string{testUID}, Services: svc}, middleware.Agent{ID: "https://" + testUID + ".other.example", UID: testUID}, false},
		{"uid of a service agent in another form", policy.List{UIDs: []string{testUID}, Services: svc}, middleware.Agent{ID: testOrigin + "/keys.json?n=1"}, true},
		{"no identity at all", policy.List{UIDs: []string{"*"}, Hosts: []string{"*.example"}, Services: svc}, middleware.Agent{}, false},
		{"identity respelled: trailing slash, directory path, case", policy.List{Identities: []string{"HTTPS://Bots.example.net/keys/jwks.json/"}}, keySet, true},
		{"origin respelled as its directory URL", policy.List{Identities: []string{testOrigin + "/.well-known/http-message-signatures-directory"}}, agent, true},
		{"a query is another key set to an allow list", policy.List{Identities: []string{keySet.ID}}, middleware.Agent{ID: keySet.ID + "?n=1"}, false},
	}
	for _, tt := range tests {
		m, err := policy.Allow(tt.policy)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := m.Allows(tt.agent); got != tt.want {
			t.Errorf("%s: Allows = %v, want %v", tt.name, got, tt.want)
		}
		// A deny list of the same names lets in exactly the others.
		d, err := policy.Deny(tt.policy)
		if err != nil {
			t.Fatalf("%s: deny: %v", tt.name, err)
		}
		if tt.want && d.Allows(tt.agent) {
			t.Errorf("%s: the deny list lets the agent in", tt.name)
		}
	}
}

// TestBadListIsAnError: a list that does not validate is an error when
// it is compiled, as an allow or a deny list, never a list of nobody.
func TestBadListIsAnError(t *testing.T) {
	t.Parallel()
	for _, l := range []policy.List{
		{UIDs: []string{"*"}}, // uids without a service
		{UIDs: []string{"agent-["}, Services: []string{"https://agentid.example"}},
		{Hosts: []string{"a.*.example"}},
		{Hosts: []string{"*."}},
		{Identities: []string{"ftp://a.example"}},
		{Services: []string{"not a url"}},
	} {
		if _, err := policy.Allow(l); err == nil {
			t.Errorf("Allow(%+v) = nil error", l)
		}
		if _, err := policy.Deny(l); err == nil {
			t.Errorf("Deny(%+v) = nil error", l)
		}
		if l.Validate() == nil {
			t.Errorf("Validate(%+v) = nil", l)
		}
	}
}

// TestRequire runs signed and unsigned requests through the verifier
// (Optional mode) and the allow list: only an allowed verified agent
// reaches the handler; the others get 403 forbidden.
func TestRequire(t *testing.T) {
	t.Parallel()
	key := signertest.Key(0xa1)
	now := func() time.Time { return time.Unix(1767225600, 0) }
	signed := func() *http.Request {
		r := httptest.NewRequest(http.MethodGet, testURL, nil)
		if err := signer.Sign(r, key, signer.Options{SignatureAgent: testOrigin, Now: now, Legacy: true}); err != nil {
			t.Fatal(err)
		}
		return r
	}
	svc := []string{"https://agentid.example"}
	tests := []struct {
		name string
		list policy.List
		req  *http.Request
		want int
	}{
		{"allowed agent", policy.List{UIDs: []string{testUID}, Services: svc}, signed(), 200},
		{"agent not on the list", policy.List{UIDs: []string{"agent-ffffffffffffffffffffffff"}, Services: svc}, signed(), 403},
		{"unsigned request let through by Optional", policy.List{UIDs: []string{"*"}, Services: svc}, httptest.NewRequest("GET", testURL, nil), 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := policy.Allow(tt.list)
			if err != nil {
				t.Fatal(err)
			}
			keys := middleware.NewStaticKeys()
			keys.Add(testOrigin, key.Public)
			v, err := middleware.New(middleware.Config{Authorities: []string{"api.example.com"}, Keys: keys, Now: now, Mode: middleware.Optional})
			if err != nil {
				t.Fatal(err)
			}
			reached := false
			h := v.Middleware(m.Require(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true })))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, tt.req)
			if rec.Code != tt.want || reached != (tt.want == 200) {
				t.Errorf("status %d, handler reached %v; want %d", rec.Code, reached, tt.want)
			}
		})
	}
}
