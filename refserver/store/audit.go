package store

// The audit trail: one append-only row per change, written by record in
// the transaction that makes the change (so a change that fails leaves
// no row, and a row names a change that happened), with who made it
// (the actor), the database's time and the request id. The rows that
// change an agent's or a key's state are also written to the outbox
// (outbox_events), from which every instance delivers change events.
// Neither ever holds a secret: no token, no invitation, no private key.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"
)

// Actions of the audit trail (AuditEvent.Action). Those beginning
// "agent." or "key." are change events too (OutboxEvent.Kind).
const (
	ActionRegister       = "agent.registered"    // an agent registered (Kid: its key)
	ActionApprove        = "agent.approved"      // an operator let a pending agent in
	ActionReject         = "agent.rejected"      // an operator refused a pending agent
	ActionDisable        = "agent.disabled"      // an operator disabled the agent
	ActionEnable         = "agent.enabled"       // an operator enabled it again
	ActionDelete         = "agent.deleted"       // the agent and its keys were deleted
	ActionKeyAdd         = "key.added"           // a rotation added the key
	ActionKeyRotate      = "key.rotated"         // a rotation replaced the key
	ActionKeyRevoke      = "key.revoked"         // an operator revoked the key
	ActionKeyClaim       = "key.claimed"         // the key's holder took it from the agent
	ActionRefresh        = "directory.refreshed" // the agent replaced its directory signatures
	ActionInviteCreate   = "invitation.created"
	ActionInviteRevoke   = "invitation.revoked"
	ActionOperatorCreate = "operator_token.created"
	ActionOperatorRevoke = "operator_token.revoked"
	ActionOperatorUsed   = "operator_token.used" // the token authenticated a request (at most once a minute)
)

// AuditEvent is one row of the audit trail (table audit_events).
// CreatedAt is the database's clock when the change committed's
// transaction wrote it. Detail holds facts of the change that have no
// column (an invitation's id, the agent a key was claimed from), never a
// secret.
type AuditEvent struct {
	ID        uint64    `gorm:"primaryKey" json:"id"`
	CreatedAt time.Time `gorm:"column:created_at;not null" json:"time"`
	Action    string    `gorm:"column:action;size:32;not null" json:"action"`
	Actor     string    `gorm:"column:actor;size:128;not null" json:"actor"`
	AgentUID  string    `gorm:"column:agent_uid;size:64;not null" json:"agent,omitempty"`
	Kid       string    `gorm:"column:kid;size:64;not null" json:"kid,omitempty"`
	Reason    string    `gorm:"column:reason;size:500;not null" json:"reason,omitempty"`
	RequestID string    `gorm:"column:request_id;size:64;not null" json:"request_id,omitempty"`
	Detail    JSON      `gorm:"column:detail" json:"detail,omitempty"`
	// InvitationID is the detail's invitation_id, in a column of its own
	// for AuditQuery.InvitationID (not in the JSON: the detail has it).
	InvitationID *uint64 `gorm:"column:invitation_id" json:"-"`
}

// TableName implements gorm's tabler.
func (AuditEvent) TableName() string { return "audit_events" }

// OutboxEvent is a change event waiting for delivery (table
// outbox_events): EventID is its random id, which receivers deduplicate
// deliveries by; Kind is its action. Rows become visible in id order
// (they are written under the change log's lock, see changelog.go).
type OutboxEvent struct {
	ID        uint64    `gorm:"primaryKey"`
	EventID   string    `gorm:"column:event_id;size:32;not null;uniqueIndex"`
	Kind      string    `gorm:"column:kind;size:32;not null"`
	AgentUID  string    `gorm:"column:agent_uid;size:64;not null"`
	Kid       string    `gorm:"column:kid;size:64;not null"`
	Reason    string    `gorm:"column:reason;size:500;not null"`
	CreatedAt time.Time `gorm:"column:created_at;not null"`
}

// TableName implements gorm's tabler.
func (OutboxEvent) TableName() string { return "outbox_events" }

type ctxKey int

const (
	actorKey ctxKey = iota
	requestIDKey
)

// ActorDatabase is the actor of a change made with no actor in its
// context: a program on the database itself, such as the CLI.
const ActorDatabase = "database"

// WithActor returns ctx naming who makes the changes made with it, as the
// audit trail records them: "agent:<uid>", "operator:<token name>", or a
// description of a command run on the database. At most 128 bytes are kept.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey, actor)
}

// WithRequestID returns ctx carrying the id of the request that makes the
// changes made with it (at most 64 bytes are kept).
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey, id)
}

// actorOf returns the actor ctx names (see WithActor), or ActorDatabase.
func actorOf(ctx context.Context) string {
	if actor, _ := ctx.Value(actorKey).(string); actor != "" {
		return actor
	}
	return ActorDatabase
}

// MaxReason is the longest reason, in bytes, an operator may give.
const MaxReason = 500

// CheckReason returns an error unless reason is valid UTF-8 of at most
// MaxReason bytes, without control characters (C0, DEL or C1: a reason is
// shown in listings and terminals).
func CheckReason(reason string) error {
	if len(reason) > MaxReason || !utf8.ValidString(reason) {
		return fmt.Errorf("%w: a reason must be valid UTF-8 of at most %d bytes", ErrInvalidReason, MaxReason)
	}
	for _, r := range reason {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) { // C0, DEL, C1 (0x9b is a terminal's CSI)
			return fmt.Errorf("%w: a reason must not hold control characters", ErrInvalidReason)
		}
	}
	return nil
}

// ErrInvalidReason refuses a reason CheckReason refuses.
var ErrInvalidReason = errors.New("store: invalid reason")

// auditEntry is one change for record.
type auditEntry struct {
	Action   string
	AgentUID string
	Kid      string
	Reason   string
	Detail   map[string]any
}

// failAfterAudit, when set (tests), fails each transaction right after
// record wrote its rows, to prove they share the change's fate.
var failAfterAudit func(action string) error

// clip cuts s to at most n bytes of valid UTF-8.
func clip(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "")
}

// record writes entries to the audit trail, and those that change an
// agent or a key to the outbox, within tx, the transaction making the
// change. The actor and request id come from tx's context. Like
// logChanges it first takes the change log's lock, held until the commit,
// so that audit and outbox rows both become visible in id order (a reader
// paging the trail by id never skips a row committed late), so call it
// last in the transaction (logChanges after it is fine).
func record(tx *gorm.DB, entries ...auditEntry) error {
	if len(entries) == 0 {
		return nil
	}
	if err := lockChangeLog(tx); err != nil {
		return err
	}
	ctx := tx.Statement.Context
	actor := clip(actorOf(ctx), 128)
	requestID, _ := ctx.Value(requestIDKey).(string)
	requestID = clip(requestID, 64)
	var events []auditEntry
	for _, e := range entries {
		var detail, invitation any // NULL
		if id, ok := e.Detail["invitation_id"].(uint64); ok {
			invitation = id
		}
		if len(e.Detail) > 0 {
			b, err := json.Marshal(e.Detail)
			if err != nil {
				return err
			}
			detail = string(b)
		}
		if err := tx.Exec(`INSERT INTO "audit_events" ("created_at", "action", "actor", "agent_uid", "kid", "reason", "request_id", "detail", "invitation_id") `+
			`VALUES (CURRENT_TIMESTAMP, ?, ?, ?, ?, ?, ?, ?, ?)`,
			e.Action, actor, e.AgentUID, e.Kid, clip(e.Reason, MaxReason), requestID, detail, invitation).Error; err != nil {
			return err
		}
		if strings.HasPrefix(e.Action, "agent.") || strings.HasPrefix(e.Action, "key.") {
			events = append(events, e)
		}
	}
	if len(events) > 0 {
		for _, e := range events {
			id, err := newEventID()
			if err != nil {
				return err
			}
			if err := tx.Exec(`INSERT INTO "outbox_events" ("event_id", "kind", "agent_uid", "kid", "reason", "created_at") `+
				`VALUES (?, ?, ?, ?, ?, CURRENT_TIMESTAMP)`, id, e.Action, e.AgentUID, e.Kid, clip(e.Reason, MaxReason)).Error; err != nil {
				return err
			}
		}
	}
	if failAfterAudit != nil {
		for _, e := range entries {
			if err := failAfterAudit(e.Action); err != nil {
				return err
			}
		}
	}
	return nil
}

// newEventID returns a random event id: 32 hex digits.
func newEventID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
