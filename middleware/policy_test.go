package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentid/agentid/middleware"
)

func TestPolicyAllows(t *testing.T) {
	t.Parallel()
	agent := middleware.Agent{ID: testOrigin, UID: testUID}
	svc := []string{"https://agentid.example"}
	keySet := middleware.Agent{ID: "https://bots.example.net/keys/jwks.json"}
	tests := []struct {
		name   string
		policy middleware.Policy
		agent  middleware.Agent
		want   bool
	}{
		{"zero policy allows nobody", middleware.Policy{}, agent, false},
		{"exact identity", middleware.Policy{Identities: []string{testOrigin}}, agent, true},
		{"identity of a key-set URL", middleware.Policy{Identities: []string{keySet.ID}}, keySet, true},
		{"identity prefix is not enough", middleware.Policy{Identities: []string{"https://bots.example.net"}}, keySet, false},
		{"host wildcard", middleware.Policy{Hosts: []string{"*.agentid.example"}}, agent, true},
		{"host wildcard, upper case", middleware.Policy{Hosts: []string{"*.AgentID.example"}}, agent, true},
		{"host wildcard on a label boundary", middleware.Policy{Hosts: []string{"*.id.example"}}, agent, false},
		{"host wildcard does not match the suffix itself", middleware.Policy{Hosts: []string{"*.example.net"}}, middleware.Agent{ID: "https://example.net"}, false},
		{"exact host of a key-set URL", middleware.Policy{Hosts: []string{"bots.example.net"}}, keySet, true},
		{"exact host, any port", middleware.Policy{Hosts: []string{"localhost"}}, middleware.Agent{ID: "http://localhost:8080"}, true},
		{"bracketed IPv6 host", middleware.Policy{Hosts: []string{"::1"}}, middleware.Agent{ID: "http://[::1]:8080/keys"}, true},
		{"host of an upper-case identity", middleware.Policy{Hosts: []string{"bots.example.net"}}, middleware.Agent{ID: "https://BOTS.example.net"}, true},
		{"uid pattern", middleware.Policy{UIDs: []string{"agent-0123*"}, Services: svc}, agent, true},
		{"uid pattern mismatch", middleware.Policy{UIDs: []string{"agent-ffff*"}, Services: svc}, agent, false},
		{"uid pattern needs a uid", middleware.Policy{UIDs: []string{"*"}, Services: svc}, keySet, false},
		{"uid of another host is not the service's uid", middleware.Policy{UIDs: []string{testUID}, Services: svc}, middleware.Agent{ID: "https://" + testUID + ".other.example", UID: testUID}, false},
		{"uid of a service agent in another form", middleware.Policy{UIDs: []string{testUID}, Services: svc}, middleware.Agent{ID: testOrigin + "/keys.json?n=1"}, true},
		{"uids without a service allow nobody", middleware.Policy{UIDs: []string{"*"}}, agent, false},
		{"no identity at all", middleware.Policy{UIDs: []string{"*"}, Hosts: []string{"*.example"}, Services: svc}, middleware.Agent{}, false},
		{"identity respelled: trailing slash, directory path, case", middleware.Policy{Identities: []string{"HTTPS://Bots.example.net/keys/jwks.json/"}}, keySet, true},
		{"origin respelled as its directory URL", middleware.Policy{Identities: []string{testOrigin + "/.well-known/http-message-signatures-directory"}}, agent, true},
		{"a query is another key set to an allow list", middleware.Policy{Identities: []string{keySet.ID}}, middleware.Agent{ID: keySet.ID + "?n=1"}, false},
	}
	for _, tt := range tests {
		if got := tt.policy.Allows(tt.agent); got != tt.want {
			t.Errorf("%s: Allows = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestPolicyRequire runs signed and unsigned requests through the verifier
// (Optional mode) and the policy: only an allowed verified agent reaches
// the handler; the others get 403 forbidden.
func TestPolicyRequire(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy middleware.Policy
		req    *http.Request
		want   int
	}{
		{"allowed agent", middleware.Policy{UIDs: []string{testUID}, Services: []string{"https://agentid.example"}}, signedRequest(t, keyA, signOpts(nil)), 200},
		{"agent not on the list", middleware.Policy{UIDs: []string{"agent-ffffffffffffffffffffffff"}, Services: []string{"https://agentid.example"}}, signedRequest(t, keyA, signOpts(nil)), 403},
		{"uids without a service", middleware.Policy{UIDs: []string{testUID}}, signedRequest(t, keyA, signOpts(nil)), 403},
		{"unsigned request let through by Optional", middleware.Policy{UIDs: []string{"*"}, Services: []string{"https://agentid.example"}}, httptest.NewRequest("GET", testURL, nil), 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reached := false
			h := middleware.New(middleware.Config{Authorities: testAuthorities, Keys: staticKeys(), Now: clock, Mode: middleware.Optional})(
				tt.policy.Require(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true })))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, tt.req)
			if rec.Code != tt.want || reached != (tt.want == 200) {
				t.Errorf("status %d, handler reached %v; want %d", rec.Code, reached, tt.want)
			}
		})
	}
}
