package rules_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/middleware/policy"
	"github.com/agentid/agentid/middleware/rules"
)

const (
	uid00 = "agent-00ab00000000000000000000"
	uid01 = "agent-01ab00000000000000000000"
)

// unsigned is the outcome of an unsigned request (unverified, missing_signature).
const unsigned middleware.Outcome = "unsigned"

func res(v middleware.Outcome, id, uid string) *middleware.Result {
	r := &middleware.Result{Outcome: v, Agent: middleware.Agent{ID: id, UID: uid}}
	switch v {
	case unsigned:
		r.Outcome, r.Err = middleware.OutcomeUnverified, middleware.Fail(middleware.CodeMissingSignature, "no signature")
	case middleware.OutcomeInvalid:
		r.Err = middleware.Fail(middleware.CodeExpiredSignature, "expired")
	}
	return r
}

// TestDecide walks the order of the checks: the route's mode (longest
// prefix), deny, allow.
func TestDecide(t *testing.T) {
	g, err := rules.New(rules.Config{
		Mode: middleware.Required,
		Routes: []rules.Route{
			{Prefix: "/pub/", Mode: middleware.Optional},
			{Prefix: "/pub/private/", Mode: middleware.Required},
			{Prefix: "/watch/", Mode: middleware.Observe},
		},
		Allow: policy.List{Hosts: []string{"*.good.example"}, Identities: []string{"https://solo.example"}, UIDs: []string{"agent-00*"},
			Services: []string{"http://svc.example"}},
		Deny: policy.List{Hosts: []string{"bad.good.example"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		res        *middleware.Result
		want       middleware.Code // "" passes
	}{
		{"required, verified, allowed host", "/x", res(middleware.OutcomeVerified, "https://a.good.example", ""), ""},
		{"required, unsigned", "/x", res(unsigned, "", ""), middleware.CodeMissingSignature},
		{"required, no outcome", "/x", nil, middleware.CodeMissingSignature},
		{"optional, unsigned", "/pub/a", res(unsigned, "", ""), ""},
		{"optional, invalid", "/pub/a", res(middleware.OutcomeInvalid, "", ""), middleware.CodeExpiredSignature},
		{"longest prefix wins: required", "/pub/private/a", res(unsigned, "", ""), middleware.CodeMissingSignature},
		{"observe, invalid", "/watch/a", res(middleware.OutcomeInvalid, "", ""), ""},
		{"observe, denied agent", "/watch/a", res(middleware.OutcomeVerified, "https://bad.good.example", ""), ""},
		{"denied host wins over allowed suffix", "/x", res(middleware.OutcomeVerified, "https://bad.good.example", ""), middleware.CodeForbidden},
		{"not on the allow list", "/x", res(middleware.OutcomeVerified, "https://other.example", ""), middleware.CodeForbidden},
		{"suffix needs a label boundary", "/x", res(middleware.OutcomeVerified, "https://evilgood.example", ""), middleware.CodeForbidden},
		{"suffix alone is not under itself", "/x", res(middleware.OutcomeVerified, "https://good.example", ""), middleware.CodeForbidden},
		{"exact identity", "/x", res(middleware.OutcomeVerified, "https://solo.example", ""), ""},
		{"host case-insensitive, port ignored", "/x", res(middleware.OutcomeVerified, "https://A.Good.Example:8443", ""), ""},
		{"uid pattern", "/x", res(middleware.OutcomeVerified, "http://"+uid00+".svc.example", uid00), ""},
		{"uid pattern miss", "/x", res(middleware.OutcomeVerified, "http://"+uid01+".svc.example", uid01), middleware.CodeForbidden},
		{"uid of another host", "/x", res(middleware.OutcomeVerified, "http://"+uid00+".other.example", uid00), middleware.CodeForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "http://api.example"+tc.path, nil)
			d := g.Decide(r, tc.res)
			var got middleware.Code
			if d.Err != nil {
				got = d.Err.Code
			}
			if got != tc.want {
				t.Errorf("code = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMatcherAgreesWithPolicy: the gate's allow list decides as the
// list compiled by policy.Allow does.
func TestMatcherAgreesWithPolicy(t *testing.T) {
	p := policy.List{
		Identities: []string{"https://x.example", "https://k.example/keys.json"},
		Hosts:      []string{"*.agentid.example", "exact.example", "*.a.b.example"},
		UIDs:       []string{"agent-0123*", "agent-ffffffffffffffffffffffff"},
		Services:   []string{"http://svc", "https://agentid.example"},
	}
	g, err := rules.New(rules.Config{Allow: p, Mode: middleware.Optional})
	if err != nil {
		t.Fatal(err)
	}
	m, err := policy.Allow(p)
	if err != nil {
		t.Fatal(err)
	}
	agents := []middleware.Agent{
		{ID: "https://x.example"}, {ID: "https://x.example/"}, {ID: "https://k.example/keys.json"},
		{ID: "https://q.agentid.example"}, {ID: "https://agentid.example"}, {ID: "https://q.AGENTID.example:1"},
		{ID: "https://exact.example"}, {ID: "https://sub.exact.example"}, {ID: "https://c.a.b.example"},
		{ID: "https://b.example"}, {ID: "https://[::1]:8080"}, {ID: "nonsense"},
		{ID: "http://agent-0123aa.svc", UID: "agent-0123aa"}, {ID: "http://s", UID: "agent-ffffffffffffffffffffffff"},
		{ID: "http://agent-0123000000000000000000aa.svc"}, {ID: "https://agent-ffffffffffffffffffffffff.agentid.example/k?n=1"},
		{ID: "https://agent-ffffffffffffffffffffffff.other.example", UID: "agent-ffffffffffffffffffffffff"},
		{ID: "https://x.example/?n=1"}, {ID: "https://k.example/keys.json/"}, {ID: "https://k.example/keys.json?n=1"},
		{ID: "http://s", UID: "agent-1"}, {},
	}
	for _, a := range agents {
		r := httptest.NewRequest("GET", "/", nil)
		d := g.Decide(r, &middleware.Result{Outcome: middleware.OutcomeVerified, Agent: a})
		if got, want := d.Err == nil, m.Allows(a); got != want {
			t.Errorf("%+v: allowed = %v, policy.Allow(p).Allows = %v", a, got, want)
		}
	}
}

func TestNewRejects(t *testing.T) {
	for _, cfg := range []rules.Config{
		{Routes: []rules.Route{{Prefix: "api"}}},
		{Routes: []rules.Route{{Prefix: "/a"}, {Prefix: "/a"}}},
		{Allow: policy.List{Hosts: []string{"a.*.example"}}},
		{Deny: policy.List{UIDs: []string{"agent-["}}},
	} {
		if _, err := rules.New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}

// TestMiddlewareLimits: behind the verifier's middleware (here: a request
// context carrying a verified agent), the limiter spends per agent.
func TestMiddlewareLimits(t *testing.T) {
	lim, _ := agentlimit.New(agentlimit.Config{Agent: agentlimit.Limit{Quota: 1, Window: time.Minute}})
	g, _ := rules.New(rules.Config{Limiter: lim})
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	var got []int
	for _, id := range []string{"https://a.example", "https://a.example", "https://b.example"} {
		r := httptest.NewRequest("GET", "/", nil)
		r = r.WithContext(middleware.WithAgent(r.Context(), middleware.Agent{ID: id}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		got = append(got, rec.Code)
		if rec.Header().Get("RateLimit") == "" {
			t.Errorf("%s: no RateLimit header", id)
		}
	}
	if got[0] != 204 || got[1] != 429 || got[2] != 204 {
		t.Errorf("statuses %v, want [204 429 204]", got)
	}
}
