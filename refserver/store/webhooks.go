package store

// Webhook delivery state: one cursor per webhook URL (table
// webhook_cursors), shared by every instance. An instance delivers to a
// URL while it holds the URL's lease (ClaimWebhook): the events of the
// outbox past the cursor, in id order (rows become visible in id order,
// see record), moving the cursor past each one the receiver took
// (AdvanceWebhook). A failure puts the next attempt off (FailWebhook)
// and gives up the lease; an instance that dies keeps it until it
// expires, then any other takes the URL over. Delivery is at least once:
// an event sent and not yet recorded as delivered when its sender dies is
// sent again. Every time is the database's clock, never an instance's.
// The URL itself is never stored, only its SHA-256 (the key) and its name,
// redact.HostOnly: scheme, host and port and the key's first 8 hex digits
// (a webhook URL may carry its secret in the path, as Slack's and
// Discord's do, or in the query).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/agentid/agentid/signer/redact"
	"gorm.io/gorm"
)

// WebhookCursor is the delivery state of one webhook URL (table
// webhook_cursors). URL is the webhook's name (redact.HostOnly), never
// the URL; LastEventID is the id of the last outbox row the receiver
// took; LastError, the cause of the last failure, without the URL.
type WebhookCursor struct {
	ID            uint64     `gorm:"primaryKey" json:"-"`
	URLKey        string     `gorm:"column:url_key;size:64;not null;uniqueIndex" json:"-"`
	URL           string     `gorm:"column:url;size:500;not null" json:"url"`
	LastEventID   uint64     `gorm:"column:last_event_id;not null" json:"last_event_id"`
	Attempts      int        `gorm:"column:attempts;not null" json:"attempts"`
	NextAttemptAt time.Time  `gorm:"column:next_attempt_at;not null" json:"next_attempt_at"`
	LeaseOwner    string     `gorm:"column:lease_owner;size:64;not null" json:"lease_owner"`
	LeaseUntil    *time.Time `gorm:"column:lease_until" json:"lease_until"`
	LastError     string     `gorm:"column:last_error;size:500;not null" json:"last_error"`
	UpdatedAt     time.Time  `gorm:"column:updated_at;not null" json:"updated_at"`
}

// TableName implements gorm's tabler.
func (WebhookCursor) TableName() string { return "webhook_cursors" }

// migrationV1WebhookCursor is webhook_cursors as created by 20261210140100.
type migrationV1WebhookCursor struct {
	ID            uint64     `gorm:"primaryKey"`
	URLKey        string     `gorm:"column:url_key;size:64;not null;uniqueIndex"`
	URL           string     `gorm:"column:url;size:500;not null"`
	LastEventID   uint64     `gorm:"column:last_event_id;not null"`
	Attempts      int        `gorm:"column:attempts;not null"`
	NextAttemptAt time.Time  `gorm:"column:next_attempt_at;not null"`
	LeaseOwner    string     `gorm:"column:lease_owner;size:64;not null"`
	LeaseUntil    *time.Time `gorm:"column:lease_until"`
	LastError     string     `gorm:"column:last_error;size:500;not null"`
	UpdatedAt     time.Time  `gorm:"column:updated_at;not null"`
}

func (migrationV1WebhookCursor) TableName() string { return "webhook_cursors" }

// DefaultOutboxRetention is how long an outbox row every cursor has
// passed is kept (PruneOutbox), and how long a cursor no instance
// touches (its URL no longer configured) outlives its last use.
const DefaultOutboxRetention = 7 * 24 * time.Hour

// maxWebhookError bounds LastError, in bytes.
const maxWebhookError = 300

func webhookKey(url string) string {
	h := sha256.Sum256([]byte(url))
	return hex.EncodeToString(h[:])
}

// clockIn is the SQL expression, for db's dialect, of the database's
// clock plus d (d ≥ 0), to the millisecond. On SQLite it is UTC text
// "YYYY-MM-DD HH:MM:SS.SSS", which compares as the time it names with
// SQLite's CURRENT_TIMESTAMP and datetime() (see cutoff); every time
// column of webhook_cursors is written with it.
func clockIn(db *gorm.DB, d time.Duration) string {
	ms := max(int64(d/time.Millisecond), 0)
	if db.Dialector.Name() == "postgres" {
		return fmt.Sprintf("(CURRENT_TIMESTAMP + INTERVAL '%d milliseconds')", ms)
	}
	return fmt.Sprintf("strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+%d.%03d seconds')", ms/1000, ms%1000)
}

// EnsureWebhookCursor creates the cursor of url unless it exists: a URL
// newly configured starts after the newest outbox row (it is sent the
// events that come after, not the backlog). Instances starting together
// create one cursor.
func (d *DB) EnsureWebhookCursor(ctx context.Context, url string) error {
	db := d.g.WithContext(ctx)
	now := clockIn(db, 0)
	// "WHERE 1 = 1" keeps SQLite from reading ON CONFLICT as a join's.
	return db.Exec(`INSERT INTO "webhook_cursors" ("url_key", "url", "last_event_id", "attempts", "next_attempt_at", "lease_owner", "last_error", "updated_at") `+
		`SELECT ?, ?, COALESCE(MAX("id"), 0), 0, `+now+`, '', '', `+now+` FROM "outbox_events" WHERE 1 = 1 `+
		`ON CONFLICT ("url_key") DO NOTHING`, webhookKey(url), clip(redact.HostOnly(url), 500)).Error
}

// ClaimWebhook takes (or renews) the lease on url's cursor for owner,
// until lease from now, if its next attempt is due and no other owner
// holds an unexpired lease; it returns the cursor and whether it got it.
func (d *DB) ClaimWebhook(ctx context.Context, url, owner string, lease time.Duration) (WebhookCursor, bool, error) {
	db := d.g.WithContext(ctx)
	now := clockIn(db, 0)
	key := webhookKey(url)
	res := db.Exec(`UPDATE "webhook_cursors" SET "lease_owner" = ?, "lease_until" = `+clockIn(db, lease)+`, "updated_at" = `+now+
		` WHERE "url_key" = ? AND "next_attempt_at" <= `+now+` AND ("lease_owner" = ? OR "lease_until" IS NULL OR "lease_until" < `+now+`)`,
		owner, key, owner)
	if res.Error != nil || res.RowsAffected == 0 {
		return WebhookCursor{}, false, res.Error
	}
	var c WebhookCursor
	if err := db.Where("url_key = ?", key).Take(&c).Error; err != nil {
		return WebhookCursor{}, false, err
	}
	return c, c.LeaseOwner == owner, nil
}

// OutboxAfter returns at most limit outbox rows after id, in id order.
func (d *DB) OutboxAfter(ctx context.Context, id uint64, limit int) ([]OutboxEvent, error) {
	var rows []OutboxEvent
	if err := d.g.WithContext(ctx).Where("id > ?", id).Order("id").Limit(limit).Find(&rows).Error; err != nil {
		return nil, err
	}
	for i := range rows {
		rows[i].CreatedAt = rows[i].CreatedAt.UTC()
	}
	return rows, nil
}

// AdvanceWebhook records that url's receiver took the outbox row
// eventID: the cursor moves to it (never back), the failures are
// forgotten and owner's lease is renewed for lease. It reports false when
// owner no longer holds the lease (another instance took the URL over).
func (d *DB) AdvanceWebhook(ctx context.Context, url, owner string, eventID uint64, lease time.Duration) (bool, error) {
	db := d.g.WithContext(ctx)
	now := clockIn(db, 0)
	res := db.Exec(`UPDATE "webhook_cursors" SET "last_event_id" = ?, "attempts" = 0, "last_error" = '', "next_attempt_at" = `+now+
		`, "lease_until" = `+clockIn(db, lease)+`, "updated_at" = `+now+
		` WHERE "url_key" = ? AND "lease_owner" = ? AND "last_event_id" < ?`,
		eventID, webhookKey(url), owner, eventID)
	return res.RowsAffected == 1, res.Error
}

// FailWebhook records a failed delivery to url by owner: one more
// attempt, the next one in retryIn, cause kept (cut to 300 bytes, control
// characters dropped; the caller words it without the URL, and the URL,
// raw or through redact.URL, is replaced by its name), and the lease
// given up.
func (d *DB) FailWebhook(ctx context.Context, url, owner string, retryIn time.Duration, cause string) error {
	db := d.g.WithContext(ctx)
	if url != "" {
		name := redact.HostOnly(url)
		cause = strings.ReplaceAll(strings.ReplaceAll(cause, url, name), redact.URL(url), name)
	}
	cause = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, clip(cause, maxWebhookError))
	return db.Exec(`UPDATE "webhook_cursors" SET "attempts" = "attempts" + 1, "next_attempt_at" = `+clockIn(db, retryIn)+
		`, "last_error" = ?, "lease_owner" = '', "lease_until" = NULL, "updated_at" = `+clockIn(db, 0)+
		` WHERE "url_key" = ? AND "lease_owner" = ?`, cause, webhookKey(url), owner).Error
}

// ReleaseWebhook gives up owner's lease on url (an instance shutting
// down), so that another instance may deliver at once.
func (d *DB) ReleaseWebhook(ctx context.Context, url, owner string) error {
	db := d.g.WithContext(ctx)
	return db.Exec(`UPDATE "webhook_cursors" SET "lease_owner" = '', "lease_until" = NULL, "updated_at" = `+clockIn(db, 0)+
		` WHERE "url_key" = ? AND "lease_owner" = ?`, webhookKey(url), owner).Error
}

// WebhookCursors returns every cursor, by id.
func (d *DB) WebhookCursors(ctx context.Context) ([]WebhookCursor, error) {
	var rows []WebhookCursor
	err := d.g.WithContext(ctx).Order("id").Find(&rows).Error
	return rows, err
}

// PruneOutbox deletes, by the database's clock, the cursors untouched
// for retention (URLs no instance is configured with any more), then the
// outbox rows older than retention that every remaining cursor has
// passed. Nothing when retention is not positive.
func (d *DB) PruneOutbox(ctx context.Context, retention time.Duration) error {
	if retention <= 0 {
		return nil
	}
	db := d.g.WithContext(ctx)
	old := cutoff(db, retention)
	if err := db.Exec(`DELETE FROM "webhook_cursors" WHERE "updated_at" < ` + old).Error; err != nil {
		return err
	}
	return db.Exec(`DELETE FROM "outbox_events" WHERE "created_at" < ` + old +
		` AND NOT EXISTS (SELECT 1 FROM "webhook_cursors" c WHERE c."last_event_id" < "outbox_events"."id")`).Error
}
