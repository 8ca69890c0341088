package store

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"
)

// Migration is one schema change. ID is a 14-digit timestamp; migrations run
// in ascending ID order and each runs at most once (recorded in the
// schema_migrations table). Migrate must be idempotent: it checks what
// exists before creating it, so a half-applied database can be migrated
// again.
type Migration struct {
	ID      string
	Name    string
	Migrate func(tx *gorm.DB) error
}

// MigrationsTable records the IDs of applied migrations.
const MigrationsTable = "schema_migrations"

// migrations is the ordered list of schema changes. To add one, append an
// entry with a later timestamp ID and give it its own copy of the model
// structs it touches (never the live models), so later model changes cannot
// rewrite history.
var migrations = []Migration{
	{ID: "20260223204000", Name: "CreateAgentsTable", Migrate: createTable[migrationV1Agent]},
	{ID: "20260223205500", Name: "CreatePublicJwksTable", Migrate: createTable[migrationV1PublicJWK]},
	{ID: "20260301120000", Name: "CreateReplayNoncesTable", Migrate: createTable[migrationV1ReplayNonce]},
	{ID: "20261125120000", Name: "HashReplayNonceKeys", Migrate: hashReplayNonceKeys},
	{ID: "20261127150000", Name: "CreateDirectorySignaturesTable", Migrate: createTable[migrationV1DirectorySignature]},
	{ID: "20261127160000", Name: "CreateKeyChangesTable", Migrate: createTable[migrationV1KeyChange]},
	{ID: "20261127160100", Name: "AddAgentsDisabledAt", Migrate: addColumn[migrationV2Agent]("disabled_at", "DisabledAt")},
	{ID: "20261127160200", Name: "CreateInviteTokensTable", Migrate: createTable[migrationV1InviteToken]},
	{ID: "20261201120000", Name: "AddAgentsInviteTokenID", Migrate: addColumn[migrationV3Agent]("invite_token_id", "InviteTokenID")},
	{ID: "20261201120100", Name: "AddPublicJwksProvenAt", Migrate: addPublicJwksProvenAt},
	{ID: "20261210120000", Name: "AddAgentsReview", Migrate: addColumns[migrationV4Agent](
		"review", "Review", "review_reason", "ReviewReason", "reviewed_at", "ReviewedAt", "disabled_reason", "DisabledReason")},
	{ID: "20261210120100", Name: "AddPublicJwksRevokedWhy", Migrate: addColumns[migrationV3PublicJWK](
		"revoked_why", "RevokedWhy", "revoke_reason", "RevokeReason")},
	{ID: "20261210120200", Name: "CreateAuditEventsTable", Migrate: createTable[migrationV1AuditEvent]},
	{ID: "20261210120300", Name: "CreateOutboxEventsTable", Migrate: createTable[migrationV1OutboxEvent]},
	{ID: "20261210130000", Name: "CreateOperatorTokensTable", Migrate: createTable[migrationV1OperatorToken]},
	{ID: "20261210140000", Name: "CreateServiceKeysTable", Migrate: createTable[migrationV1ServiceKey]},
	{ID: "20261210140100", Name: "CreateWebhookCursorsTable", Migrate: createTable[migrationV1WebhookCursor]},
	{ID: "20261210150000", Name: "IndexAgentQueries", Migrate: indexAgentQueries},
	{ID: "20261211120000", Name: "NameWebhookCursorsByHost", Migrate: nameWebhookCursorsByHost},
	{ID: "20261216120000", Name: "CreateRetiredKidsTable", Migrate: createTable[migrationV1RetiredKid]},
	{ID: "20261216120100", Name: "AddAuditEventsInvitationID", Migrate: addAuditEventsInvitationID},
}

// createTable is the migration creating T's table, unless it exists.
func createTable[T any](tx *gorm.DB) error {
	if tx.Migrator().HasTable(new(T)) {
		return nil
	}
	return tx.Migrator().CreateTable(new(T))
}

// addColumn is the migration adding T's field as column, unless it exists.
func addColumn[T any](column, field string) func(*gorm.DB) error {
	return func(tx *gorm.DB) error {
		if tx.Migrator().HasColumn(new(T), column) {
			return nil
		}
		return tx.Migrator().AddColumn(new(T), field)
	}
}

// Migrations returns the schema migrations in order.
func Migrations() []Migration {
	out := append([]Migration(nil), migrations...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// migrationV1Agent is agents as created by 20260223204000.
type migrationV1Agent struct {
	ID        uint64    `gorm:"primaryKey"`
	UID       string    `gorm:"column:uid;size:64;not null;uniqueIndex"`
	CreatedAt time.Time `gorm:"not null"`
	UpdatedAt time.Time `gorm:"not null"`
}

func (migrationV1Agent) TableName() string { return "agents" }

// migrationV1PublicJWK is public_jwks as created by 20260223205500, with a
// foreign key to agents.uid (ON DELETE CASCADE).
type migrationV1PublicJWK struct {
	ID        uint64           `gorm:"primaryKey"`
	Kid       string           `gorm:"column:kid;size:64;not null;uniqueIndex"`
	AgentUID  string           `gorm:"column:agent_uid;size:64;not null;index"`
	Agent     migrationV1Agent `gorm:"foreignKey:AgentUID;references:UID;constraint:OnUpdate:CASCADE,OnDelete:CASCADE"`
	JWK       JSON             `gorm:"column:jwk;not null"`
	CreatedAt time.Time        `gorm:"not null"`
	RevokedAt *time.Time       `gorm:"column:revoked_at"`
}

func (migrationV1PublicJWK) TableName() string { return "public_jwks" }

// migrationV1ReplayNonce is replay_nonces as created by 20260301120000: one
// row per replay key (keyid and nonce, as text) seen, kept until ExpiresAt.
type migrationV1ReplayNonce struct {
	Key       string    `gorm:"column:key;type:text;primaryKey"`
	ExpiresAt time.Time `gorm:"column:expires_at;not null;index:idx_replay_nonces_expires_at"`
}

func (migrationV1ReplayNonce) TableName() string { return "replay_nonces" }

// migrationV2ReplayNonce is replay_nonces as recreated by 20261125120000:
// the primary key is the SHA-256 digest of the replay key (32 bytes, bytea
// on PostgreSQL, blob on SQLite), so a row has one size whatever the length
// of the nonce a client sent.
type migrationV2ReplayNonce struct {
	KeyHash   []byte    `gorm:"column:key_hash;primaryKey"`
	ExpiresAt time.Time `gorm:"column:expires_at;not null;index:idx_replay_nonces_expires_at"`
}

func (migrationV2ReplayNonce) TableName() string { return "replay_nonces" }

// hashReplayNonceKeys replaces replay_nonces (text keys) with the digest
// table. The old rows are dropped rather than converted: each expires
// within minutes of being written (the signature's window plus the skew),
// and the verifier's replay key changes in the same release, so no old row
// could match a new key anyway. It is a no-op when key_hash exists.
func hashReplayNonceKeys(tx *gorm.DB) error {
	m := tx.Migrator()
	if m.HasColumn(&migrationV2ReplayNonce{}, "key_hash") {
		return nil
	}
	if m.HasTable(&migrationV1ReplayNonce{}) {
		if err := m.DropTable(&migrationV1ReplayNonce{}); err != nil {
			return err
		}
	}
	return m.CreateTable(&migrationV2ReplayNonce{})
}

// migrationV1DirectorySignature is directory_signatures as created by
// 20261127150000: the signatures agents made over their own key directory
// responses, removed with their agent (foreign key to agents.uid, ON
// DELETE CASCADE).
type migrationV1DirectorySignature struct {
	ID         uint64           `gorm:"primaryKey"`
	AgentUID   string           `gorm:"column:agent_uid;size:64;not null;index"`
	Agent      migrationV1Agent `gorm:"foreignKey:AgentUID;references:UID;constraint:OnUpdate:CASCADE,OnDelete:CASCADE"`
	Kid        string           `gorm:"column:kid;size:64;not null"`
	BodyDigest []byte           `gorm:"column:body_digest;not null"`
	Input      string           `gorm:"column:input;type:text;not null"`
	Value      []byte           `gorm:"column:value;not null"`
	CreatedAt  time.Time        `gorm:"column:created_at;not null"`
	ExpiresAt  time.Time        `gorm:"column:expires_at;not null"`
}

func (migrationV1DirectorySignature) TableName() string { return "directory_signatures" }

// migrationV1KeyChange is key_changes as created by 20261127160000: the
// ordered change log every server instance reads to drop what it caches
// of the keys and agents a change names (see changelog.go).
type migrationV1KeyChange struct {
	ID        uint64    `gorm:"primaryKey"`
	Kid       string    `gorm:"column:kid;size:64;not null"`
	AgentUID  string    `gorm:"column:agent_uid;size:64;not null"`
	Change    string    `gorm:"column:change;size:16;not null"`
	Actor     string    `gorm:"column:actor;size:128;not null"`
	CreatedAt time.Time `gorm:"column:created_at;not null;index:idx_key_changes_created_at"`
}

func (migrationV1KeyChange) TableName() string { return "key_changes" }

// migrationV2Agent is agents as changed by 20261127160100: disabled_at is
// set while an operator has disabled the agent.
type migrationV2Agent struct {
	migrationV1Agent
	DisabledAt *time.Time `gorm:"column:disabled_at"`
}

func (migrationV2Agent) TableName() string { return "agents" }

// migrationV1InviteToken is invite_tokens as created by 20261127160200:
// invitation tokens of a service whose registration needs one. Only the
// SHA-256 digest of a token is stored (unique); Prefix is its first
// characters, to tell tokens apart in listings.
type migrationV1InviteToken struct {
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

func (migrationV1InviteToken) TableName() string { return "invite_tokens" }

// migrationV3Agent is agents as changed by 20261201120000:
// invite_token_id is the invitation token the agent was created with
// (registration mode token), NULL for an agent created without one.
type migrationV3Agent struct {
	migrationV2Agent
	InviteTokenID *uint64 `gorm:"column:invite_token_id"`
}

func (migrationV3Agent) TableName() string { return "agents" }

// migrationV2PublicJWK is public_jwks as changed by 20261201120100:
// proven_at is when possession of the key was first proven to the server,
// NULL for a key a vestauth-compat rotation attached and nothing has proven
// since.
type migrationV2PublicJWK struct {
	migrationV1PublicJWK
	ProvenAt *time.Time `gorm:"column:proven_at"`
}

func (migrationV2PublicJWK) TableName() string { return "public_jwks" }

// addPublicJwksProvenAt adds proven_at and dates the keys already stored
// as proven when they were created: which of them a vestauth-compat
// rotation attached was not recorded, and counting them unproven would
// give a new agent to every agent registering its key again.
func addPublicJwksProvenAt(tx *gorm.DB) error {
	if tx.Migrator().HasColumn(&migrationV2PublicJWK{}, "proven_at") {
		return nil
	}
	if err := tx.Migrator().AddColumn(&migrationV2PublicJWK{}, "ProvenAt"); err != nil {
		return err
	}
	return tx.Exec("UPDATE public_jwks SET proven_at = created_at WHERE proven_at IS NULL").Error
}

// Migrate applies the pending migrations in order, in one transaction (both
// PostgreSQL and SQLite have transactional DDL), printing Rails-style lines
// to w (nil for none):
//
//	== 20260223204000 CreateAgentsTable: migrating ==============================
//	== 20260223204000 CreateAgentsTable: migrated (0.0123s) =====================
//
// On PostgreSQL a transaction-scoped advisory lock serialises concurrent
// Migrate calls. Running it again when nothing is pending does nothing and
// prints nothing.
func Migrate(ctx context.Context, db *gorm.DB, w io.Writer) error {
	if w == nil {
		w = io.Discard
	}
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if tx.Dialector.Name() == "postgres" {
			if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", int64(0x6167656e746964)).Error; err != nil {
				return fmt.Errorf("store: migrate: lock: %w", err)
			}
		}
		var list []*gormigrate.Migration
		for _, m := range Migrations() {
			m := m
			list = append(list, &gormigrate.Migration{
				ID: m.ID,
				Migrate: func(tx *gorm.DB) error {
					fmt.Fprintln(w, migrationLine(m, "migrating"))
					start := time.Now()
					if err := m.Migrate(tx); err != nil {
						return fmt.Errorf("%s %s: %w", m.ID, m.Name, err)
					}
					fmt.Fprintln(w, migrationLine(m, fmt.Sprintf("migrated (%.4fs)", time.Since(start).Seconds())))
					return nil
				},
			})
		}
		g := gormigrate.New(tx, &gormigrate.Options{TableName: MigrationsTable, IDColumnName: "id", IDColumnSize: 255}, list)
		if err := g.Migrate(); err != nil {
			return fmt.Errorf("store: migrate: %w", err)
		}
		return nil
	})
}

// migrationLine pads "== ID Name: status " with '=' to 79 columns, as Rails does.
func migrationLine(m Migration, status string) string {
	s := "== " + m.ID + " " + m.Name + ": " + status + " "
	if n := 79 - len(s); n > 0 {
		s += strings.Repeat("=", n)
	}
	return s
}

// Pending returns the IDs of migrations not yet applied to db (all of them
// when the migrations table does not exist).
func Pending(ctx context.Context, db *gorm.DB) ([]string, error) {
	db = db.WithContext(ctx)
	if err := pingDB(ctx, db); err != nil {
		return nil, fmt.Errorf("store: read migrations: %w", err)
	}
	applied := map[string]bool{}
	if db.Migrator().HasTable(MigrationsTable) {
		var ids []string
		if err := db.Table(MigrationsTable).Pluck("id", &ids).Error; err != nil {
			return nil, fmt.Errorf("store: read migrations: %w", err)
		}
		for _, id := range ids {
			applied[id] = true
		}
	}
	var pending []string
	for _, m := range Migrations() {
		if !applied[m.ID] {
			pending = append(pending, m.ID)
		}
	}
	return pending, nil
}
