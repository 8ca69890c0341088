package adminapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentid/agentid/refserver/store"
)

// TestTokenUseAudited: a read through the admin API leaves a row in the
// audit trail (operator_token.used) naming the token, the request id the
// answer carries and the route's method and template, not its values; a
// use refused for its scope is a use too (the 403 carries its request
// id); further uses within the minute add no row; a refused token, none.
func TestTokenUseAudited(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		tok := "Bearer " + e.token("reader", store.ScopeAgentsRead)
		uid := e.agent(50)
		a := e.call(http.MethodGet, "/admin/v1/agents/"+uid+"/keys", "", tok)
		reqID := a.header.Get("X-Request-Id")
		if a.status != http.StatusOK || reqID == "" {
			t.Fatalf("GET keys: %d %s, X-Request-Id %q", a.status, a.body, reqID)
		}
		for range 3 {
			if a := e.call(http.MethodGet, "/admin/v1/agents", "", tok); a.status != http.StatusOK {
				t.Fatalf("GET agents: %d %s", a.status, a.body)
			}
		}
		denied := "Bearer " + e.token("denied", store.ScopeAuditRead)
		refused := e.call(http.MethodDelete, "/admin/v1/agents/"+uid, "", denied)
		if refused.status != http.StatusForbidden || refused.header.Get("X-Request-Id") == "" {
			t.Errorf("DELETE without the scope: %d %s, X-Request-Id %q", refused.status, refused.body, refused.header.Get("X-Request-Id"))
		}
		if a := e.call(http.MethodGet, "/admin/v1/agents", "", "Bearer aidop_"+strings.Repeat("A", 43)); a.status != http.StatusUnauthorized || a.header.Get("X-Request-Id") != "" {
			t.Errorf("unknown token: %d, X-Request-Id %q", a.status, a.header.Get("X-Request-Id"))
		}
		rows, err := e.db.Audit(ctx, store.AuditQuery{Action: store.ActionOperatorUsed})
		if err != nil || len(rows) != 2 {
			t.Fatalf("use rows: %+v %v, want one per token", rows, err)
		}
		for i, want := range []struct{ actor, reqID, method, route string }{
			{"operator:denied", refused.header.Get("X-Request-Id"), "DELETE", "/admin/v1/agents/{uid}"},
			{"operator:reader", reqID, "GET", "/admin/v1/agents/{uid}/keys"},
		} {
			r := rows[i]
			var d map[string]string
			if r.Actor != want.actor || r.RequestID != want.reqID || json.Unmarshal(r.Detail, &d) != nil ||
				len(d) != 2 || d["method"] != want.method || d["route"] != want.route || r.AgentUID != "" {
				t.Errorf("use row %d: %+v (detail %s), want %+v", i, r, r.Detail, want)
			}
			if strings.Contains(string(r.Detail), uid) {
				t.Errorf("use row %d holds the request's uid: %s", i, r.Detail)
			}
		}
	})
}
