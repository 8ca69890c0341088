package store

// The public status of one key (GET /keys/{kid}/status): what a relying
// party may learn of a key it was shown, and nothing of any other.

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"time"
)

// Statuses of a key (KeyStatus.Status).
const (
	KeyActive    = "active"    // the key is good while its agent is let in and enabled
	KeyRotated   = "rotated"   // a rotation replaced it
	KeyRevoked   = "revoked"   // an operator revoked it, or deleted its agent
	KeySuspended = "suspended" // the key is not revoked, but its agent is disabled, pending or rejected
)

// KeyStatus is the public status of one key.
type KeyStatus struct {
	Kid    string `json:"kid"`
	Status string `json:"status"`
	// RevokedAt is when the key was rotated away or revoked.
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// KeyStatus returns the status of the key kid in one indexed query (two
// for a kid no agent holds): a deleted agent's key is KeyRevoked, since
// it stopped being good or since the deletion (see retired.go); a kid
// never registered is ErrNoSuchKey. A key revoked before the cause was
// recorded is KeyRevoked.
func (d *DB) KeyStatus(ctx context.Context, kid string) (KeyStatus, error) {
	row, err := takeOne[struct {
		RevokedAt  *time.Time `gorm:"column:revoked_at"`
		RevokedWhy string     `gorm:"column:revoked_why"`
		DisabledAt *time.Time `gorm:"column:disabled_at"`
		Review     string     `gorm:"column:review"`
	}](d.g.WithContext(ctx).Table("public_jwks").
		Select("public_jwks.revoked_at, public_jwks.revoked_why, agents.disabled_at, agents.review").
		Joins("JOIN agents ON agents.uid = public_jwks.agent_uid").
		Where("public_jwks.kid = ?", kid), ErrNoSuchKey, kid)
	if errors.Is(err, ErrNoSuchKey) {
		retired, rerr := takeOne[retiredKid](d.g.WithContext(ctx).Where("kid = ?", kid), ErrNoSuchKey, kid)
		if rerr != nil {
			return KeyStatus{}, rerr
		}
		return KeyStatus{Kid: kid, Status: KeyRevoked, RevokedAt: utcPtr(&retired.RevokedAt)}, nil
	}
	if err != nil {
		return KeyStatus{}, err
	}
	st := KeyStatus{Kid: kid, Status: KeyActive, RevokedAt: utcPtr(row.RevokedAt)}
	switch {
	case row.RevokedAt != nil && row.RevokedWhy == RevokedRotated:
		st.Status = KeyRotated
	case row.RevokedAt != nil:
		st.Status = KeyRevoked
	case row.DisabledAt != nil || row.Review == ReviewPending || row.Review == ReviewRejected:
		st.Status = KeySuspended
	}
	return st, nil
}

// ValidKid reports whether kid has the form of every key id this store
// holds: an Ed25519 key's RFC 7638 thumbprint, a SHA-256 digest in
// unpadded base64url, 43 characters whose last leaves no stray bits. It
// is the one spelling of a key id, so a kid in any other form is refused
// before a query rather than looked up.
func ValidKid(kid string) bool {
	// The decoder skips CR and LF.
	if len(kid) != 43 || strings.ContainsAny(kid, "\r\n") {
		return false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(kid)
	return err == nil && len(b) == 32
}
