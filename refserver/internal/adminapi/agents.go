package adminapi

// The agents routes: show, disable, enable, revoke a key (the list is in
// query.go). The JSON
// answers are those of `idcli server agents|keys … --json`.

import (
	"errors"
	"net/http"
	"strings"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/gorilla/mux"
)

// uidVar returns the route's {uid}, or 404 when it is not a uid.
func uidVar(r *http.Request) (string, error) {
	uid := mux.Vars(r)["uid"]
	if !signer.ValidUID(uid) {
		return "", middleware.Fail(codeAgentNotFound, "%q is not an agent uid (want agent-<24 hex>)", signer.Truncate(uid))
	}
	return uid, nil
}

// storeError is the answer to a store error: 404 for what does not
// exist, 400 for a reason or a query the store refuses, else 503.
func storeError(err error) error {
	switch {
	case errors.Is(err, store.ErrNoSuchAgent):
		return middleware.Fail(codeAgentNotFound, "no such agent")
	case errors.Is(err, store.ErrNoSuchKey):
		return middleware.Fail(codeKeyNotFound, "the agent has no such key")
	case errors.Is(err, store.ErrNoSuchToken):
		return middleware.Fail(codeInvitationNotFound, "no such invitation token")
	case errors.Is(err, store.ErrInvalidReason), errors.Is(err, store.ErrInvalidQuery):
		return middleware.Fail(middleware.CodeInvalidRequest, "%s", strings.TrimPrefix(err.Error(), "store: "))
	}
	return dbUnavailable(err)
}

// showAgent is GET /agents/{uid}: the agent and its keys.
func (a *api) showAgent(w http.ResponseWriter, r *http.Request) error {
	uid, err := uidVar(r)
	if err != nil {
		return err
	}
	if _, err := query(r); err != nil {
		return err
	}
	ctx, cancel := a.dbContext(r.Context())
	defer cancel()
	info, err := a.cfg.DB.ShowAgent(ctx, uid)
	if err != nil {
		return storeError(err)
	}
	return writeJSON(w, http.StatusOK, info)
}

func (a *api) disableAgent(w http.ResponseWriter, r *http.Request) error {
	return a.setDisabled(w, r, true)
}

func (a *api) enableAgent(w http.ResponseWriter, r *http.Request) error {
	return a.setDisabled(w, r, false)
}

// setDisabled is POST /agents/{uid}/disable and /enable, body
// {"reason":"…"} (optional): the agent as it is after, and whether
// anything changed.
func (a *api) setDisabled(w http.ResponseWriter, r *http.Request, disabled bool) error {
	uid, err := uidVar(r)
	if err != nil {
		return err
	}
	if _, err := query(r); err != nil {
		return err
	}
	reason, err := a.readReason(w, r)
	if err != nil {
		return err
	}
	ctx, cancel := a.dbContext(r.Context())
	defer cancel()
	info, changed, err := a.cfg.DB.SetAgentDisabled(ctx, uid, disabled, reason)
	if err != nil {
		return storeError(err)
	}
	return writeJSON(w, http.StatusOK, struct {
		Agent   store.AgentInfo `json:"agent"`
		Changed bool            `json:"changed"`
	}{info, changed})
}

// revokeKey is POST /agents/{uid}/keys/{kid}/revoke, body
// {"reason":"…"} (optional).
func (a *api) revokeKey(w http.ResponseWriter, r *http.Request) error {
	uid, err := uidVar(r)
	if err != nil {
		return err
	}
	kid := mux.Vars(r)["kid"]
	if !store.ValidKid(kid) {
		// Checked before the database is read: it would refuse a NUL or
		// invalid UTF-8 (503), and no key has another spelling.
		return middleware.Fail(codeKeyNotFound, "%q is not a key id (want its RFC 7638 thumbprint, 43 base64url characters)", signer.Truncate(kid))
	}
	if _, err := query(r); err != nil {
		return err
	}
	reason, err := a.readReason(w, r)
	if err != nil {
		return err
	}
	ctx, cancel := a.dbContext(r.Context())
	defer cancel()
	key, changed, err := a.cfg.DB.RevokeKey(ctx, uid, kid, reason)
	if err != nil {
		return storeError(err)
	}
	info, err := a.cfg.DB.ShowAgent(ctx, uid)
	if err != nil {
		return storeError(err)
	}
	return writeJSON(w, http.StatusOK, struct {
		UID        string        `json:"uid"`
		Key        store.KeyInfo `json:"key"`
		Changed    bool          `json:"changed"`
		ActiveKeys int           `json:"active_keys"`
	}{uid, key, changed, info.ActiveKeys})
}
