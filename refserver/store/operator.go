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
	UID string `json:"uid"`
	// State is one of StateActive, StateNoKeys, StateDisabled,
	// StatePending and StateRejected (see AgentState).
	State      string     `json:"state"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	DisabledAt *time.Time `json:"disabled_at"`
	// DisabledReason is the operator's reason for disabling the agent.
	DisabledReason string `json:"disabled_reason,omitempty"`
	// ReviewReason and ReviewedAt record an operator's review
	// (registration mode approval).
	ReviewReason string     `json:"review_reason,omitempty"`
	ReviewedAt   *time.Time `json:"reviewed_at,omitempty"`
	// InvitationID is the invitation token the agent registered with
	// (registration mode token), nil when none.
	InvitationID *uint64 `json:"invitation_id,omitempty"`
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
	// RevokedWhy is RevokedRotated or RevokedByOperator for a revoked
	// key ("" while active, and for a key revoked before the cause was
	// recorded); RevokeReason is the operator's reason.
	RevokedWhy   string `json:"revoked_why,omitempty"`
	RevokeReason string `json:"revoke_reason,omitempty"`
	// Proven reports whether possession of the key was ever proven to
	// the server (see PublicJWK.ProvenAt).
	Proven bool `json:"proven"`
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
// hold kid (a kid not of ValidKid's form is not looked up). Every
// instance refuses the key within 1 s.
func (d *DB) RevokeKey(ctx context.Context, uid, kid, reason string) (KeyInfo, bool, error) {
	if err := CheckReason(reason); err != nil {
		return KeyInfo{}, false, err
	}
	if !ValidKid(kid) {
		return KeyInfo{}, false, fmt.Errorf("%w: %s has no key %q", ErrNoSuchKey, uid, signer.Truncate(kid))
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
			key.RevokedAt, key.RevokedWhy, key.RevokeReason = &now, RevokedByOperator, reason
			if err := record(tx, auditEntry{Action: ActionKeyRevoke, AgentUID: uid, Kid: kid, Reason: reason}); err != nil {
				return err
			}
			if err := logChanges(tx, []KeyChange{{Kid: kid, AgentUID: uid, Change: ChangeRevoke, Actor: truncActor(actor)}}); err != nil {
				return err
			}
		}
		info = keyInfo(key)
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
