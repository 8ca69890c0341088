package store

import (
	"context"
	"fmt"
	"math"
	"time"

	"gorm.io/gorm"
)

// AuditQuery selects rows of the audit trail (see Audit). Empty fields
// select everything.
type AuditQuery struct {
	AgentUID string    // the agent the change is about
	Kid      string    // the key the change is about
	Action   string    // one of the Action… constants
	Actor    string    // exactly as recorded
	Since    time.Time // at or after (the database's clock)
	// InvitationID selects the rows about this invitation token: its
	// creation, its revocation and the registrations that spent it.
	InvitationID uint64
	// Before is a cursor: only rows with a smaller id (0: from the newest).
	Before uint64
	// Limit caps the rows returned (1 to MaxAuditPage; 0: 100).
	Limit int
}

// Actions returns every action of the audit trail (AuditQuery.Action).
func Actions() []string {
	return []string{ActionRegister, ActionApprove, ActionReject, ActionDisable, ActionEnable, ActionDelete,
		ActionKeyAdd, ActionKeyRotate, ActionKeyRevoke, ActionKeyClaim, ActionRefresh,
		ActionInviteCreate, ActionInviteRevoke, ActionOperatorCreate, ActionOperatorRevoke, ActionOperatorUsed}
}

// MaxAuditPage is the largest AuditQuery.Limit.
const MaxAuditPage = 1000

// Audit returns the rows of the audit trail q selects, newest first. The
// next page is q with Before set to the last row's ID.
func (d *DB) Audit(ctx context.Context, q AuditQuery) ([]AuditEvent, error) {
	limit := q.Limit
	switch {
	case limit == 0:
		limit = 100
	case limit < 0 || limit > MaxAuditPage:
		return nil, fmt.Errorf("%w: an audit page holds 1 to %d rows", ErrInvalidQuery, MaxAuditPage)
	}
	if q.Before > math.MaxInt64 {
		return nil, fmt.Errorf("%w: before %d is above %d", ErrInvalidQuery, q.Before, uint64(math.MaxInt64))
	}
	if q.InvitationID > math.MaxInt64 {
		return nil, fmt.Errorf("%w: invitation id %d is above %d", ErrInvalidQuery, q.InvitationID, uint64(math.MaxInt64))
	}
	db := d.g.WithContext(ctx).Order("id DESC").Limit(limit)
	for col, v := range map[string]string{"agent_uid": q.AgentUID, "kid": q.Kid, "action": q.Action, "actor": q.Actor} {
		if v != "" {
			db = db.Where(col+" = ?", v)
		}
	}
	if !q.Since.IsZero() {
		db = db.Where("created_at >= ?", q.Since.UTC())
	}
	if q.Before > 0 {
		db = db.Where("id < ?", q.Before)
	}
	if q.InvitationID > 0 {
		db = db.Where("invitation_id = ?", q.InvitationID)
	}
	var rows []AuditEvent
	if err := db.Find(&rows).Error; err != nil {
		return nil, err
	}
	for i := range rows {
		rows[i].CreatedAt = rows[i].CreatedAt.UTC()
	}
	return rows, nil
}

// DefaultAuditRetention is how long the audit trail is kept unless the
// operator says otherwise.
const DefaultAuditRetention = 365 * 24 * time.Hour

// PruneAudit deletes the rows of the audit trail older than retention by
// the database's clock (nothing when retention is not positive).
func (d *DB) PruneAudit(ctx context.Context, retention time.Duration) error {
	if retention <= 0 {
		return nil
	}
	db := d.g.WithContext(ctx)
	return db.Where("created_at < " + cutoff(db, retention)).Delete(&AuditEvent{}).Error
}

// cutoff is the SQL expression, for db's dialect, of the database's clock
// less age. (SQLite's CURRENT_TIMESTAMP and datetime() are both UTC text
// "YYYY-MM-DD HH:MM:SS", which compares as the time it names with rows
// gorm wrote in its own, longer, UTC form.)
func cutoff(db *gorm.DB, age time.Duration) string {
	secs := int64(age / time.Second)
	if db.Dialector.Name() == "postgres" {
		return fmt.Sprintf("CURRENT_TIMESTAMP - INTERVAL '%d seconds'", secs)
	}
	return fmt.Sprintf("datetime('now', '-%d seconds')", secs)
}
