package store

// What the reference server reads and writes for its requests:
// registrations, rotations, key lookups and key directories. Each write
// that can make a cached verdict wrong writes the change log in the same
// transaction (see changelog.go).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Errors of the server's writes, matched with errors.Is.
var (
	// ErrAgentDisabled: an operator has disabled the agent.
	ErrAgentDisabled = errors.New("store: agent disabled")
	// ErrKeyRevoked: the key was revoked (by a concurrent rotation).
	ErrKeyRevoked = errors.New("store: key revoked")
	// ErrKeyRegistered: the key is already registered (to this agent or
	// another, active or revoked), or a concurrent registration won the
	// race on it.
	ErrKeyRegistered = errors.New("store: key already registered")
	// ErrKeyChanged: a key to claim changed (proven, revoked or moved)
	// between reading it and locking its agent.
	ErrKeyChanged = errors.New("store: the key changed meanwhile")
)

func isNotFound(err error) bool { return errors.Is(err, gorm.ErrRecordNotFound) }

// takeOne reads the one row of T that q selects; when there is none it
// fails with notFound naming key ("store: no such agent: UID").
func takeOne[T, K any](q *gorm.DB, notFound error, key K) (T, error) {
	var row T
	if err := q.Take(&row).Error; err != nil {
		var zero T
		if isNotFound(err) {
			return zero, fmt.Errorf("%w: %v", notFound, key)
		}
		return zero, err
	}
	return row, nil
}

// duplicate returns ErrKeyRegistered (wrapping err too) for a unique
// violation, else err.
func duplicate(err error) error {
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return fmt.Errorf("%w (%w)", ErrKeyRegistered, err)
	}
	return err
}

// Agent returns the agent uid, or ErrNoSuchAgent.
func (d *DB) Agent(ctx context.Context, uid string) (Agent, error) {
	return takeOne[Agent](d.g.WithContext(ctx).Where("uid = ?", uid), ErrNoSuchAgent, uid)
}

// Key returns the key kid, whatever its agent, or ErrNoSuchKey.
func (d *DB) Key(ctx context.Context, kid string) (PublicJWK, error) {
	return takeOne[PublicJWK](d.g.WithContext(ctx).Where("kid = ?", kid), ErrNoSuchKey, kid)
}

// KeyState is what a key lookup reads of a kid: its key row and its
// agent's disabled_at, review and review_reason.
type KeyState struct {
	AgentUID     string     `gorm:"column:agent_uid"`
	JWK          JSON       `gorm:"column:jwk"`
	Kid          string     `gorm:"column:kid"`
	RevokedAt    *time.Time `gorm:"column:revoked_at"`
	ProvenAt     *time.Time `gorm:"column:proven_at"`
	DisabledAt   *time.Time `gorm:"column:disabled_at"`
	Review       string     `gorm:"column:review"`
	ReviewReason string     `gorm:"column:review_reason"`
}

// LookupKey reads kid's row, with its agent's state, in one indexed
// query; ErrNoSuchKey when no agent holds kid.
func (d *DB) LookupKey(ctx context.Context, kid string) (KeyState, error) {
	return takeOne[KeyState](d.g.WithContext(ctx).Table("public_jwks").
		Select("public_jwks.agent_uid, public_jwks.jwk, public_jwks.kid, public_jwks.revoked_at, public_jwks.proven_at, agents.disabled_at, agents.review, agents.review_reason").
		Joins("JOIN agents ON agents.uid = public_jwks.agent_uid").
		Where("public_jwks.kid = ?", kid), ErrNoSuchKey, kid)
}

// ProveKey records, at now, that possession of uid's active key kid was
// proven, unless it already was.
func (d *DB) ProveKey(ctx context.Context, uid, kid string, now time.Time) error {
	return d.g.WithContext(ctx).Model(&PublicJWK{}).
		Where("kid = ? AND agent_uid = ? AND revoked_at IS NULL AND proven_at IS NULL", kid, uid).
		Update("proven_at", now).Error
}

// lockAgent takes the row lock of agent uid within tx, so that the
// writes to one agent (rotations, directory signatures, an operator's
// disable or revoke) run one after the other (SQLite: the immediate write
// transaction is the lock), and returns the agent's row; ErrNoSuchAgent when
// uid is not registered.
func lockAgent(tx *gorm.DB, uid string) (Agent, error) {
	return takeOne[Agent](tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("uid = ?", uid), ErrNoSuchAgent, uid)
}

// lockAgentWrite is lockAgent for a write the agent uid signed: an agent
// pending review or rejected is refused with ErrAgentPending or
// ErrAgentRejected, one its operator disabled with ErrAgentDisabled,
// under the lock the operator's decisions take too.
func lockAgentWrite(tx *gorm.DB, uid string) error {
	agent, err := lockAgent(tx, uid)
	if err != nil {
		return err
	}
	if err := reviewRefusal(agent); err != nil {
		return err
	}
	if agent.DisabledAt != nil {
		return fmt.Errorf("%w: %s", ErrAgentDisabled, uid)
	}
	return nil
}

// NewAgent is a registration that creates an agent (see CreateAgent).
type NewAgent struct {
	UID string
	Kid string
	JWK []byte // the public JWK
	Now time.Time
	// Invite, if not "", is the invitation token the registration spends
	// one use of (registration mode token).
	Invite string
	// ClaimFrom, if not "", is the agent holding Kid as an unproven key
	// (a vestauth-compat rotation attached it): the key moves to UID.
	ClaimFrom string
	// Pending creates the agent pending an operator's review
	// (registration mode approval).
	Pending bool
}

// CreateAgent creates the agent a.UID and its key a.Kid, proven at a.Now,
// in one transaction that spends a.Invite (ErrInviteRefused when it is
// not good) and, with a.ClaimFrom, moves the key from that agent
// (ErrKeyChanged when it is no longer that agent's unproven active key).
// A concurrent registration of the key (or of the uid) is ErrKeyRegistered;
// a key of a deleted agent is ErrKeyRetired.
func (d *DB) CreateAgent(ctx context.Context, a NewAgent) error {
	err := d.g.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		agent := Agent{UID: a.UID, CreatedAt: a.Now, UpdatedAt: a.Now}
		registered := auditEntry{Action: ActionRegister, AgentUID: a.UID, Kid: a.Kid}
		if a.Invite != "" {
			id, err := spendInvite(tx, a.Invite, a.Now)
			if err != nil {
				return err
			}
			agent.InviteTokenID = &id
			registered.Detail = map[string]any{"invitation_id": id}
		}
		if a.Pending {
			agent.Review = ReviewPending
		}
		if err := tx.Create(&agent).Error; err != nil {
			return err
		}
		if a.ClaimFrom != "" {
			return claimKey(tx, a.Kid, a.ClaimFrom, a.UID, a.Now, registered)
		}
		now := a.Now
		if err := tx.Create(&PublicJWK{Kid: a.Kid, AgentUID: a.UID, JWK: JSON(a.JWK), CreatedAt: now, ProvenAt: &now}).Error; err != nil {
			return err
		}
		if err := refuseRetired(tx, a.Kid); err != nil {
			return err
		}
		return record(tx, registered)
	})
	return duplicate(err)
}

// claimKey moves the key kid, which a vestauth-compat rotation attached to
// agent from and nothing has proven since, to the agent uid that a
// registration proving it creates in tx, now. The key leaves from (whose
// directory no longer lists it, and whose directory signatures, over a
// directory that changed, are dropped) under from's row lock, and the
// change log names it, so every instance drops what it caches of the key
// and of from's directory. It returns ErrKeyChanged when the key is no
// longer from's unproven active key. The audit trail records registered,
// then the claim.
func claimKey(tx *gorm.DB, kid, from, uid string, now time.Time, registered auditEntry) error {
	if _, err := lockAgent(tx, from); err != nil {
		if errors.Is(err, ErrNoSuchAgent) {
			return ErrKeyChanged
		}
		return err
	}
	res := tx.Model(&PublicJWK{}).Where("kid = ? AND agent_uid = ? AND revoked_at IS NULL AND proven_at IS NULL", kid, from).
		Updates(map[string]any{"agent_uid": uid, "created_at": now, "proven_at": now})
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 0 {
		return ErrKeyChanged
	}
	if err := replaceDirectorySignatures(tx, from, nil); err != nil {
		return err
	}
	if err := tx.Model(&Agent{}).Where("uid = ?", from).Update("updated_at", now).Error; err != nil {
		return err
	}
	if err := record(tx, registered, auditEntry{Action: ActionKeyClaim, AgentUID: from, Kid: kid, Detail: map[string]any{"to": uid}}); err != nil {
		return err
	}
	return logChanges(tx, []KeyChange{{Kid: kid, AgentUID: from, Change: ChangeClaim, Actor: "registration by the key's holder"}})
}

// Rotation is a rotation of an agent's keys (see Rotate).
type Rotation struct {
	UID        string
	SigningKid string // the agent's key that signed the rotation
	Kid        string // the new key
	JWK        []byte // the new key's public JWK
	Proven     bool   // the request proved possession of the new key
	Now        time.Time
	// Signatures replace the agent's directory signatures (nil: none).
	Signatures []DirectorySignature
}

// Rotate inserts r's new key as r.UID's key and revokes the others, and
// replaces the agent's directory signatures (those over the old directory
// can no longer be served), in one transaction holding the agent row lock.
// The key is stored as proven (PublicJWK.ProvenAt) only when r.Proven is
// set. It returns the kids it revokes (or would have, had the commit
// failed) with any error: ErrNoSuchAgent, ErrAgentDisabled (or
// ErrAgentPending, ErrAgentRejected), ErrNoSuchKey
// (r.SigningKid is not the agent's), ErrKeyRevoked (r.SigningKid is
// revoked), ErrKeyRegistered (the new key is registered already),
// ErrKeyRetired (the new key was a deleted agent's).
func (d *DB) Rotate(ctx context.Context, r Rotation) (revoked []string, err error) {
	err = d.g.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := lockAgentWrite(tx, r.UID); err != nil {
			return err
		}
		signing, err := takeOne[PublicJWK](tx.Where("kid = ? AND agent_uid = ?", r.SigningKid, r.UID), ErrNoSuchKey, r.SigningKid)
		if err != nil {
			return err
		}
		if signing.RevokedAt != nil {
			return ErrKeyRevoked
		}
		var n int64
		if err := tx.Model(&PublicJWK{}).Where("kid = ?", r.Kid).Count(&n).Error; err != nil {
			return err
		}
		if n > 0 {
			return ErrKeyRegistered
		}
		now := r.Now
		key := PublicJWK{Kid: r.Kid, AgentUID: r.UID, JWK: JSON(r.JWK), CreatedAt: now}
		if r.Proven {
			key.ProvenAt = &now
		}
		if err := tx.Create(&key).Error; err != nil {
			return err
		}
		if err := refuseRetired(tx, r.Kid); err != nil {
			return err
		}
		// The row lock keeps the agent's active keys as read here until
		// the commit.
		const others = "agent_uid = ? AND kid <> ? AND revoked_at IS NULL"
		if err := tx.Model(&PublicJWK{}).Where(others, r.UID, r.Kid).Pluck("kid", &revoked).Error; err != nil {
			return err
		}
		if err := tx.Model(&PublicJWK{}).Where(others, r.UID, r.Kid).Updates(map[string]any{"revoked_at": now, "revoked_why": RevokedRotated}).Error; err != nil {
			return err
		}
		if err := replaceDirectorySignatures(tx, r.UID, r.Signatures); err != nil {
			return err
		}
		if err := tx.Model(&Agent{}).Where("uid = ?", r.UID).Update("updated_at", now).Error; err != nil {
			return err
		}
		changes := make([]KeyChange, len(revoked))
		entries := []auditEntry{{Action: ActionKeyAdd, AgentUID: r.UID, Kid: r.Kid, Detail: map[string]any{"proven": r.Proven}}}
		for i, kid := range revoked {
			changes[i] = KeyChange{Kid: kid, AgentUID: r.UID, Change: ChangeRotate, Actor: "rotation by the agent"}
			entries = append(entries, auditEntry{Action: ActionKeyRotate, AgentUID: r.UID, Kid: kid, Detail: map[string]any{"by": r.Kid}})
		}
		if err := record(tx, entries...); err != nil {
			return err
		}
		return logChanges(tx, changes)
	})
	return revoked, duplicate(err)
}

// DirectoryKeys returns the keys uid's directory lists: its active public
// keys (oldest first), none while an operator has disabled it or it is
// pending review or rejected, or ErrNoSuchAgent when the agent does not
// exist.
func (d *DB) DirectoryKeys(ctx context.Context, uid string) ([]PublicJWK, error) {
	return directoryKeys(d.g.WithContext(ctx), uid)
}

func directoryKeys(db *gorm.DB, uid string) ([]PublicJWK, error) {
	var rows []PublicJWK
	err := db.Where("agent_uid = ? AND revoked_at IS NULL", uid).
		Where("EXISTS (SELECT 1 FROM agents WHERE agents.uid = public_jwks.agent_uid AND agents.disabled_at IS NULL AND agents.review = '')").
		Order("created_at, id").Find(&rows).Error
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		var n int64
		if err := db.Model(&Agent{}).Where("uid = ?", uid).Count(&n).Error; err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: %s", ErrNoSuchAgent, uid)
		}
	}
	return rows, nil
}

// DirectorySignatures returns at most limit of uid's directory signatures
// over the body whose SHA-256 is digest that are unexpired at now, oldest
// first.
func (d *DB) DirectorySignatures(ctx context.Context, uid string, digest []byte, now time.Time, limit int) ([]DirectorySignature, error) {
	var sigs []DirectorySignature
	err := d.g.WithContext(ctx).Where("agent_uid = ? AND body_digest = ? AND expires_at > ?", uid, digest, now.UTC()).
		Order("id").Limit(limit).Find(&sigs).Error
	return sigs, err
}

// ReplaceDirectorySignatures replaces the directory signatures of uid, an
// agent signing the change itself, with those check returns for the keys
// its directory lists, in one transaction holding the agent row lock:
// ErrNoSuchAgent, ErrAgentDisabled, ErrAgentPending, ErrAgentRejected or
// check's error leave them as they were.
func (d *DB) ReplaceDirectorySignatures(ctx context.Context, uid string, check func(keys []PublicJWK) ([]DirectorySignature, error)) ([]DirectorySignature, error) {
	var rows []DirectorySignature
	err := d.g.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := lockAgentWrite(tx, uid); err != nil {
			return err
		}
		keys, err := directoryKeys(tx, uid)
		if err != nil {
			return err
		}
		if rows, err = check(keys); err != nil {
			return err
		}
		if err := replaceDirectorySignatures(tx, uid, rows); err != nil {
			return err
		}
		return record(tx, auditEntry{Action: ActionRefresh, AgentUID: uid, Detail: map[string]any{"signatures": len(rows)}})
	})
	return rows, err
}

// replaceDirectorySignatures replaces uid's stored directory signatures
// with rows, inside tx.
func replaceDirectorySignatures(tx *gorm.DB, uid string, rows []DirectorySignature) error {
	if err := tx.Where("agent_uid = ?", uid).Delete(&DirectorySignature{}).Error; err != nil {
		return err
	}
	if len(rows) == 0 {
		return nil
	}
	return tx.Create(&rows).Error
}
