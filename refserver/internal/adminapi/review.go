package adminapi

// The review routes of registration mode approval: approve or reject an
// agent pending review (store.ApproveAgent, store.RejectAgent). A decision
// is made once: the same one again answers 200 with changed false, the
// other one 409 agent_not_pending.

import (
	"errors"
	"net/http"
	"strings"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/store"
)

// codeNotPending refuses a decision on an agent that is not pending
// review: it registered without approval, or was decided otherwise.
var codeNotPending = middleware.DefineCode("agent_not_pending", http.StatusConflict)

// approveAgent is POST /agents/{uid}/approve, body {"reason":"…"}
// (optional).
func (a *api) approveAgent(w http.ResponseWriter, r *http.Request) error {
	return a.review(w, r, true)
}

// rejectAgent is POST /agents/{uid}/reject, body {"reason":"…"}
// (required: the agent's owner reads it).
func (a *api) rejectAgent(w http.ResponseWriter, r *http.Request) error {
	return a.review(w, r, false)
}

// review decides the pending agent {uid}: the agent as it is after, and
// whether anything changed.
func (a *api) review(w http.ResponseWriter, r *http.Request, approve bool) error {
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
	decide := a.cfg.DB.RejectAgent
	if approve {
		decide = a.cfg.DB.ApproveAgent
	}
	info, changed, err := decide(ctx, uid, reason)
	if errors.Is(err, store.ErrNotPending) {
		return middleware.Fail(codeNotPending, "%s", strings.TrimPrefix(err.Error(), store.ErrNotPending.Error()+": "))
	}
	if err != nil {
		return storeError(err)
	}
	return writeJSON(w, http.StatusOK, struct {
		Agent   store.AgentInfo `json:"agent"`
		Changed bool            `json:"changed"`
	}{info, changed})
}
