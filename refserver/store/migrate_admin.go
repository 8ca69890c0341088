package store

// Migrations of the service run for others: review state and reasons on
// agents and keys, the audit trail and the change events' outbox. Each
// has its own copy of the columns it creates, as in migrate.go.

import (
	"time"

	"gorm.io/gorm"
)

// migrationV4Agent is agents as changed by 20261210120000: review is ""
// for an agent let in, "pending" while an operator has not reviewed it
// (registration mode approval), "rejected" after a refusal;
// review_reason and reviewed_at record the operator's decision, and
// disabled_reason why an operator disabled it.
type migrationV4Agent struct {
	migrationV3Agent
	Review         string     `gorm:"column:review;size:16;not null;default:''"`
	ReviewReason   string     `gorm:"column:review_reason;size:500;not null;default:''"`
	ReviewedAt     *time.Time `gorm:"column:reviewed_at"`
	DisabledReason string     `gorm:"column:disabled_reason;size:500;not null;default:''"`
}

func (migrationV4Agent) TableName() string { return "agents" }

// migrationV3PublicJWK is public_jwks as changed by 20261210120100:
// revoked_why tells a key rotated away from one an operator revoked (or
// its holder claimed), and revoke_reason is the operator's reason.
type migrationV3PublicJWK struct {
	migrationV2PublicJWK
	RevokedWhy   string `gorm:"column:revoked_why;size:16;not null;default:''"`
	RevokeReason string `gorm:"column:revoke_reason;size:500;not null;default:''"`
}

func (migrationV3PublicJWK) TableName() string { return "public_jwks" }

// migrationV1AuditEvent is audit_events as created by 20261210120200.
type migrationV1AuditEvent struct {
	ID        uint64    `gorm:"primaryKey"`
	CreatedAt time.Time `gorm:"column:created_at;not null;index:idx_audit_events_created_at"`
	Action    string    `gorm:"column:action;size:32;not null"`
	Actor     string    `gorm:"column:actor;size:128;not null"`
	AgentUID  string    `gorm:"column:agent_uid;size:64;not null;index:idx_audit_events_agent_uid"`
	Kid       string    `gorm:"column:kid;size:64;not null"`
	Reason    string    `gorm:"column:reason;size:500;not null"`
	RequestID string    `gorm:"column:request_id;size:64;not null"`
	Detail    JSON      `gorm:"column:detail"`
}

func (migrationV1AuditEvent) TableName() string { return "audit_events" }

// migrationV1OutboxEvent is outbox_events as created by 20261210120300.
type migrationV1OutboxEvent struct {
	ID        uint64    `gorm:"primaryKey"`
	EventID   string    `gorm:"column:event_id;size:32;not null;uniqueIndex"`
	Kind      string    `gorm:"column:kind;size:32;not null"`
	AgentUID  string    `gorm:"column:agent_uid;size:64;not null"`
	Kid       string    `gorm:"column:kid;size:64;not null"`
	Reason    string    `gorm:"column:reason;size:500;not null"`
	CreatedAt time.Time `gorm:"column:created_at;not null"`
}

func (migrationV1OutboxEvent) TableName() string { return "outbox_events" }

// addColumns is the migration adding T's fields as columns, in order,
// each unless it exists: columnFields alternates a column and its field.
func addColumns[T any](columnFields ...string) func(*gorm.DB) error {
	return func(tx *gorm.DB) error {
		for i := 0; i+1 < len(columnFields); i += 2 {
			if err := addColumn[T](columnFields[i], columnFields[i+1])(tx); err != nil {
				return err
			}
		}
		return nil
	}
}

// indexAgentQueries adds the indexes the operator's filters read by
// (20261210150000): agents by creation time and by invitation token, the
// audit trail by key.
func indexAgentQueries(tx *gorm.DB) error {
	for _, stmt := range []string{
		"CREATE INDEX IF NOT EXISTS idx_agents_created_at ON agents (created_at)",
		"CREATE INDEX IF NOT EXISTS idx_agents_invite_token_id ON agents (invite_token_id)",
		"CREATE INDEX IF NOT EXISTS idx_audit_events_kid ON audit_events (kid)",
	} {
		if err := tx.Exec(stmt).Error; err != nil {
			return err
		}
	}
	return nil
}

// migrationV1RetiredKid is retired_kids as created by 20261216120000: the
// kids of deleted agents' keys, kept for good so that a deletion never
// frees a key to be registered again (see retire).
type migrationV1RetiredKid struct {
	Kid       string    `gorm:"column:kid;size:64;primaryKey"`
	AgentUID  string    `gorm:"column:agent_uid;size:64;not null"`
	RevokedAt time.Time `gorm:"column:revoked_at;not null"`
	RetiredAt time.Time `gorm:"column:retired_at;not null"`
}

func (migrationV1RetiredKid) TableName() string { return "retired_kids" }

// migrationV2AuditEvent is audit_events as changed by 20261216120100:
// invitation_id is the invitation token the row is about (its detail's
// invitation_id), NULL for a row about none, so that the trail can be
// filtered by invitation on an index rather than by reading JSON.
type migrationV2AuditEvent struct {
	migrationV1AuditEvent
	InvitationID *uint64 `gorm:"column:invitation_id"`
}

func (migrationV2AuditEvent) TableName() string { return "audit_events" }

// addAuditEventsInvitationID adds audit_events.invitation_id and its
// index, and fills it in from the detail of the rows written before.
func addAuditEventsInvitationID(tx *gorm.DB) error {
	if err := addColumn[migrationV2AuditEvent]("invitation_id", "InvitationID")(tx); err != nil {
		return err
	}
	if err := tx.Exec("CREATE INDEX IF NOT EXISTS idx_audit_events_invitation_id ON audit_events (invitation_id)").Error; err != nil {
		return err
	}
	from := "json_extract(detail, '$.invitation_id')"
	if tx.Dialector.Name() == "postgres" {
		from = "(detail->>'invitation_id')::bigint"
	}
	return tx.Exec("UPDATE audit_events SET invitation_id = " + from +
		" WHERE invitation_id IS NULL AND detail IS NOT NULL AND " + from + " IS NOT NULL").Error
}
