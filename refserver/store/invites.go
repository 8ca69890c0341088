package store

// Invitation tokens: created, listed and revoked by the operator, and
// spent by the registrations of registration mode token.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"
)

// invitePrefix starts every invitation token; 32 base64url characters
// (24 random bytes) follow.
const invitePrefix = "agentid_inv_"

// InviteInfo is an invitation token as listed (never the token itself).
type InviteInfo struct {
	ID        uint64     `json:"id"`
	Prefix    string     `json:"prefix"`
	Note      string     `json:"note"`
	UsesLeft  int64      `json:"uses_left"`
	Used      int64      `json:"used"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

func inviteInfo(t InviteToken) InviteInfo {
	return InviteInfo{ID: t.ID, Prefix: t.Prefix, Note: t.Note, UsesLeft: t.UsesLeft, Used: t.Used,
		CreatedAt: t.CreatedAt.UTC(), ExpiresAt: utcPtr(t.ExpiresAt), RevokedAt: utcPtr(t.RevokedAt)}
}

func inviteHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// CreateInvite makes an invitation token good for uses registrations
// (at least 1) until ttl from now (0: no expiry), with a note for the
// operator. The token is returned once; only its SHA-256 digest is stored.
func (d *DB) CreateInvite(ctx context.Context, note string, uses int64, ttl time.Duration) (string, InviteInfo, error) {
	if uses < 1 {
		return "", InviteInfo{}, errors.New("store: an invitation token needs at least one use")
	}
	if ttl < 0 {
		return "", InviteInfo{}, errors.New("store: an invitation token's lifetime must not be negative")
	}
	if len(note) > 200 || !utf8.ValidString(note) {
		return "", InviteInfo{}, errors.New("store: an invitation token's note must be valid UTF-8 of at most 200 bytes")
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", InviteInfo{}, err
	}
	token := invitePrefix + base64.RawURLEncoding.EncodeToString(b[:])
	now := time.Now().UTC()
	row := InviteToken{Hash: inviteHash(token), Prefix: token[:len(invitePrefix)+4], Note: note, UsesLeft: uses, CreatedAt: now}
	if ttl > 0 {
		exp := now.Add(ttl)
		row.ExpiresAt = &exp
	}
	err := d.g.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&row).Error; err != nil {
			return err
		}
		return record(tx, auditEntry{Action: ActionInviteCreate, Reason: note,
			Detail: map[string]any{"invitation_id": row.ID, "uses": uses}})
	})
	if err != nil {
		return "", InviteInfo{}, err
	}
	return token, inviteInfo(row), nil
}

// ListInvites returns every invitation token, newest first.
func (d *DB) ListInvites(ctx context.Context) ([]InviteInfo, error) {
	var rows []InviteToken
	if err := d.g.WithContext(ctx).Order("id DESC").Find(&rows).Error; err != nil {
		return nil, err
	}
	out := make([]InviteInfo, len(rows))
	for i, r := range rows {
		out[i] = inviteInfo(r)
	}
	return out, nil
}

// RevokeInvite revokes the invitation token id; it reports whether
// anything changed (false when it already was revoked), or ErrNoSuchToken
// (also for an id above the largest signed 64-bit integer, which no row
// has and the drivers refuse to send).
func (d *DB) RevokeInvite(ctx context.Context, id uint64) (InviteInfo, bool, error) {
	if id > math.MaxInt64 {
		return InviteInfo{}, false, fmt.Errorf("%w: %d", ErrNoSuchToken, id)
	}
	var info InviteInfo
	changed := false
	err := d.g.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		row, err := takeOne[InviteToken](tx.Where("id = ?", id), ErrNoSuchToken, id)
		if err != nil {
			return err
		}
		if row.RevokedAt == nil {
			changed = true
			now := time.Now().UTC()
			row.RevokedAt = &now
			if err := tx.Model(&InviteToken{}).Where("id = ?", id).Update("revoked_at", now).Error; err != nil {
				return err
			}
			if err := record(tx, auditEntry{Action: ActionInviteRevoke, Detail: map[string]any{"invitation_id": id}}); err != nil {
				return err
			}
		}
		info = inviteInfo(row)
		return nil
	})
	return info, changed, err
}

// ErrInviteRefused refuses a registration whose invitation token is not
// good: unknown, used up, expired or revoked (the client is not told
// which).
var ErrInviteRefused = errors.New("store: invitation token refused")

// inviteUsable reports whether the invitation token t is neither revoked
// nor expired at now.
func inviteUsable(t InviteToken, now time.Time) bool {
	return t.RevokedAt == nil && (t.ExpiresAt == nil || t.ExpiresAt.After(now))
}

// findInvite returns the invitation token row of token, or
// ErrInviteRefused when none has its digest.
func findInvite(db *gorm.DB, token string) (InviteToken, error) {
	var row InviteToken
	if err := db.Where("hash = ?", inviteHash(token)).Take(&row).Error; err != nil {
		if isNotFound(err) {
			return InviteToken{}, ErrInviteRefused
		}
		return InviteToken{}, err
	}
	return row, nil
}

// spendInvite spends one use of token within tx (the transaction that
// creates the agent, so a failed registration spends nothing) and returns
// its id, or ErrInviteRefused when it is unknown, used up, expired or
// revoked. The update re-checks the use left, so concurrent registrations
// never spend more uses than the token has.
func spendInvite(tx *gorm.DB, token string, now time.Time) (uint64, error) {
	row, err := findInvite(tx, token)
	if err != nil {
		return 0, err
	}
	if !inviteUsable(row, now) || row.UsesLeft <= 0 {
		return 0, ErrInviteRefused
	}
	res := tx.Model(&InviteToken{}).
		Where("id = ? AND uses_left > 0 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)", row.ID, now.UTC()).
		Updates(map[string]any{"uses_left": gorm.Expr("uses_left - 1"), "used": gorm.Expr("used + 1")})
	if res.Error != nil {
		return 0, res.Error
	}
	if res.RowsAffected == 0 {
		return 0, ErrInviteRefused
	}
	return row.ID, nil
}

// AdmitInvite checks token for a registration of a key already held by
// agent, which spends nothing: the token must be usable and have a use
// left, or be the one agent was created with; else ErrInviteRefused.
func (d *DB) AdmitInvite(ctx context.Context, token string, agent Agent, now time.Time) error {
	row, err := findInvite(d.g.WithContext(ctx), token)
	if err != nil {
		return err
	}
	own := agent.InviteTokenID != nil && *agent.InviteTokenID == row.ID
	if !inviteUsable(row, now) || (row.UsesLeft <= 0 && !own) {
		return ErrInviteRefused
	}
	return nil
}
