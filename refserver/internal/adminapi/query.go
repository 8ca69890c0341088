package adminapi

// The reading routes over filters and pages (the agents list, an agent's
// key history, the audit trail) and the deletion of an agent. Every
// query parameter is checked, and a bad one refused with 400 naming it,
// before the database is read.

import (
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
)

// Page sizes of GET /agents and GET /audit.
const (
	defaultLimit = 100
	maxLimit     = 1000 // store.MaxAgentPage and store.MaxAuditPage
)

// badParam is 400 invalid_request naming the parameter name, its value
// (shortened) and what it wants.
func badParam(name, value, want string) error {
	return middleware.Fail(middleware.CodeInvalidRequest, "query parameter %s=%q: want %s", name, signer.Truncate(value), want)
}

// param returns the value of query parameter name when given.
func param(q url.Values, name string) (string, bool) {
	v, ok := q[name]
	if !ok {
		return "", false
	}
	return v[0], true
}

// limitParam reads limit (1 to maxLimit, default defaultLimit).
func limitParam(q url.Values) (int, error) {
	s, ok := param(q, "limit")
	if !ok {
		return defaultLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxLimit {
		return 0, badParam("limit", s, "1 to "+strconv.Itoa(maxLimit))
	}
	return n, nil
}

// timeParam reads name as an RFC 3339 time.
func timeParam(q url.Values, name string) (time.Time, error) {
	s, ok := param(q, name)
	if !ok {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, badParam(name, s, "an RFC 3339 time such as 2026-12-01T00:00:00Z")
	}
	return t, nil
}

// idParam reads name as a positive integer id, at most the largest
// signed 64-bit integer (ids are that in both databases; a larger one
// would reach the driver, which refuses it).
func idParam(q url.Values, name string) (uint64, error) {
	s, ok := param(q, name)
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 63)
	if err != nil || n == 0 {
		return 0, badParam(name, s, "a positive integer of at most "+strconv.FormatInt(math.MaxInt64, 10))
	}
	return n, nil
}

// uidParam reads name as an agent uid.
func uidParam(q url.Values, name string) (string, error) {
	s, ok := param(q, name)
	if ok && !signer.ValidUID(s) {
		return "", badParam(name, s, "an agent uid, agent-<24 hex>")
	}
	return s, nil
}

// kidParam reads name as a key id.
func kidParam(q url.Values, name string) (string, error) {
	s, ok := param(q, name)
	if ok && !store.ValidKid(s) {
		return "", badParam(name, s, "a key's RFC 7638 thumbprint, 43 base64url characters")
	}
	return s, nil
}

// agentsPage is the answer of GET /agents: Next is the after of the next
// page, nil on the last.
type agentsPage struct {
	Agents []store.AgentInfo `json:"agents"`
	Next   *string           `json:"next"`
}

// listAgents is GET /agents?state=&created_since=&kid=&invitation=&after=&limit=:
// a page of the agents the filters select, in uid order (see store.Agents).
func (a *api) listAgents(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r, "state", "created_since", "kid", "invitation", "after", "limit")
	if err != nil {
		return err
	}
	var aq store.AgentQuery
	if s, ok := param(q, "state"); ok {
		if !slices.Contains(store.AgentStates(), s) {
			return badParam("state", s, "one of "+strings.Join(store.AgentStates(), ", "))
		}
		aq.State = s
	}
	if aq.CreatedSince, err = timeParam(q, "created_since"); err != nil {
		return err
	}
	if aq.Kid, err = kidParam(q, "kid"); err != nil {
		return err
	}
	if aq.InvitationID, err = idParam(q, "invitation"); err != nil {
		return err
	}
	if aq.After, err = uidParam(q, "after"); err != nil {
		return err
	}
	if aq.Limit, err = limitParam(q); err != nil {
		return err
	}
	ctx, cancel := a.dbContext(r.Context())
	defer cancel()
	list, next, err := a.cfg.DB.Agents(ctx, aq)
	if err != nil {
		return storeError(err)
	}
	page := agentsPage{Agents: list}
	if page.Agents == nil {
		page.Agents = []store.AgentInfo{}
	}
	if next != "" {
		page.Next = &next
	}
	return writeJSON(w, http.StatusOK, page)
}

// keyHistory is GET /agents/{uid}/keys: every key of the agent, oldest
// first, telling a key rotated away from one revoked.
func (a *api) keyHistory(w http.ResponseWriter, r *http.Request) error {
	uid, err := uidVar(r)
	if err != nil {
		return err
	}
	if _, err := query(r); err != nil {
		return err
	}
	ctx, cancel := a.dbContext(r.Context())
	defer cancel()
	keys, err := a.cfg.DB.KeyHistory(ctx, uid)
	if err != nil {
		return storeError(err)
	}
	return writeJSON(w, http.StatusOK, struct {
		UID  string          `json:"uid"`
		Keys []store.KeyInfo `json:"keys"`
	}{uid, keys})
}

// deleteAgent is DELETE /agents/{uid}: the agent, its keys and directory
// signatures are deleted (store.DeleteAgent); 404 when there is no such
// agent, so a repeat says it is gone.
func (a *api) deleteAgent(w http.ResponseWriter, r *http.Request) error {
	uid, err := uidVar(r)
	if err != nil {
		return err
	}
	if _, err := query(r); err != nil {
		return err
	}
	if err := a.decodeBody(w, r, &struct{}{}); err != nil {
		return err
	}
	ctx, cancel := a.dbContext(r.Context())
	defer cancel()
	if err := a.cfg.DB.DeleteAgent(ctx, uid); err != nil {
		return storeError(err)
	}
	return writeJSON(w, http.StatusOK, struct {
		UID     string `json:"uid"`
		Deleted bool   `json:"deleted"`
	}{uid, true})
}

// auditPage is the answer of GET /audit: Next is the before of the next
// page, nil on the last.
type auditPage struct {
	Events []store.AuditEvent `json:"events"`
	Next   *uint64            `json:"next"`
}

// maxActor is the longest actor the audit trail records.
const maxActor = 128

// audit is GET /audit?agent=&kid=&action=&actor=&since=&invitation=&before=&limit=:
// the audit trail's rows the filters select, newest first (see
// store.DB.Audit).
func (a *api) audit(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r, "agent", "kid", "action", "actor", "since", "invitation", "before", "limit")
	if err != nil {
		return err
	}
	var aq store.AuditQuery
	if aq.AgentUID, err = uidParam(q, "agent"); err != nil {
		return err
	}
	if aq.Kid, err = kidParam(q, "kid"); err != nil {
		return err
	}
	if s, ok := param(q, "action"); ok {
		if !slices.Contains(store.Actions(), s) {
			return badParam("action", s, "one of "+strings.Join(store.Actions(), ", "))
		}
		aq.Action = s
	}
	if s, ok := param(q, "actor"); ok {
		if s == "" || len(s) > maxActor || checkReason("actor", s) != nil {
			return badParam("actor", s, "an actor as the trail records it (operator:NAME, agent:UID…), at most 128 bytes")
		}
		aq.Actor = s
	}
	if aq.Since, err = timeParam(q, "since"); err != nil {
		return err
	}
	if aq.InvitationID, err = idParam(q, "invitation"); err != nil {
		return err
	}
	if aq.Before, err = idParam(q, "before"); err != nil {
		return err
	}
	if aq.Limit, err = limitParam(q); err != nil {
		return err
	}
	ctx, cancel := a.dbContext(r.Context())
	defer cancel()
	rows, err := a.cfg.DB.Audit(ctx, aq)
	if err != nil {
		return storeError(err)
	}
	page := auditPage{Events: rows}
	if page.Events == nil {
		page.Events = []store.AuditEvent{}
	}
	if len(rows) == aq.Limit {
		// A full page: is there an older row? (One row by the primary key.)
		more := aq
		more.Before, more.Limit = rows[len(rows)-1].ID, 1
		older, err := a.cfg.DB.Audit(ctx, more)
		if err != nil {
			return dbUnavailable(err)
		}
		if len(older) > 0 {
			page.Next = &more.Before
		}
	}
	return writeJSON(w, http.StatusOK, page)
}
