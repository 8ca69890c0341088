package store

// The operator's reads of agents: their states, the filtered and paged
// list (`idcli server agents list`, GET /admin/v1/agents), one agent with
// its key history, and the deletion of one agent.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"gorm.io/gorm"
)

// States of an agent (AgentInfo.State), by precedence: an agent is in the
// first state that applies.
const (
	StateRejected = "rejected" // an operator refused it (registration mode approval)
	StatePending  = "pending"  // it waits for an operator's review
	StateDisabled = "disabled" // an operator disabled it
	StateNoKeys   = "no_keys"  // let in and enabled, but no active key is left
	StateActive   = "active"   // let in, enabled, with at least one active key
)

// AgentStates lists the states in order of precedence.
func AgentStates() []string {
	return []string{StateRejected, StatePending, StateDisabled, StateNoKeys, StateActive}
}

// AgentState is the state of agent a holding activeKeys active keys.
func AgentState(a Agent, activeKeys int) string {
	switch {
	case a.Review == ReviewRejected:
		return StateRejected
	case a.Review == ReviewPending:
		return StatePending
	case a.DisabledAt != nil:
		return StateDisabled
	case activeKeys == 0:
		return StateNoKeys
	}
	return StateActive
}

// AgentQuery selects agents (see Agents). Empty fields select every agent.
type AgentQuery struct {
	State        string    // one of AgentStates
	CreatedSince time.Time // created at or after (to the microsecond)
	Kid          string    // the agent holding this key, active or not
	InvitationID uint64    // registered with this invitation token
	// After is a cursor: only the agents whose uid sorts after it.
	After string
	// Limit caps the agents returned (1 to MaxAgentPage; 0: 100).
	Limit int
}

// MaxAgentPage is the largest AgentQuery.Limit.
const MaxAgentPage = 1000

// ErrInvalidQuery refuses an AgentQuery or an AuditQuery with an unknown
// state, a limit out of range, or an id above the largest signed 64-bit
// integer (an id no row has).
var ErrInvalidQuery = errors.New("store: invalid query")

// Agents returns the agents q selects in uid order, and next, the After
// of the next page ("" when this page is the last). It reads one page in
// one statement, whatever the filters: the state's conditions on the
// agent's row and an EXISTS over its active keys (by the agent_uid
// index), the key by its unique index, the creation time and the
// invitation by their own indexes.
func (d *DB) Agents(ctx context.Context, q AgentQuery) (list []AgentInfo, next string, err error) {
	limit := q.Limit
	switch {
	case limit == 0:
		limit = 100
	case limit < 0 || limit > MaxAgentPage:
		return nil, "", fmt.Errorf("%w: a page holds 1 to %d agents", ErrInvalidQuery, MaxAgentPage)
	}
	db, err := agentsWhere(d.g.WithContext(ctx), q)
	if err != nil {
		return nil, "", err
	}
	if list, err = findAgents(db, limit+1); err != nil {
		return nil, "", err
	}
	if len(list) > limit {
		list = list[:limit]
		next = list[limit-1].UID
	}
	return list, next, nil
}

// ListAgents returns at most limit agents (oldest uid first) whose uid
// sorts after after ("" for the first page), only those an operator has
// disabled (whatever their review) when disabledOnly is set. Unlike
// Agents, limit has no upper bound.
func (d *DB) ListAgents(ctx context.Context, after string, limit int, disabledOnly bool) ([]AgentInfo, error) {
	db, _ := agentsWhere(d.g.WithContext(ctx), AgentQuery{After: after})
	if disabledOnly {
		db = db.Where("agents.disabled_at IS NOT NULL")
	}
	return findAgents(db, limit)
}

// activeKeyExists is the SQL condition that agents' row has an active key.
const activeKeyExists = "EXISTS (SELECT 1 FROM public_jwks WHERE public_jwks.agent_uid = agents.uid AND public_jwks.revoked_at IS NULL)"

// agentsWhere is db selecting from agents the rows q selects (all but
// its Limit), in uid order.
func agentsWhere(db *gorm.DB, q AgentQuery) (*gorm.DB, error) {
	db = db.Table("agents").Order("agents.uid")
	if q.After != "" {
		db = db.Where("agents.uid > ?", q.After)
	}
	if !q.CreatedSince.IsZero() {
		// Microseconds, as PostgreSQL keeps times, on SQLite too.
		db = db.Where("agents.created_at >= ?", q.CreatedSince.UTC().Truncate(time.Microsecond))
	}
	if q.Kid != "" {
		db = db.Where("agents.uid IN (SELECT public_jwks.agent_uid FROM public_jwks WHERE public_jwks.kid = ?)", q.Kid)
	}
	if q.InvitationID > math.MaxInt64 {
		// No row has such an id (ids are signed 64-bit integers in both
		// databases), and the drivers refuse to send it.
		return nil, fmt.Errorf("%w: invitation id %d is above %d", ErrInvalidQuery, q.InvitationID, uint64(math.MaxInt64))
	}
	if q.InvitationID != 0 {
		db = db.Where("agents.invite_token_id = ?", q.InvitationID)
	}
	held := []string{ReviewPending, ReviewRejected}
	switch q.State {
	case "":
	case StateRejected, StatePending:
		db = db.Where("agents.review = ?", q.State)
	case StateDisabled:
		db = db.Where("agents.review NOT IN ? AND agents.disabled_at IS NOT NULL", held)
	case StateNoKeys:
		db = db.Where("agents.review NOT IN ? AND agents.disabled_at IS NULL AND NOT "+activeKeyExists, held)
	case StateActive:
		db = db.Where("agents.review NOT IN ? AND agents.disabled_at IS NULL AND "+activeKeyExists, held)
	default:
		return nil, fmt.Errorf("%w: unknown state %q (want one of %v)", ErrInvalidQuery, q.State, AgentStates())
	}
	return db, nil
}

// agentRow is an agent's row with the count of its active keys.
type agentRow struct {
	Agent
	ActiveKeys int `gorm:"column:active_keys"`
}

// findAgents reads at most limit of the agents db selects, each with its
// count of active keys, in one statement.
func findAgents(db *gorm.DB, limit int) ([]AgentInfo, error) {
	var rows []agentRow
	err := db.Select("agents.*, (SELECT count(*) FROM public_jwks WHERE public_jwks.agent_uid = agents.uid AND public_jwks.revoked_at IS NULL) AS active_keys").
		Limit(limit).Scan(&rows).Error
	if err != nil {
		return nil, err
	}
	out := make([]AgentInfo, len(rows))
	for i, r := range rows {
		out[i] = agentInfo(r.Agent, r.ActiveKeys)
	}
	return out, nil
}

func agentInfo(r Agent, activeKeys int) AgentInfo {
	return AgentInfo{UID: r.UID, State: AgentState(r, activeKeys), CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
		DisabledAt: utcPtr(r.DisabledAt), DisabledReason: r.DisabledReason, ReviewReason: r.ReviewReason,
		ReviewedAt: utcPtr(r.ReviewedAt), InvitationID: r.InviteTokenID, ActiveKeys: activeKeys}
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// ShowAgent returns uid with its keys, or ErrNoSuchAgent.
func (d *DB) ShowAgent(ctx context.Context, uid string) (AgentInfo, error) {
	return showAgent(d.g.WithContext(ctx), uid)
}

func showAgent(db *gorm.DB, uid string) (AgentInfo, error) {
	row, err := takeOne[Agent](db.Where("uid = ?", uid), ErrNoSuchAgent, uid)
	if err != nil {
		return AgentInfo{}, err
	}
	keys, err := keyHistory(db, uid)
	if err != nil {
		return AgentInfo{}, err
	}
	active := 0
	for _, k := range keys {
		if k.RevokedAt == nil {
			active++
		}
	}
	info := agentInfo(row, active)
	info.Keys = keys
	return info, nil
}

// KeyHistory returns every key uid holds, oldest first, active and
// revoked (rotated away or revoked by an operator), or ErrNoSuchAgent.
func (d *DB) KeyHistory(ctx context.Context, uid string) ([]KeyInfo, error) {
	db := d.g.WithContext(ctx)
	keys, err := keyHistory(db, uid)
	if err == nil && len(keys) == 0 {
		var n int64
		if err = db.Model(&Agent{}).Where("uid = ?", uid).Count(&n).Error; err == nil && n == 0 {
			err = fmt.Errorf("%w: %s", ErrNoSuchAgent, uid)
		}
	}
	if err != nil {
		return nil, err
	}
	return keys, nil
}

func keyHistory(db *gorm.DB, uid string) ([]KeyInfo, error) {
	var rows []PublicJWK
	if err := db.Where("agent_uid = ?", uid).Order("created_at, id").Find(&rows).Error; err != nil {
		return nil, err
	}
	keys := make([]KeyInfo, len(rows))
	for i, k := range rows {
		keys[i] = keyInfo(k)
	}
	return keys, nil
}

func keyInfo(k PublicJWK) KeyInfo {
	return KeyInfo{Kid: k.Kid, CreatedAt: k.CreatedAt.UTC(), RevokedAt: utcPtr(k.RevokedAt),
		RevokedWhy: k.RevokedWhy, RevokeReason: k.RevokeReason, Proven: k.ProvenAt != nil}
}

// DeleteAgent deletes the agent uid with its keys and directory
// signatures, on behalf of the actor in ctx (see WithActor), as
// DeleteAgents does: one audit row and change event (ActionDelete), and
// the change log naming its keys, so every instance forgets them within
// 1 s. ErrNoSuchAgent when uid is not registered.
func (d *DB) DeleteAgent(ctx context.Context, uid string) error {
	n, err := d.DeleteAgents(ctx, []string{uid})
	if err == nil && n == 0 {
		err = fmt.Errorf("%w: %s", ErrNoSuchAgent, uid)
	}
	return err
}
