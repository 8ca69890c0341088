package store

// Operating a running service from outside it (`idcli server agents`,
// `idcli server keys revoke`, `idcli server tokens`): every change goes
// through the database, and those that make a cached verdict wrong write
// the change log in the same transaction, so every instance applies them
// within 1 s (see changelog.go).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentid/agentid/signer"
	"gorm.io/gorm"
)

// Errors of DB's methods, matched with errors.Is.
var (
	ErrNoSuchAgent = errors.New("store: no such agent")
	ErrNoSuchKey   = errors.New("store: no such key")
	ErrNoSuchToken = errors.New("store: no such invitation token")
)

// AgentInfo is an agent as the operator sees it.
type AgentInfo struct {
	UID        string     `json:"uid"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	DisabledAt *time.Time `json:"disabled_at"`
	// ActiveKeys counts the keys not revoked.
	ActiveKeys int `json:"active_keys"`
	// Keys lists every key, oldest first (ShowAgent only).
	Keys []KeyInfo `json:"keys,omitempty"`
}

// KeyInfo is one key of an agent.
type KeyInfo struct {
	Kid       string     `json:"kid"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

// CheckMigrated returns a *DBError (ErrNotMigrated) when migrations are
// pending: the server and the operator's commands need the tables of
// this version.
func (d *DB) CheckMigrated(ctx context.Context) error {
	pending, err := Pending(ctx, d.g)
	if err != nil {
		return explainDB(d.url, err)
	}
	if len(pending) > 0 {
		return &DBError{Kind: ErrNotMigrated,
			Cause: fmt.Sprintf("the database is not migrated (%d pending migrations)", len(pending)),
			Fix:   "migrate it first"}
	}
	return nil
}

// ListAgents returns at most limit agents (oldest first) whose uid sorts
// after after ("" for the first page), only the disabled ones when
// disabledOnly is set.
func (d *DB) ListAgents(ctx context.Context, after string, limit int, disabledOnly bool) ([]AgentInfo, error) {
	q := d.g.WithContext(ctx).Model(&Agent{}).Order("uid").Limit(limit)
	if after != "" {
		q = q.Where("uid > ?", after)
	}
	if disabledOnly {
		q = q.Where("disabled_at IS NOT NULL")
	}
	var rows []Agent
	if err := q.Find(&rows).Error; err != nil {
		return nil, err
	}
	out := make([]AgentInfo, len(rows))
	uids := make([]string, len(rows))
	for i, r := range rows {
		out[i] = agentInfo(r)
		uids[i] = r.UID
	}
	if len(rows) == 0 {
		return out, nil
	}
	active := make(map[string]int, len(rows))
	for start := 0; start < len(uids); start += uidBatch {
		var counts []struct {
			AgentUID string
			N        int
		}
		batch := uids[start:min(start+uidBatch, len(uids))]
		if err := d.g.WithContext(ctx).Model(&PublicJWK{}).Select("agent_uid, count(*) AS n").
			Where("agent_uid IN ? AND revoked_at IS NULL", batch).Group("agent_uid").Scan(&counts).Error; err != nil {
			return nil, err
		}
		for _, c := range counts {
			active[c.AgentUID] = c.N
		}
	}
	for i := range out {
		out[i].ActiveKeys = active[out[i].UID]
	}
	return out, nil
}

func agentInfo(r Agent) AgentInfo {
	return AgentInfo{UID: r.UID, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), DisabledAt: utcPtr(r.DisabledAt)}
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
	info := agentInfo(row)
	var keys []PublicJWK
	if err := db.Where("agent_uid = ?", uid).Order("created_at, id").Find(&keys).Error; err != nil {
		return AgentInfo{}, err
	}
	info.Keys = make([]KeyInfo, len(keys))
	for i, k := range keys {
		info.Keys[i] = KeyInfo{Kid: k.Kid, CreatedAt: k.CreatedAt.UTC(), RevokedAt: utcPtr(k.RevokedAt)}
		if k.RevokedAt == nil {
			info.ActiveKeys++
		}
	}
	return info, nil
}

// SetAgentDisabled disables (disabled true) or enables uid for reason (see
// CheckReason), on behalf of the actor in ctx (see WithActor). It
// returns the agent as it is after the change, and whether anything
// changed (false when it already was so). A disabled agent's directory
// lists no key (an empty set, as when its only key is revoked, so that
// third-party verifiers drop its keys within their cache lifetime) and its
// signatures are refused with 403 forbidden by every instance within 1 s.
func (d *DB) SetAgentDisabled(ctx context.Context, uid string, disabled bool, reason string) (AgentInfo, bool, error) {
	if err := CheckReason(reason); err != nil {
		return AgentInfo{}, false, err
	}
	actor := actorOf(ctx)
	var info AgentInfo
	changed := false
	err := d.g.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		row, err := lockAgent(tx, uid)
		if err != nil {
			return err
		}
		if (row.DisabledAt != nil) != disabled {
			changed = true
			var at any // NULL
			change, action, why := ChangeEnable, ActionEnable, ""
			if disabled {
				at, change, action, why = time.Now().UTC(), ChangeDisable, ActionDisable, reason
			}
			if err := tx.Model(&Agent{}).Where("uid = ?", uid).Updates(map[string]any{"disabled_at": at, "disabled_reason": why}).Error; err != nil {
				return err
			}
			if err := record(tx, auditEntry{Action: action, AgentUID: uid, Reason: reason}); err != nil {
				return err
			}
			var kids []string
			if err := tx.Model(&PublicJWK{}).Where("agent_uid = ?", uid).Pluck("kid", &kids).Error; err != nil {
				return err
			}
			if len(kids) == 0 {
				kids = []string{""} // the directory still changes
			}
			rows := make([]KeyChange, len(kids))
			for i, kid := range kids {
				rows[i] = KeyChange{Kid: kid, AgentUID: uid, Change: change, Actor: truncActor(actor)}
			}
			if err := logChanges(tx, rows); err != nil {
				return err
			}
		}
		info, err = showAgent(tx, uid)
		return err
	})
	return info, changed, err
}

// RevokeKey revokes uid's key kid for reason (see CheckReason), on behalf
// of the actor in ctx (see WithActor). It returns the key
// as it is after the change and whether anything changed (false when it
// already was revoked); ErrNoSuchAgent or ErrNoSuchKey when uid does not
// hold kid. Every instance refuses the key within 1 s.
func (d *DB) RevokeKey(ctx context.Context, uid, kid, reason string) (KeyInfo, bool, error) {
	if err := CheckReason(reason); err != nil {
		return KeyInfo{}, false, err
	}
	actor := actorOf(ctx)
	var info KeyInfo
	changed := false
	err := d.g.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// The agent's row lock, as a rotation takes it.
		if _, err := lockAgent(tx, uid); err != nil {
			return err
		}
		var key PublicJWK
		if err := tx.Where("kid = ? AND agent_uid = ?", kid, uid).Take(&key).Error; err != nil {
			if isNotFound(err) {
				return fmt.Errorf("%w: %s has no key %s", ErrNoSuchKey, uid, signer.Truncate(kid))
			}
			return err
		}
		if key.RevokedAt == nil {
			changed = true
			now := time.Now().UTC()
			if err := tx.Model(&PublicJWK{}).Where("id = ?", key.ID).
				Updates(map[string]any{"revoked_at": now, "revoked_why": RevokedByOperator, "revoke_reason": reason}).Error; err != nil {
				return err
			}
			key.RevokedAt = &now
			if err := record(tx, auditEntry{Action: ActionKeyRevoke, AgentUID: uid, Kid: kid, Reason: reason}); err != nil {
				return err
			}
			if err := logChanges(tx, []KeyChange{{Kid: kid, AgentUID: uid, Change: ChangeRevoke, Actor: truncActor(actor)}}); err != nil {
				return err
			}
		}
		info = KeyInfo{Kid: key.Kid, CreatedAt: key.CreatedAt.UTC(), RevokedAt: utcPtr(key.RevokedAt)}
		return nil
	})
	return info, changed, err
}

// truncActor fits actor in key_changes.actor.
func truncActor(actor string) string {
	if len(actor) > 128 {
		actor = actor[:128]
	}
	return strings.ToValidUTF8(actor, "?")
}
