package store

// The change log: how every server instance learns, within 1 s, that a key
// or an agent it caches was changed through another instance or by an
// operator command, at a cost that does not grow with the number of agents.
//
// Every change that can make a cached verdict wrong (a rotation's revoked
// keys, an operator's revoke, disable, enable, approval or rejection, a
// deletion) writes rows
// to key_changes in the transaction that makes it, one row per key it
// touches. Each instance reads the rows past the last one it saw with one
// indexed query per interval (refserver's key source reads it every 250 ms), whatever the number of
// agents or keys it caches, and drops the keys and directories they name.
// Cached keys then live until a change names them (or the bounded cache
// evicts them). On PostgreSQL a writer also NOTIFYs changeChannel, and each
// instance's reader holds one connection LISTENing on it, so a change is
// usually read within milliseconds; a notification is only a hint (a lost
// one, or a dropped listening connection, delays a reader to its next
// interval), and nothing below depends on it.
//
// Rows must become visible in id order, or a reader that saw id 11 would
// never see an id 10 committed later. SQLite has one writer at a time, so
// they do; on PostgreSQL, where ids are taken from a sequence before
// commit, every writer of the log takes one transaction-scoped advisory
// lock before it inserts, held until its commit, so the writers of the
// log commit one after another in id order.
//
// Rows are dated and pruned by the database's clock alone: created_at is
// the database's CURRENT_TIMESTAMP when the row is written, and a prune
// deletes the rows older than an hour (changeRetention) by the database's clock
// again. The clocks of the machines that write and prune (server
// instances, an operator's `idcli server keys revoke`) never enter it, so
// one an hour or more off cannot date a fresh row as old, or prune rows
// that readers have not read yet.
//
// Fail safe: a cached verdict is used only while the last complete read
// of the log began less than 750 ms ago. When the log
// cannot be read (a dropped connection, a slow database), lookups read the
// database each time, uncached, until a read succeeds, which then drops
// every cached verdict (changes it missed may have been pruned). So a
// change committed at t is applied everywhere before t + 750 ms + the
// time of one lookup, whatever happens to the reads of the log.

import (
	"context"
	"database/sql/driver"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

// changeLogLock is the PostgreSQL advisory lock key that orders the
// writers of key_changes ("agentidk").
const changeLogLock int64 = 0x6167656e7469646b

// Kinds of change (KeyChange.Change).
const (
	ChangeRotate  = "rotate"  // a rotation revoked the key
	ChangeRevoke  = "revoke"  // an operator revoked the key
	ChangeDisable = "disable" // an operator disabled the agent
	ChangeEnable  = "enable"  // an operator enabled the agent again
	ChangeDelete  = "delete"  // the agent and its keys were deleted
	ChangeClaim   = "claim"   // the key's holder took an unproven key from the agent
	ChangeApprove = "approve" // an operator let the pending agent in
	ChangeReject  = "reject"  // an operator refused the pending agent
)

// changeRetention is how long rows of the change log are kept (see
// PruneChanges).
const changeRetention = time.Hour

// logChanges writes rows to the change log within tx, the transaction
// that makes the change; call it last in the transaction, since on
// PostgreSQL it takes the lock that orders the log's writers until the
// commit.
func logChanges(tx *gorm.DB, rows []KeyChange) error {
	if len(rows) == 0 {
		return nil
	}
	if err := lockChangeLog(tx); err != nil {
		return err
	}
	if err := insertChanges(tx, rows); err != nil {
		return err
	}
	if tx.Dialector.Name() == "postgres" {
		// Delivered at commit: wakes every instance's reader early.
		return tx.Exec("SELECT pg_notify(?, '')", changeChannel).Error
	}
	return nil
}

// changeBatch is how many rows of the change log one INSERT writes (four
// bound values each, far below the drivers' limits).
const changeBatch = 500

// insertChanges writes rows (their Kid, AgentUID, Change and Actor) within
// tx, each dated by the database's clock; the rows' ID and CreatedAt are
// not read.
func insertChanges(tx *gorm.DB, rows []KeyChange) error {
	for len(rows) > 0 {
		batch := rows[:min(len(rows), changeBatch)]
		rows = rows[len(batch):]
		var q strings.Builder
		q.WriteString(`INSERT INTO "key_changes" ("kid", "agent_uid", "change", "actor", "created_at") VALUES `)
		vars := make([]any, 0, 4*len(batch))
		for i, r := range batch {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, CURRENT_TIMESTAMP)")
			vars = append(vars, r.Kid, r.AgentUID, r.Change, r.Actor)
		}
		if err := tx.Exec(q.String(), vars...).Error; err != nil {
			return err
		}
	}
	return nil
}

// changeChannel is the PostgreSQL notification channel on which writers
// of the change log wake its readers. A notification is only a hint to
// read now: a lost one delays a reader to its next interval, and the
// freshness bound holds without any.
const changeChannel = "agentid_key_changes"

// lockChangeLog takes, on PostgreSQL, the transaction-scoped lock that
// orders the writers of the change log.
func lockChangeLog(tx *gorm.DB) error {
	if tx.Dialector.Name() != "postgres" {
		return nil
	}
	return tx.Exec("SELECT pg_advisory_xact_lock(?)", changeLogLock).Error
}

// LastChange returns the id of the newest row of the change log (0 when
// it is empty): a reader that caches nothing yet starts after it.
func (d *DB) LastChange(ctx context.Context) (uint64, error) {
	var last *uint64
	if err := d.g.WithContext(ctx).Model(&KeyChange{}).Select("MAX(id)").Scan(&last).Error; err != nil {
		return 0, err
	}
	if last == nil {
		return 0, nil
	}
	return *last, nil
}

// ChangesAfter returns at most limit rows of the change log past id, in id
// order (their ID, Kid, AgentUID, Change and Actor).
func (d *DB) ChangesAfter(ctx context.Context, id uint64, limit int) ([]KeyChange, error) {
	var rows []KeyChange
	err := d.g.WithContext(ctx).Select("id", "kid", "agent_uid", "change", "actor").
		Where("id > ?", id).Order("id").Limit(limit).Find(&rows).Error
	return rows, err
}

// PruneChanges deletes the rows of the change log older than an hour by
// the database's clock.
func (d *DB) PruneChanges(ctx context.Context) error {
	db := d.g.WithContext(ctx)
	return db.Where("created_at < " + cutoff(db, changeRetention)).Delete(&KeyChange{}).Error
}

// ListenChanges signals wake at each notification that the change log
// was written, until ctx is done: on PostgreSQL it holds one connection
// listening on changeChannel (a lost one is replaced after a second); on
// SQLite, whose writers notify nobody, it returns at once. A notification
// is only a hint to read the log now.
func (d *DB) ListenChanges(ctx context.Context, wake chan<- struct{}) {
	if d.g.Dialector.Name() != "postgres" {
		return
	}
	for {
		if errors.Is(d.listenOnce(ctx, wake), errNotPgx) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

var errNotPgx = errors.New("store: the database connection is not pgx's")

func (d *DB) listenOnce(ctx context.Context, wake chan<- struct{}) error {
	sqlDB, err := d.g.DB()
	if err != nil {
		return err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNotPgx
		}
		pc := sc.Conn()
		// The connection leaves the pool for good (driver.ErrBadConn):
		// it listens, and is closed when this returns.
		if _, err := pc.Exec(ctx, "LISTEN "+changeChannel); err != nil {
			return driver.ErrBadConn
		}
		for {
			if _, err := pc.WaitForNotification(ctx); err != nil {
				return driver.ErrBadConn
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	})
}
