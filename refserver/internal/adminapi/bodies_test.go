package adminapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
)

// TestBodies: a body is one JSON object of the route's members, bounded,
// valid UTF-8, with a reason of at most 500 bytes and no control
// character; anything else is refused before the change is made.
func TestBodies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite::memory:")
	tok := "Bearer " + e.token("writer", store.ScopeAgentsWrite, store.ScopeTokensWrite)
	uid := e.agent(7)
	path := "/admin/v1/agents/" + uid + "/disable"
	send := func(body, contentType string) answer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, e.base+path, strings.NewReader(body))
		req.Header.Set("Authorization", tok)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		return e.do(req)
	}
	for _, c := range []struct {
		name, body, contentType string
		status                  int
		code, message           string
	}{
		{"unknown member", `{"reason":"x","force":true}`, "application/json", 400, "invalid_request", `unknown member "force"`},
		{"misspelt member", `{"reasn":"x"}`, "application/json", 400, "invalid_request", `unknown member "reasn"`},
		{"array", `[{"reason":"x"}]`, "application/json", 400, "invalid_request", "JSON object"},
		{"string", `"x"`, "application/json", 400, "invalid_request", "JSON object"},
		{"null", `null`, "application/json", 400, "invalid_request", "JSON object"},
		{"two objects", `{"reason":"x"}{"reason":"y"}`, "application/json", 400, "invalid_request", "more than one"},
		{"trailing garbage", `{"reason":"x"} x`, "application/json", 400, "invalid_request", "more than one"},
		{"truncated", `{"reason":"x"`, "application/json", 400, "invalid_request", "not a valid JSON object"},
		{"number reason", `{"reason":5}`, "application/json", 400, "invalid_request", "reason must be of JSON type string"},
		{"invalid UTF-8", "{\"reason\":\"\xff\"}", "application/json", 400, "invalid_request", "UTF-8"},
		{"control character", `{"reason":"a\u0007b"}`, "application/json", 400, "invalid_request", "control character"},
		{"newline", `{"reason":"a\nb"}`, "application/json", 400, "invalid_request", "control character"},
		{"C1 control", `{"reason":"a\u009bb"}`, "application/json", 400, "invalid_request", "control character"},
		{"reason too long", `{"reason":"` + strings.Repeat("é", 251) + `"}`, "application/json", 400, "invalid_request", "at most 500 bytes"},
		{"text/plain", `{"reason":"x"}`, "text/plain", 415, "unsupported_media_type", "application/json"},
		{"no content type", `{"reason":"x"}`, "", 415, "unsupported_media_type", "application/json"},
		{"too large", `{"reason":"` + strings.Repeat("a", 5000) + `"}`, "application/json", 413, "payload_too_large", "4096"},
	} {
		a := send(c.body, c.contentType)
		if a.status != c.status || a.errorCode() != c.code || !strings.Contains(a.message(), c.message) {
			t.Errorf("%s: %d %s, want %d %s saying %q", c.name, a.status, a.body, c.status, c.code, c.message)
		}
	}
	if info, err := e.db.ShowAgent(context.Background(), uid); err != nil || info.DisabledAt != nil {
		t.Fatalf("after refused bodies: %+v, %v; want still enabled", info, err)
	}
	for _, c := range []struct{ body, contentType string }{
		{`{"reason":"` + strings.Repeat("é", 250) + `"}`, "application/json"},
		{``, ""},
		{`{}`, "application/json; charset=utf-8"},
		{" {\"reason\":\"ok\"}\n", "application/json"},
	} {
		if a := send(c.body, c.contentType); a.status != http.StatusOK {
			t.Errorf("body %.20q: %d %s, want 200", c.body, a.status, a.body)
		}
	}
	for _, c := range []struct{ body, message string }{
		{`{"uses":0}`, "uses 0"},
		{`{"uses":1000001}`, "uses 1000001"},
		{`{"uses":1.5}`, "uses must be of JSON type number"},
		{`{"expires_in":-1}`, "expires_in -1"},
		{`{"expires_in":315360001}`, "expires_in 315360001"},
		{`{"expires_in":"7d"}`, "expires_in must be"},
		{`{"note":"` + strings.Repeat("n", 201) + `"}`, "more than 200"},
		{`{"note":"a\tb"}`, "control character"},
		{`{"token":"agentid_inv_mine"}`, `unknown member "token"`},
	} {
		a := e.call(http.MethodPost, "/admin/v1/invitations", c.body, tok)
		if a.status != http.StatusBadRequest || !strings.Contains(a.message(), c.message) {
			t.Errorf("POST /invitations %s: %d %s, want 400 saying %q", c.body, a.status, a.body, c.message)
		}
	}
	if list, _ := e.db.ListInvites(context.Background()); len(list) != 0 {
		t.Errorf("refused creations made %d invitations", len(list))
	}
}

// TestChanges: the answers of the routes that change something, the
// operator token named as the change's actor, and the invitation token
// shown once: in the creation's answer, never in a listing or a log.
func TestChanges(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		op := e.token("alice", store.Scopes()...)
		tok := "Bearer " + op
		uid := e.agent(11, 12)
		kid := signertest.Key(12).KeyID()
		var changed struct {
			Agent   store.AgentInfo `json:"agent"`
			Changed bool            `json:"changed"`
		}
		for i, want := range []bool{true, false} {
			a := e.call(http.MethodPost, "/admin/v1/agents/"+uid+"/disable", `{"reason":"spam"}`, tok)
			if a.status != 200 || json.Unmarshal(a.body, &changed) != nil || changed.Changed != want || changed.Agent.DisabledAt == nil || len(changed.Agent.Keys) != 2 {
				t.Errorf("disable #%d: %d %s", i+1, a.status, a.body)
			}
		}
		var actors []string
		e.g.Raw("SELECT DISTINCT actor FROM key_changes").Scan(&actors)
		if len(actors) != 1 || actors[0] != "operator:alice" {
			t.Errorf("change log actors %q, want operator:alice", actors)
		}
		a := e.call(http.MethodPost, "/admin/v1/agents/"+uid+"/keys/"+kid+"/revoke", "", tok)
		var rk struct {
			UID        string        `json:"uid"`
			Key        store.KeyInfo `json:"key"`
			Changed    bool          `json:"changed"`
			ActiveKeys int           `json:"active_keys"`
		}
		if a.status != 200 || json.Unmarshal(a.body, &rk) != nil || rk.UID != uid || rk.Key.Kid != kid || rk.Key.RevokedAt == nil || !rk.Changed || rk.ActiveKeys != 1 {
			t.Errorf("revoke: %d %s", a.status, a.body)
		}
		for path, code := range map[string]string{
			"/admin/v1/agents/" + uid + "/keys/" + signertest.Key(13).KeyID() + "/revoke": "key_not_found",
			"/admin/v1/agents/" + uid + "/keys/" + strings.Repeat("k", 65) + "/revoke":    "key_not_found",
			"/admin/v1/agents/agent-000000000000000000000000/keys/" + kid + "/revoke":     "agent_not_found",
			"/admin/v1/agents/agent-000000000000000000000000/disable":                     "agent_not_found",
			"/admin/v1/agents/not-a-uid/enable":                                           "agent_not_found",
			"/admin/v1/invitations/999/revoke":                                            "invitation_not_found",
			"/admin/v1/invitations/01/revoke":                                             "invitation_not_found",
			"/admin/v1/invitations/-1/revoke":                                             "invitation_not_found",
			"/admin/v1/invitations/18446744073709551616/revoke":                           "invitation_not_found",
			"/admin/v1/invitations/18446744073709551615/revoke":                           "invitation_not_found",
			"/admin/v1/invitations/9223372036854775808/revoke":                            "invitation_not_found",
			"/admin/v1/invitations/9223372036854775807/revoke":                            "invitation_not_found",
		} {
			if a := e.call(http.MethodPost, path, "", tok); a.status != http.StatusNotFound || a.errorCode() != code {
				t.Errorf("POST %s: %d %s, want 404 %s", path, a.status, a.body, code)
			}
		}
		if a := e.call(http.MethodGet, "/admin/v1/agents/agent-000000000000000000000000", "", tok); a.status != 404 || a.errorCode() != "agent_not_found" {
			t.Errorf("GET unknown agent: %d %s", a.status, a.body)
		}

		a = e.call(http.MethodPost, "/admin/v1/invitations", `{"note":"for bob","uses":3,"expires_in":3600}`, tok)
		var created struct {
			Token      string           `json:"token"`
			Invitation store.InviteInfo `json:"invitation"`
		}
		if a.status != http.StatusCreated || json.Unmarshal(a.body, &created) != nil || !strings.HasPrefix(created.Token, "agentid_inv_") ||
			created.Invitation.UsesLeft != 3 || created.Invitation.Note != "for bob" || created.Invitation.ExpiresAt == nil {
			t.Fatalf("create invitation: %d %s", a.status, a.body)
		}
		e.seen.Reset() // the one answer allowed to hold it
		if err := e.db.AdmitInvite(context.Background(), created.Token, store.Agent{}, created.Invitation.CreatedAt); err != nil {
			t.Errorf("the invitation token answered does not admit: %v", err)
		}
		a = e.call(http.MethodGet, "/admin/v1/invitations", "", tok)
		var list struct {
			Invitations []store.InviteInfo `json:"invitations"`
		}
		if a.status != 200 || json.Unmarshal(a.body, &list) != nil || len(list.Invitations) != 1 || list.Invitations[0].ID != created.Invitation.ID {
			t.Errorf("list invitations: %d %s", a.status, a.body)
		}
		path := "/admin/v1/invitations/" + jsonNumber(created.Invitation.ID) + "/revoke"
		for i, want := range []bool{true, false} {
			var rv struct {
				Invitation store.InviteInfo `json:"invitation"`
				Changed    bool             `json:"changed"`
			}
			a := e.call(http.MethodPost, path, "", tok)
			if a.status != 200 || json.Unmarshal(a.body, &rv) != nil || rv.Changed != want || rv.Invitation.RevokedAt == nil {
				t.Errorf("revoke invitation #%d: %d %s", i+1, a.status, a.body)
			}
		}
		if a := e.call(http.MethodPost, path, `{"reason":"x"}`, tok); a.status != http.StatusBadRequest {
			t.Errorf("revoke invitation with a reason (not recorded, so refused): %d %s", a.status, a.body)
		}

		// The audit trail names the token and the request, with the reason.
		disable := e.call(http.MethodPost, "/admin/v1/agents/"+uid+"/enable", `{"reason":"appeal granted"}`, tok)
		rows, err := e.db.Audit(context.Background(), store.AuditQuery{Action: store.ActionEnable})
		if err != nil || len(rows) != 1 || rows[0].Actor != "operator:alice" || rows[0].Reason != "appeal granted" ||
			rows[0].AgentUID != uid || rows[0].RequestID == "" || rows[0].RequestID != disable.header.Get("X-Request-Id") {
			t.Errorf("audit of the enable: %+v, %v (X-Request-Id %q)", rows, err, disable.header.Get("X-Request-Id"))
		}
		rows, err = e.db.Audit(context.Background(), store.AuditQuery{Actor: "operator:alice", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var actions []string
		for _, r := range rows {
			actions = append(actions, r.Action+"/"+r.Reason)
		}
		slices.Reverse(actions)
		want := []string{"operator_token.used/", "agent.disabled/spam", "key.revoked/", "invitation.created/for bob", "invitation.revoked/", "agent.enabled/appeal granted"}
		if !slices.Equal(actions, want) {
			t.Errorf("audit trail of operator:alice: %q, want %q", actions, want)
		}
		b, _ := json.Marshal(rows)
		if strings.Contains(string(b), op) || strings.Contains(string(b), created.Token) {
			t.Errorf("the audit trail holds a token: %s", b)
		}
		e.noSecret(op, created.Token)
	})
}

func jsonNumber(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
