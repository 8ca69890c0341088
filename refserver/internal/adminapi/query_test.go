package adminapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
)

// uids lists the uids GET /admin/v1/agents?query selects, following next
// through every page, each page checked.
func (e *env) uids(tok, query string) []string {
	e.t.Helper()
	var out []string
	path := "/admin/v1/agents?" + query
	for pages := 0; ; pages++ {
		a := e.call(http.MethodGet, path, "", tok)
		var page struct {
			Agents []store.AgentInfo `json:"agents"`
			Next   *string           `json:"next"`
		}
		if a.status != http.StatusOK || json.Unmarshal(a.body, &page) != nil || page.Agents == nil || pages > 50 {
			e.t.Fatalf("%s: %d %s", path, a.status, a.body)
		}
		for _, ag := range page.Agents {
			if slices.Contains(out, ag.UID) {
				e.t.Errorf("%s: %s listed twice", query, ag.UID)
			}
			out = append(out, ag.UID)
		}
		if page.Next == nil {
			return out
		}
		path = "/admin/v1/agents?" + query + "&after=" + *page.Next
	}
}

// TestAgentFilters: GET /admin/v1/agents filters by state, creation time,
// key and invitation, each page at most limit, through every page; a bad
// value of each parameter is 400 naming it.
func TestAgentFilters(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		tok := "Bearer " + e.token("reader", store.ScopeAgentsRead)
		invite, inv, err := e.db.CreateInvite(ctx, "", 10, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
		var invited, disabled []string
		for i := range 9 {
			uid := fmt.Sprintf("agent-%024x", 0xa00+i)
			k := signertest.Key(byte(150 + i))
			na := store.NewAgent{UID: uid, Kid: k.KeyID(), JWK: k.Public.JWK.MarshalPublic(), Now: t0.Add(time.Duration(i) * time.Minute)}
			if i%2 == 0 {
				na.Invite = invite
				invited = append(invited, uid)
			}
			if err := e.db.CreateAgent(ctx, na); err != nil {
				t.Fatal(err)
			}
			if i%3 == 0 {
				if _, _, err := e.db.SetAgentDisabled(ctx, uid, true, ""); err != nil {
					t.Fatal(err)
				}
				disabled = append(disabled, uid)
			}
		}
		all := e.uids(tok, "limit=2")
		if len(all) != 9 {
			t.Fatalf("%d agents, want 9", len(all))
		}
		late := all[4:]
		kid := signertest.Key(155).KeyID()
		since := url.QueryEscape(t0.Add(4 * time.Minute).Format(time.RFC3339))
		for query, want := range map[string][]string{
			"limit=2&state=disabled":                   disabled,
			"limit=2&state=active":                     {all[1], all[2], all[4], all[5], all[7], all[8]},
			"limit=1&state=no_keys":                    nil,
			"limit=1&state=pending":                    nil,
			"limit=3&invitation=" + fmt.Sprint(inv.ID): invited,
			"limit=3&invitation=999999":                nil,
			"limit=2&created_since=" + since:           late,
			"limit=2&kid=" + kid:                       {all[5]},
			"limit=2&kid=" + kid + "&state=disabled":   nil,
			"limit=1&state=disabled&created_since=" + since + "&invitation=" + fmt.Sprint(inv.ID): {all[6]},
		} {
			if got := e.uids(tok, query); !slices.Equal(got, want) {
				t.Errorf("?%s: %v, want %v", query, got, want)
			}
		}
		for _, c := range []struct{ query, param string }{
			{"state=enabled", "state"},
			{"state=", "state"},
			{"state=ACTIVE", "state"},
			{"created_since=yesterday", "created_since"},
			{"created_since=2026-12-01", "created_since"},
			{"created_since=2026-12-01T00:00:00", "created_since"},
			{"kid=" + kid[:42], "kid"},
			{"kid=" + kid + "A", "kid"},
			{"kid=" + url.QueryEscape(kid[:42]+"+"), "kid"},
			{"kid=%27%20OR%201=1--", "kid"},
			{"invitation=0", "invitation"},
			{"invitation=-1", "invitation"},
			{"invitation=abc", "invitation"},
			{"invitation=99999999999999999999999", "invitation"},
			{"invitation=9223372036854775808", "invitation"},
			{"invitation=18446744073709551615", "invitation"},
			{"after=bob", "after"},
			{"limit=0", "limit"},
			{"limit=1001", "limit"},
			{"state=active&state=disabled", "state"},
			{"created=2026-12-01T00:00:00Z", "created"},
		} {
			a := e.call(http.MethodGet, "/admin/v1/agents?"+c.query, "", tok)
			if a.status != http.StatusBadRequest || a.errorCode() != "invalid_request" || !strings.Contains(a.message(), c.param) {
				t.Errorf("?%s: %d %s, want 400 invalid_request naming %s", c.query, a.status, a.body, c.param)
			}
		}
	})
}

// TestDeleteAgentRoute: DELETE /admin/v1/agents/{uid} deletes the agent
// and its keys once, recorded in the audit trail with the token's name
// and the request id; a second delete is 404, the agent's keys' status
// revoked; a body with a member is 400.
func TestDeleteAgentRoute(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		tok := "Bearer " + e.token("deleter", store.ScopeAgentsWrite, store.ScopeAgentsRead)
		uid, other := e.agent(160, 161), e.agent(162)
		if a := e.call(http.MethodDelete, "/admin/v1/agents/"+uid, `{"reason":"x"}`, tok); a.status != http.StatusBadRequest {
			t.Errorf("with a body: %d %s, want 400", a.status, a.body)
		}
		a := e.call(http.MethodDelete, "/admin/v1/agents/"+uid, "", tok)
		if a.status != http.StatusOK || strings.TrimSpace(string(a.body)) != `{"uid":"`+uid+`","deleted":true}` {
			t.Fatalf("delete: %d %s", a.status, a.body)
		}
		reqID := a.header.Get("X-Request-Id")
		for _, path := range []string{"/admin/v1/agents/" + uid, "/admin/v1/agents/" + uid + "/keys"} {
			if a := e.call(http.MethodGet, path, "", tok); a.status != http.StatusNotFound || a.errorCode() != "agent_not_found" {
				t.Errorf("GET %s after delete: %d %s", path, a.status, a.body)
			}
		}
		if a := e.call(http.MethodDelete, "/admin/v1/agents/"+uid, "", tok); a.status != http.StatusNotFound || a.errorCode() != "agent_not_found" {
			t.Errorf("second delete: %d %s, want 404 agent_not_found", a.status, a.body)
		}
		for _, n := range []byte{160, 161} {
			if a := e.call(http.MethodGet, "/keys/"+signertest.Key(n).KeyID()+"/status", ""); a.status != http.StatusOK || !strings.Contains(string(a.body), `"status":"revoked"`) {
				t.Errorf("status of a deleted agent's key: %d %s, want revoked", a.status, a.body)
			}
		}
		if a := e.call(http.MethodGet, "/keys/"+signertest.Key(162).KeyID()+"/status", ""); a.status != http.StatusOK {
			t.Errorf("status of another agent's key: %d %s", a.status, a.body)
		}
		rows, err := e.db.Audit(ctx, store.AuditQuery{Action: store.ActionDelete})
		if err != nil || len(rows) != 1 || rows[0].AgentUID != uid || rows[0].Actor != "operator:deleter" || rows[0].RequestID != reqID || reqID == "" {
			t.Errorf("audit of the delete: %+v %v, want one row by operator:deleter, request %q", rows, err, reqID)
		}
		if got := e.uids(tok, ""); !slices.Equal(got, []string{other}) {
			t.Errorf("after delete: %v, want [%s]", got, other)
		}
	})
}

// TestKeyHistoryRoute: GET /admin/v1/agents/{uid}/keys lists every key,
// oldest first, a rotated key told from a revoked one (with the reason).
func TestKeyHistoryRoute(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		read := "Bearer " + e.token("reader", store.ScopeAgentsRead)
		revoke := "Bearer " + e.token("revoker", store.ScopeKeysRevoke)
		uid := e.agent(170)
		k1, k2 := signertest.Key(170), signertest.Key(171)
		if _, err := e.db.Rotate(ctx, store.Rotation{UID: uid, SigningKid: k1.KeyID(), Kid: k2.KeyID(), JWK: k2.Public.JWK.MarshalPublic(), Proven: true, Now: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
		if a := e.call(http.MethodPost, "/admin/v1/agents/"+uid+"/keys/"+k2.KeyID()+"/revoke", `{"reason":"seen in a paste"}`, revoke); a.status != http.StatusOK {
			t.Fatalf("revoke: %d %s", a.status, a.body)
		}
		a := e.call(http.MethodGet, "/admin/v1/agents/"+uid+"/keys", "", read)
		var hist struct {
			UID  string          `json:"uid"`
			Keys []store.KeyInfo `json:"keys"`
		}
		if a.status != http.StatusOK || json.Unmarshal(a.body, &hist) != nil || hist.UID != uid || len(hist.Keys) != 2 {
			t.Fatalf("history: %d %s", a.status, a.body)
		}
		if k := hist.Keys[0]; k.Kid != k1.KeyID() || k.RevokedWhy != store.RevokedRotated || k.RevokedAt == nil || !k.Proven {
			t.Errorf("first key: %+v, want k1 rotated", k)
		}
		if k := hist.Keys[1]; k.Kid != k2.KeyID() || k.RevokedWhy != store.RevokedByOperator || k.RevokeReason != "seen in a paste" || k.RevokedAt == nil {
			t.Errorf("second key: %+v, want k2 revoked, with the reason", k)
		}
		a = e.call(http.MethodGet, "/admin/v1/agents/"+uid, "", read)
		var info store.AgentInfo
		if json.Unmarshal(a.body, &info) != nil || info.State != store.StateNoKeys {
			t.Errorf("agent after its last key was revoked: %s, want state no_keys", a.body)
		}
		for path, code := range map[string]string{
			"/admin/v1/agents/agent-ffffffffffffffffffffffff/keys": "agent_not_found",
			"/admin/v1/agents/bob/keys":                            "agent_not_found",
			"/admin/v1/agents/" + uid + "/keys?all=1":              "invalid_request",
		} {
			if a := e.call(http.MethodGet, path, "", read); a.errorCode() != code {
				t.Errorf("%s: %d %s, want %s", path, a.status, a.body, code)
			}
		}
	})
}

// TestAuditRoute: GET /admin/v1/audit filters the trail by agent, key,
// action, actor, time and invitation, pages newest first through next with no row
// twice or missed, and refuses a bad value of each parameter naming it.
func TestAuditRoute(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		tok := "Bearer " + e.token("auditor", store.ScopeAuditRead)
		write := "Bearer " + e.token("ops", store.ScopeAgentsWrite)
		start := time.Now().UTC().Add(-time.Minute)
		uid, other := e.agent(180), e.agent(181)
		_, inv, err := e.db.CreateInvite(context.Background(), "", 1, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.db.RevokeInvite(context.Background(), inv.ID); err != nil {
			t.Fatal(err)
		}
		for _, action := range []string{"disable", "enable", "disable"} {
			if a := e.call(http.MethodPost, "/admin/v1/agents/"+uid+"/"+action, `{"reason":"r"}`, write); a.status != http.StatusOK {
				t.Fatalf("%s: %d %s", action, a.status, a.body)
			}
		}
		events := func(query string, limit int) []store.AuditEvent {
			t.Helper()
			var out []store.AuditEvent
			path := fmt.Sprintf("/admin/v1/audit?limit=%d&%s", limit, query)
			for pages := 0; ; pages++ {
				a := e.call(http.MethodGet, path, "", tok)
				var page struct {
					Events []store.AuditEvent `json:"events"`
					Next   *uint64            `json:"next"`
				}
				if a.status != http.StatusOK || json.Unmarshal(a.body, &page) != nil || page.Events == nil || pages > 20 {
					t.Fatalf("%s: %d %s", path, a.status, a.body)
				}
				if page.Next != nil && len(page.Events) != limit {
					t.Errorf("%s: a page of %d with a next page", path, len(page.Events))
				}
				for _, ev := range page.Events {
					if len(out) > 0 && ev.ID >= out[len(out)-1].ID {
						t.Errorf("%s: row %d after %d, want newest first, once", path, ev.ID, out[len(out)-1].ID)
					}
					out = append(out, ev)
				}
				if page.Next == nil {
					return out
				}
				path = fmt.Sprintf("/admin/v1/audit?limit=%d&%s&before=%d", limit, query, *page.Next)
			}
		}
		actions := func(evs []store.AuditEvent) string {
			var s []string
			for _, ev := range evs {
				s = append(s, ev.Action)
			}
			return strings.Join(s, " ")
		}
		for _, c := range []struct {
			query, want string
		}{
			{"agent=" + uid, "agent.disabled agent.enabled agent.disabled agent.registered"},
			{"agent=" + other, "agent.registered"},
			{"kid=" + signertest.Key(181).KeyID(), "agent.registered"},
			{"action=agent.disabled", "agent.disabled agent.disabled"},
			{"actor=operator:ops", "agent.disabled agent.enabled agent.disabled operator_token.used"},
			{"action=operator_token.used", "operator_token.used operator_token.used"},
			{"invitation=" + fmt.Sprint(inv.ID), "invitation.revoked invitation.created"},
			{"invitation=" + fmt.Sprint(inv.ID+1), ""},
			{"actor=" + url.QueryEscape("operator:nobody"), ""},
			{"agent=" + uid + "&action=agent.enabled", "agent.enabled"},
			{"since=" + url.QueryEscape(start.Format(time.RFC3339)) + "&agent=" + uid, "agent.disabled agent.enabled agent.disabled agent.registered"},
			{"since=" + url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339)), ""},
		} {
			for _, limit := range []int{1, 2, 1000} {
				if got := actions(events(c.query, limit)); got != c.want {
					t.Errorf("?%s (limit %d): %q, want %q", c.query, limit, got, c.want)
				}
			}
		}
		for _, c := range []struct{ query, param string }{
			{"agent=bob", "agent"},
			{"kid=abc", "kid"},
			{"action=agent.deleted.", "action"},
			{"action=AGENT.DISABLED", "action"},
			{"actor=", "actor"},
			{"actor=" + strings.Repeat("a", 129), "actor"},
			{"actor=operator:a%0Ab", "actor"},
			{"actor=%FF", "actor"},
			{"since=now", "since"},
			{"before=0", "before"},
			{"before=-3", "before"},
			{"before=9223372036854775808", "before"},
			{"invitation=0", "invitation"},
			{"invitation=x", "invitation"},
			{"invitation=9223372036854775808", "invitation"},
			{"before=18446744073709551615", "before"},
			{"limit=1001", "limit"},
			{"limit=", "limit"},
			{"request_id=x", "request_id"},
		} {
			a := e.call(http.MethodGet, "/admin/v1/audit?"+c.query, "", tok)
			if a.status != http.StatusBadRequest || a.errorCode() != "invalid_request" || !strings.Contains(a.message(), c.param) {
				t.Errorf("?%s: %d %s, want 400 invalid_request naming %s", c.query, a.status, a.body, c.param)
			}
		}
	})
}
