package store

import (
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentid/agentid/signer"
	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

// Agent is a registered agent (table agents).
type Agent struct {
	ID        uint64    `gorm:"primaryKey"`
	UID       string    `gorm:"column:uid;size:64;not null;uniqueIndex"`
	CreatedAt time.Time `gorm:"not null"`
	UpdatedAt time.Time `gorm:"not null"`
	// DisabledAt is set while an operator has disabled the agent: its
	// directory lists no key and its signatures are refused.
	DisabledAt *time.Time `gorm:"column:disabled_at"`
	// InviteTokenID is the invitation token the agent was created with
	// (registration mode token); nil when it was created without one.
	InviteTokenID *uint64 `gorm:"column:invite_token_id"`
	// Review is "" for an agent let in, ReviewPending while an operator
	// has not reviewed it (registration mode approval), ReviewRejected
	// after a refusal; ReviewReason and ReviewedAt record the decision.
	Review       string     `gorm:"column:review;size:16;not null;default:''"`
	ReviewReason string     `gorm:"column:review_reason;size:500;not null;default:''"`
	ReviewedAt   *time.Time `gorm:"column:reviewed_at"`
	// DisabledReason is the operator's reason for disabling the agent.
	DisabledReason string `gorm:"column:disabled_reason;size:500;not null;default:''"`
}

// Review states of an agent (Agent.Review).
const (
	ReviewPending  = "pending"
	ReviewRejected = "rejected"
)

// TableName implements gorm's tabler.
func (Agent) TableName() string { return "agents" }

// KeyChange is one row of the change log (table key_changes): a change to
// a key or an agent that every server instance must see, in commit order
// (see changelog.go). Kid is "" for a change to an agent without keys.
// CreatedAt is the database's clock when the row was written (never an
// application's: rows are written by logChanges, not by gorm's Create).
type KeyChange struct {
	ID        uint64    `gorm:"primaryKey"`
	Kid       string    `gorm:"column:kid;size:64;not null"`
	AgentUID  string    `gorm:"column:agent_uid;size:64;not null"`
	Change    string    `gorm:"column:change;size:16;not null"`
	Actor     string    `gorm:"column:actor;size:128;not null"`
	CreatedAt time.Time `gorm:"column:created_at;not null"`
}

// TableName implements gorm's tabler.
func (KeyChange) TableName() string { return "key_changes" }

// InviteToken is an invitation token (table invite_tokens): a new agent
// may register with it while UsesLeft > 0, before ExpiresAt and unless
// revoked. Only the SHA-256 digest of the token is stored.
type InviteToken struct {
	ID        uint64     `gorm:"primaryKey"`
	Hash      []byte     `gorm:"column:hash;not null;uniqueIndex"`
	Prefix    string     `gorm:"column:prefix;size:32;not null"`
	Note      string     `gorm:"column:note;size:200;not null"`
	UsesLeft  int64      `gorm:"column:uses_left;not null"`
	Used      int64      `gorm:"column:used;not null"`
	CreatedAt time.Time  `gorm:"column:created_at;not null"`
	ExpiresAt *time.Time `gorm:"column:expires_at"`
	RevokedAt *time.Time `gorm:"column:revoked_at"`
}

// TableName implements gorm's tabler.
func (InviteToken) TableName() string { return "invite_tokens" }

// PublicJWK is one public key of an agent (table public_jwks). Kid is the
// RFC 7638 thumbprint, unique across all agents. RevokedAt is nil while the
// key is active. ProvenAt is when possession of the key was first proven
// to the server (a registration, a native rotation's sig2, a verified
// /whoami); nil for a key a vestauth-compat rotation attached, which its
// holder's registration takes to a new agent (see claimKey).
type PublicJWK struct {
	ID        uint64     `gorm:"primaryKey"`
	Kid       string     `gorm:"column:kid;size:64;not null;uniqueIndex"`
	AgentUID  string     `gorm:"column:agent_uid;size:64;not null;index"`
	JWK       JSON       `gorm:"column:jwk;not null"`
	CreatedAt time.Time  `gorm:"not null"`
	RevokedAt *time.Time `gorm:"column:revoked_at"`
	ProvenAt  *time.Time `gorm:"column:proven_at"`
	// RevokedWhy is why the key is revoked: RevokedRotated or
	// RevokedByOperator ("" while active). RevokeReason is the
	// operator's reason.
	RevokedWhy   string `gorm:"column:revoked_why;size:16;not null;default:''"`
	RevokeReason string `gorm:"column:revoke_reason;size:500;not null;default:''"`
}

// Why a key was revoked (PublicJWK.RevokedWhy).
const (
	RevokedRotated    = "rotated" // a rotation replaced it
	RevokedByOperator = "revoked" // an operator revoked it
)

// TableName implements gorm's tabler.
func (PublicJWK) TableName() string { return "public_jwks" }

// JSON is a JSON document column: jsonb on PostgreSQL, text elsewhere.
type JSON json.RawMessage

// GormDataType implements schema.GormDataTypeInterface.
func (JSON) GormDataType() string { return "json" }

// GormDBDataType picks the column type per database.
func (JSON) GormDBDataType(db *gorm.DB, _ *schema.Field) string {
	if db.Dialector.Name() == "postgres" {
		return "jsonb"
	}
	return "text"
}

// Value implements driver.Valuer.
func (j JSON) Value() (driver.Value, error) {
	if len(j) == 0 {
		return nil, nil
	}
	return string(j), nil
}

// MarshalJSON writes the document as it is (null when empty), not as
// the base64 of its bytes.
func (j JSON) MarshalJSON() ([]byte, error) {
	if len(j) == 0 {
		return []byte("null"), nil
	}
	return json.RawMessage(j).MarshalJSON()
}

// UnmarshalJSON keeps the document as it is.
func (j *JSON) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*j = nil
		return nil
	}
	return (*json.RawMessage)(j).UnmarshalJSON(b)
}

// Scan implements sql.Scanner.
func (j *JSON) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*j = nil
	case []byte:
		*j = append(JSON(nil), v...)
	case string:
		*j = JSON(v)
	default:
		return fmt.Errorf("store: cannot scan %T into JSON", v)
	}
	return nil
}

// PublicKey parses the stored JWK. It fails only on corrupt rows.
func (p PublicJWK) PublicKey() (signer.PublicKey, error) {
	pk, err := signer.ParsePublicJWK(p.JWK)
	if err != nil {
		return signer.PublicKey{}, errors.New("store: stored jwk " + p.Kid + " is invalid: " + err.Error())
	}
	return pk, nil
}

// DirectorySignature is a signature an agent made over its own key
// directory response (table directory_signatures): the agent holds the
// private keys, so the server can only store and serve what the agent
// signed. BodyDigest is the SHA-256 of the exact directory body the
// signature covers (through Content-Digest): a row whose digest is not
// the body being served is never served. Input is the Signature-Input
// inner list as this server re-serialized it; CreatedAt and ExpiresAt are
// its created and expires parameters.
type DirectorySignature struct {
	ID         uint64    `gorm:"primaryKey"`
	AgentUID   string    `gorm:"column:agent_uid;size:64;not null;index"`
	Kid        string    `gorm:"column:kid;size:64;not null"`
	BodyDigest []byte    `gorm:"column:body_digest;not null"`
	Input      string    `gorm:"column:input;type:text;not null"`
	Value      []byte    `gorm:"column:value;not null"`
	CreatedAt  time.Time `gorm:"column:created_at;not null"`
	ExpiresAt  time.Time `gorm:"column:expires_at;not null"`
}

// TableName implements gorm's tabler.
func (DirectorySignature) TableName() string { return "directory_signatures" }
