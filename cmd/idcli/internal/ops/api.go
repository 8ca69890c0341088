package ops

// The backend on the admin API (--server): each method is one route of
// /admin/v1 (docs/http-api.md), whose answers have the shapes of the
// store's, so the commands print the same either way.

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/agentid/agentid/refserver/store"
)

// apiBackend runs the commands on the admin API.
type apiBackend struct{ c *client }

var _ backend = apiBackend{}

// seg is one path segment, escaped.
func seg(s string) string { return "/" + url.PathEscape(s) }

func (a apiBackend) ShowAgent(ctx context.Context, uid string) (store.AgentInfo, error) {
	var info store.AgentInfo
	err := a.c.call(ctx, http.MethodGet, "/agents"+seg(uid), nil, nil, &info, store.ScopeAgentsRead)
	return info, err
}

func (a apiBackend) SetAgentDisabled(ctx context.Context, uid string, disabled bool, reason string) (store.AgentInfo, bool, error) {
	verb := map[bool]string{true: "/disable", false: "/enable"}[disabled]
	var ans agentChange
	err := a.c.call(ctx, http.MethodPost, "/agents"+seg(uid)+verb, nil, reasonBody{reason}, &ans, store.ScopeAgentsWrite)
	return ans.Agent, ans.Changed, err
}

func (a apiBackend) RevokeKey(ctx context.Context, uid, kid, reason string) (keyRevocation, error) {
	var ans keyRevocation
	err := a.c.call(ctx, http.MethodPost, "/agents"+seg(uid)+"/keys"+seg(kid)+"/revoke", nil, reasonBody{reason}, &ans, store.ScopeKeysRevoke)
	return ans, err
}

func (a apiBackend) CreateInvite(ctx context.Context, note string, uses int64, ttl time.Duration) (string, store.InviteInfo, error) {
	body := struct {
		Note      string `json:"note"`
		Uses      int64  `json:"uses"`
		ExpiresIn int64  `json:"expires_in"`
	}{note, uses, int64(ttl / time.Second)}
	var ans struct {
		Token      string           `json:"token"`
		Invitation store.InviteInfo `json:"invitation"`
	}
	err := a.c.call(ctx, http.MethodPost, "/invitations", nil, body, &ans, store.ScopeTokensWrite)
	return ans.Token, ans.Invitation, err
}

func (a apiBackend) ListInvites(ctx context.Context) ([]store.InviteInfo, error) {
	var ans struct {
		Invitations []store.InviteInfo `json:"invitations"`
	}
	err := a.c.call(ctx, http.MethodGet, "/invitations", nil, nil, &ans, store.ScopeTokensWrite)
	if ans.Invitations == nil {
		ans.Invitations = []store.InviteInfo{}
	}
	return ans.Invitations, err
}

func (a apiBackend) RevokeInvite(ctx context.Context, id uint64) (store.InviteInfo, bool, error) {
	var ans struct {
		Invitation store.InviteInfo `json:"invitation"`
		Changed    bool             `json:"changed"`
	}
	err := a.c.call(ctx, http.MethodPost, "/invitations"+seg(strconv.FormatUint(id, 10))+"/revoke", nil, struct{}{}, &ans, store.ScopeTokensWrite)
	return ans.Invitation, ans.Changed, err
}

func (a apiBackend) Audit(ctx context.Context, aq store.AuditQuery) ([]store.AuditEvent, error) {
	q := url.Values{"limit": {strconv.Itoa(aq.Limit)}}
	for k, v := range map[string]string{"agent": aq.AgentUID, "kid": aq.Kid, "action": aq.Action, "actor": aq.Actor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !aq.Since.IsZero() {
		q.Set("since", aq.Since.UTC().Format(time.RFC3339Nano))
	}
	if aq.InvitationID != 0 {
		q.Set("invitation", strconv.FormatUint(aq.InvitationID, 10))
	}
	if aq.Before != 0 {
		q.Set("before", strconv.FormatUint(aq.Before, 10))
	}
	var ans struct {
		Events []store.AuditEvent `json:"events"`
	}
	err := a.c.call(ctx, http.MethodGet, "/audit", q, nil, &ans, store.ScopeAuditRead)
	if ans.Events == nil {
		ans.Events = []store.AuditEvent{}
	}
	return ans.Events, err
}

// reasonBody is the body of the routes that take a reason.
type reasonBody struct {
	Reason string `json:"reason"`
}

// agentChange is the answer of agents disable|enable (and their --json).
type agentChange struct {
	Agent   store.AgentInfo `json:"agent"`
	Changed bool            `json:"changed"`
}
