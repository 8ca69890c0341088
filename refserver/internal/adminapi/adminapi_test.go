package adminapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/internal/adminapi"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
)

// scopeCase is a route with the scope it must need and what a call with
// that scope answers ({uid}, {kid} and {id} are filled in; {pending} is
// the {uid} of an agent pending review, one per route).
type scopeCase struct {
	method, path, scope, body string
	status                    int
}

var scopeCases = []scopeCase{
	{http.MethodGet, "/admin/v1/agents", store.ScopeAgentsRead, "", http.StatusOK},
	{http.MethodGet, "/admin/v1/agents/{uid}", store.ScopeAgentsRead, "", http.StatusOK},
	{http.MethodDelete, "/admin/v1/agents/{uid}", store.ScopeAgentsWrite, "", http.StatusOK},
	{http.MethodGet, "/admin/v1/agents/{uid}/keys", store.ScopeAgentsRead, "", http.StatusOK},
	{http.MethodPost, "/admin/v1/agents/{uid}/disable", store.ScopeAgentsWrite, `{"reason":"abuse report #12"}`, http.StatusOK},
	{http.MethodPost, "/admin/v1/agents/{uid}/enable", store.ScopeAgentsWrite, "", http.StatusOK},
	{http.MethodPost, "/admin/v1/agents/{pending}/approve", store.ScopeAgentsWrite, `{"reason":"identity checked"}`, http.StatusOK},
	{http.MethodPost, "/admin/v1/agents/{pending}/reject", store.ScopeAgentsWrite, `{"reason":"no contact address"}`, http.StatusOK},
	{http.MethodPost, "/admin/v1/agents/{uid}/keys/{kid}/revoke", store.ScopeKeysRevoke, `{"reason":"leaked"}`, http.StatusOK},
	{http.MethodGet, "/admin/v1/invitations", store.ScopeTokensWrite, "", http.StatusOK},
	{http.MethodPost, "/admin/v1/invitations", store.ScopeTokensWrite, `{"note":"for bob","uses":2}`, http.StatusCreated},
	{http.MethodPost, "/admin/v1/invitations/{id}/revoke", store.ScopeTokensWrite, "", http.StatusOK},
	{http.MethodGet, "/admin/v1/audit", store.ScopeAuditRead, "", http.StatusOK},
}

// TestRouteTableTested: every route of the table has its row above, with
// the same scope, so that a route added without a test of who may call
// it fails here.
func TestRouteTableTested(t *testing.T) {
	t.Parallel()
	var got, want []string
	for _, r := range adminapi.Routes(adminapi.Config{}) {
		got = append(got, r.Method+" "+r.Path+" "+r.Scope)
	}
	for _, c := range scopeCases {
		want = append(want, c.method+" "+strings.Replace(c.path, "{pending}", "{uid}", 1)+" "+c.scope)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("routes:\n%s\nwant (scopeCases):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestScopes: for each route, a token holding its scope (and only it) is
// served and every token holding any other scope alone is refused 403
// insufficient_scope, naming the scope, in the body and in
// WWW-Authenticate; a token holding every scope is served too.
func TestScopes(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		tokens := map[string]string{}
		var secrets []string
		for _, sc := range store.Scopes() {
			tokens[sc] = e.token(strings.ReplaceAll(sc, ":", "-"), sc)
			secrets = append(secrets, tokens[sc])
		}
		all := e.token("root", store.Scopes()...)
		secrets = append(secrets, all)
		uid := e.agent(1, 2)
		kid := signertest.Key(2).KeyID()
		_, inv, err := e.db.CreateInvite(context.Background(), "", 1, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		fill := strings.NewReplacer("{uid}", uid, "{kid}", kid, "{id}", fmt.Sprint(inv.ID))
		seed := byte(200)
		for i, c := range scopeCases {
			path := fill.Replace(c.path)
			if before, after, ok := strings.Cut(path, "{pending}"); ok {
				path = before + e.pendingAgent(byte(100+i)) + after
			}
			if c.method == http.MethodDelete {
				// Each call served deletes an agent: one of its own each.
				seed++
				path = strings.ReplaceAll(c.path, "{uid}", e.agent(seed))
			}
			for _, sc := range store.Scopes() {
				a := e.call(c.method, path, c.body, "Bearer "+tokens[sc])
				if sc == c.scope {
					if a.status != c.status {
						t.Errorf("%s %s with %s: %d %s, want %d", c.method, c.path, sc, a.status, a.body, c.status)
					}
					continue
				}
				wantChallenge := `Bearer error="insufficient_scope", scope="` + c.scope + `"`
				if a.status != http.StatusForbidden || a.errorCode() != "insufficient_scope" ||
					!strings.Contains(a.message(), c.scope) || a.header.Get("WWW-Authenticate") != wantChallenge {
					t.Errorf("%s %s with %s: %d %s (WWW-Authenticate %q), want 403 insufficient_scope naming %s",
						c.method, c.path, sc, a.status, a.body, a.header.Get("WWW-Authenticate"), c.scope)
				}
			}
			if c.method == http.MethodDelete {
				seed++
				path = strings.ReplaceAll(c.path, "{uid}", e.agent(seed))
			}
			if a := e.call(c.method, path, c.body, "Bearer "+all); a.status != c.status {
				t.Errorf("%s %s with every scope: %d %s, want %d", c.method, c.path, a.status, a.body, c.status)
			}
		}
		e.noSecret(secrets...)
	})
}

// TestUnauthorized: no token, a malformed one, one of another format, an
// unknown, a revoked and an expired one are each 401 unauthorized with
// WWW-Authenticate, before the route reads anything; none of them is
// echoed in an answer or a log line.
func TestUnauthorized(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		good := e.token("good", store.ScopeAgentsRead)
		revoked := e.token("gone", store.ScopeAgentsRead)
		if _, _, err := e.db.RevokeOperatorToken(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		expired := e.token("old", store.ScopeAgentsRead)
		// The database's clock decides; the test moves the expiry, not a clock.
		if err := e.g.Exec("UPDATE operator_tokens SET expires_at = ? WHERE name = 'old'", time.Now().UTC().Add(-time.Hour)).Error; err != nil {
			t.Fatal(err)
		}
		invite, _, err := e.db.CreateInvite(ctx, "", 1, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		// Another token of the format (the last character carries 4 bits:
		// A and E leave the 2 spare bits zero, as strict base64url wants).
		unknown := good[:len(good)-2] + "AA"
		if unknown == good {
			unknown = good[:len(good)-2] + "BE"
		}
		for _, c := range []struct {
			name      string
			auth      []string
			challenge string
			message   string
		}{
			{"none", nil, "Bearer", "needs an operator token"},
			{"empty", []string{""}, `Bearer error="invalid_token"`, "must be Bearer"},
			{"scheme only", []string{"Bearer"}, `Bearer error="invalid_token"`, "must be Bearer"},
			{"basic", []string{"Basic " + good}, `Bearer error="invalid_token"`, "must be Bearer"},
			{"two spaces", []string{"Bearer  " + good}, `Bearer error="invalid_token"`, "not an operator token"},
			{"twice", []string{"Bearer " + good, "Bearer " + good}, `Bearer error="invalid_token"`, "one Authorization"},
			{"invitation token", []string{"Bearer " + invite}, `Bearer error="invalid_token"`, "not an operator token"},
			{"jwt", []string{"Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJyb290In0."}, `Bearer error="invalid_token"`, "not an operator token"},
			{"truncated", []string{"Bearer " + good[:len(good)-1]}, `Bearer error="invalid_token"`, "not an operator token"},
			{"not base64url", []string{"Bearer " + good[:len(good)-1] + "+"}, `Bearer error="invalid_token"`, "not an operator token"},
			{"unknown", []string{"Bearer " + unknown}, `Bearer error="invalid_token"`, "not known"},
			{"revoked", []string{"Bearer " + revoked}, `Bearer error="invalid_token"`, "revoked"},
			{"expired", []string{"Bearer " + expired}, `Bearer error="invalid_token"`, "expired"},
		} {
			// An unknown query parameter too: authentication comes first.
			a := e.call(http.MethodGet, "/admin/v1/agents?bogus=1", "", c.auth...)
			if a.status != http.StatusUnauthorized || a.errorCode() != "unauthorized" ||
				a.header.Get("WWW-Authenticate") != c.challenge || !strings.Contains(a.message(), c.message) {
				t.Errorf("%s: %d %s (WWW-Authenticate %q), want 401 unauthorized, %q, saying %q",
					c.name, a.status, a.body, a.header.Get("WWW-Authenticate"), c.challenge, c.message)
			}
		}
		for _, scheme := range []string{"Bearer ", "bearer ", "BEARER "} {
			if a := e.call(http.MethodGet, "/admin/v1/agents", "", scheme+good); a.status != http.StatusOK {
				t.Errorf("%q: %d %s, want 200", scheme, a.status, a.body)
			}
		}
		// A revoked token stays refused; a token revoked while in use is
		// refused from its next request.
		if _, _, err := e.db.RevokeOperatorToken(ctx, "good"); err != nil {
			t.Fatal(err)
		}
		if a := e.call(http.MethodGet, "/admin/v1/agents", "", "Bearer "+good); a.status != http.StatusUnauthorized {
			t.Errorf("after revoking good: %d, want 401", a.status)
		}
		e.noSecret(good, revoked, expired, unknown)
	})
}

// TestAdminOnServiceHostOnly: the admin routes answer on the service host
// alone.
func TestAdminOnServiceHostOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite::memory:")
	tok := e.token("reader", store.ScopeAgentsRead)
	uid := e.agent(3)
	for host, want := range map[string]int{
		uid + "." + strings.TrimPrefix(e.base, "http://"): http.StatusNotFound,
		"elsewhere.test": http.StatusMisdirectedRequest,
	} {
		req, _ := http.NewRequest(http.MethodGet, e.base+"/admin/v1/agents", nil)
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+tok)
		if a := e.do(req); a.status != want {
			t.Errorf("on %s: %d %s, want %d", host, a.status, a.body, want)
		}
	}
}

// TestPagination: GET /agents pages through more agents than a page holds,
// each once, in uid order, ending with next null; bad parameters are 400.
func TestPagination(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		tok := "Bearer " + e.token("reader", store.ScopeAgentsRead)
		var want []string
		for i := range 23 {
			want = append(want, e.agent(byte(100+i)))
		}
		slices.Sort(want)
		var got []string
		path, pages := "/admin/v1/agents?limit=10", 0
		for {
			a := e.call(http.MethodGet, path, "", tok)
			var page struct {
				Agents []store.AgentInfo `json:"agents"`
				Next   *string           `json:"next"`
			}
			if a.status != http.StatusOK || json.Unmarshal(a.body, &page) != nil {
				t.Fatalf("%s: %d %s", path, a.status, a.body)
			}
			pages++
			for _, ag := range page.Agents {
				got = append(got, ag.UID)
				if ag.ActiveKeys != 1 {
					t.Errorf("%s: %d active keys, want 1", ag.UID, ag.ActiveKeys)
				}
			}
			if page.Next == nil {
				break
			}
			if *page.Next != got[len(got)-1] || pages > 5 {
				t.Fatalf("page %d: next %q, last %q", pages, *page.Next, got[len(got)-1])
			}
			path = "/admin/v1/agents?limit=10&after=" + *page.Next
		}
		if pages != 3 || !slices.Equal(got, want) {
			t.Errorf("%d pages of %v, want 3 pages of %v", pages, got, want)
		}
		// Exactly a page: no empty page after it.
		a := e.call(http.MethodGet, "/admin/v1/agents?limit=23", "", tok)
		if !strings.HasSuffix(strings.TrimSpace(string(a.body)), `"next":null}`) {
			t.Errorf("limit=23 of 23: %s, want next null", a.body)
		}
		for _, q := range []string{"limit=0", "limit=1001", "limit=ten", "limit=-1", "limit=1&limit=2",
			"after=x", "after=agent-0123", "after=%zz", "page=2", "after=agent-0123456789abcdef01234567%27--"} {
			if a := e.call(http.MethodGet, "/admin/v1/agents?"+q, "", tok); a.status != http.StatusBadRequest || a.errorCode() != "invalid_request" {
				t.Errorf("?%s: %d %s, want 400 invalid_request", q, a.status, a.body)
			}
		}
		if a := e.call(http.MethodGet, "/admin/v1/agents?limit=1000", "", tok); a.status != http.StatusOK {
			t.Errorf("limit=1000: %d %s", a.status, a.body)
		}
	})
}
