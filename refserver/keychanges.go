package refserver

// The change log: how every server instance learns, within 1 s, that a key
// or an agent it caches was changed through another instance or by an
// operator command, at a cost that does not grow with the number of agents.
//
// Every change that can make a cached verdict wrong (a rotation's revoked
// keys, an operator's revoke, disable or enable, a deletion) writes rows
// to key_changes in the transaction that makes it, one row per key it
// touches. Each instance reads the rows past the last one it saw with one
// indexed query per interval (changeInterval), whatever the number of
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
// deletes the rows older than changeRetention by the database's clock
// again. The clocks of the machines that write and prune (server
// instances, an operator's `idcli server keys revoke`) never enter it, so
// one an hour or more off cannot date a fresh row as old, or prune rows
// that readers have not read yet.
//
// Fail safe: a cached verdict is used only while the last complete read
// of the log began less than changeMaxStale (750 ms) ago. When the log
// cannot be read (a dropped connection, a slow database), lookups read the
// database each time, uncached, until a read succeeds, which then drops
// every cached verdict (changes it missed may have been pruned). So a
// change committed at t is applied everywhere before t + 750 ms + the
// time of one lookup, whatever happens to the reads of the log.

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

// Timing of the change log.
const (
	// changeInterval is how often an instance reads the change log.
	changeInterval = 250 * time.Millisecond
	// changeMaxStale is how old the last complete read of the log may be
	// for cached verdicts to be used.
	changeMaxStale = 3 * changeInterval
	// changeIdleStop stops the reader of an instance that has looked up
	// no key for this long; the next lookup starts it again (and finds
	// the cache stale until its first read).
	changeIdleStop = 5 * time.Second
	// changePage is how many rows one query of the log returns; a read
	// goes on with the next page while pages come back full, up to
	// changeMaxPages.
	changePage     = 1000
	changeMaxPages = 100
	// changeRetention is how long rows are kept; any instance prunes
	// older ones, at most once per changePruneEvery.
	changeRetention  = time.Hour
	changePruneEvery = time.Minute
)

// changeLogLock is the PostgreSQL advisory lock key that orders the
// writers of key_changes ("agentidk").
const changeLogLock int64 = 0x6167656e7469646b

// Kinds of change (key_changes.change).
const (
	changeRotate  = "rotate"  // a rotation revoked the key
	changeRevoke  = "revoke"  // an operator revoked the key
	changeDisable = "disable" // an operator disabled the agent
	changeEnable  = "enable"  // an operator enabled the agent again
	changeDelete  = "delete"  // the agent and its keys were deleted
	changeClaim   = "claim"   // the key's holder took an unproven key from the agent
)

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

// changeCutoff is the SQL expression, for db's dialect, of the oldest
// created_at a prune keeps: the database's clock less changeRetention.
// (SQLite's CURRENT_TIMESTAMP and datetime() are both UTC text
// "YYYY-MM-DD HH:MM:SS", which compares as the time it names with rows
// gorm wrote in its own, longer, UTC form.)
func changeCutoff(db *gorm.DB) string {
	secs := int64(changeRetention / time.Second)
	if db.Dialector.Name() == "postgres" {
		return fmt.Sprintf("CURRENT_TIMESTAMP - INTERVAL '%d seconds'", secs)
	}
	return fmt.Sprintf("datetime('now', '-%d seconds')", secs)
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

// monoBase anchors monotonic timestamps kept as int64 nanoseconds.
var monoBase = time.Now()

func monoNow() time.Duration { return time.Since(monoBase) }

// changeFeed reads the change log for one instance and tells whether the
// instance's cached verdicts may be used.
type changeFeed struct {
	db      *gorm.DB
	log     *slog.Logger
	mono    func() time.Duration // monotonic clock: the feed's bounds are real time
	apply   func([]KeyChange)    // drops what the rows name
	purge   func()               // drops every cached verdict
	manual  bool                 // tests: no background reader; Sync reads
	maxWait time.Duration        // bound of one read

	running atomic.Bool
	reads   atomic.Int64  // complete reads (tests)
	every   time.Duration // interval of the reads (changeInterval; tests change it)
	closed  atomic.Bool   // Close was called: no reader runs again
	done    chan struct{} // closed by Close
	runMu   sync.Mutex    // held by the reader while it runs (Close waits on it)
	lastUse atomic.Int64  // mono: last lookup that wanted the feed
	synced  atomic.Int64  // mono: start of the last complete read; math.MinInt64 before one

	mu        sync.Mutex    // serialises reads
	last      uint64        // id of the last row read
	started   bool          // last is set
	failing   bool          // the last read failed (logged once)
	lastPrune time.Duration // mono: last prune; only once pruned is set
	pruned    bool
}

func newChangeFeed(db *gorm.DB, log *slog.Logger, apply func([]KeyChange), purge func()) *changeFeed {
	f := &changeFeed{db: db, log: log, mono: monoNow, apply: apply, purge: purge, maxWait: changeMaxStale, done: make(chan struct{}), every: changeInterval}
	f.synced.Store(math.MinInt64)
	return f
}

// fresh reports whether cached verdicts may be used now: the last
// complete read of the log began less than changeMaxStale ago. It also
// keeps the background reader running.
func (f *changeFeed) fresh() bool {
	now := f.mono()
	if !f.manual {
		if now-time.Duration(f.lastUse.Load()) > changeInterval {
			f.lastUse.Store(int64(now))
		}
		if !f.running.Load() && !f.closed.Load() && f.running.CompareAndSwap(false, true) {
			f.lastUse.Store(int64(now))
			go f.run()
		}
	}
	s := f.synced.Load()
	return s != math.MinInt64 && now-time.Duration(s) < changeMaxStale
}

// run reads the log every changeInterval until no lookup has wanted it
// for changeIdleStop.
func (f *changeFeed) run() {
	defer f.running.Store(false)
	f.runMu.Lock()
	defer f.runMu.Unlock()
	if f.closed.Load() {
		return
	}
	wake := make(chan struct{}, 1)
	if f.db.Dialector.Name() == "postgres" {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.listen(ctx, wake)
		}()
		defer wg.Wait()
		defer cancel()
	}
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		f.Sync(context.Background())
		if f.mono()-time.Duration(f.lastUse.Load()) > changeIdleStop {
			return
		}
		select {
		case <-t.C:
		case <-wake:
		case <-f.done:
			return
		}
	}
}

// listen holds one PostgreSQL connection listening on changeChannel and
// signals wake at each notification, until ctx is done; a lost
// connection is replaced after a second.
func (f *changeFeed) listen(ctx context.Context, wake chan<- struct{}) {
	for {
		if errors.Is(f.listenOnce(ctx, wake), errNotPgx) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

var errNotPgx = errors.New("refserver: the database connection is not pgx's")

func (f *changeFeed) listenOnce(ctx context.Context, wake chan<- struct{}) error {
	sqlDB, err := f.db.DB()
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

// Close stops the background reader for good and waits for it to end
// (lookups then read the database each time once the last read is 750 ms
// old).
func (f *changeFeed) Close() {
	if f.closed.CompareAndSwap(false, true) {
		close(f.done)
	}
	f.runMu.Lock()
	defer f.runMu.Unlock()
}

// Sync reads the rows of the log past the last one read and applies them.
// A read after a stale period (or the first) drops every cached verdict.
// It reports whether the read completed.
func (f *changeFeed) Sync(ctx context.Context) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	start := f.mono()
	ctx, cancel := context.WithTimeout(ctx, f.maxWait)
	defer cancel()
	db := f.db.WithContext(ctx)
	err := f.read(db)
	if err != nil {
		if !f.failing && !f.closed.Load() { // not the database closed after Close
			f.failing = true
			f.log.LogAttrs(ctx, slog.LevelWarn, "key change log unreadable: cached keys are not used (each lookup reads the database) until it is read again",
				slog.String("cause", err.Error()))
		}
		return false
	}
	if f.failing {
		f.failing = false
		f.log.LogAttrs(ctx, slog.LevelInfo, "key change log read again: cached keys are used again")
	}
	if s := f.synced.Load(); s == math.MinInt64 || start-time.Duration(s) >= changeMaxStale {
		f.purge()
	}
	f.synced.Store(int64(start))
	f.reads.Add(1)
	// The first complete read prunes.
	if !f.pruned || start-f.lastPrune >= changePruneEvery {
		f.pruned, f.lastPrune = true, start
		// Best effort: a failed prune is tried again next time.
		db.Where("created_at < " + changeCutoff(db)).Delete(&KeyChange{})
	}
	return true
}

// read applies the rows past f.last, all of them (at most changeMaxPages
// pages), or fails.
func (f *changeFeed) read(db *gorm.DB) error {
	if !f.started {
		// Nothing is cached yet (the first complete read purges): start
		// from the end of the log.
		var last *uint64
		if err := db.Model(&KeyChange{}).Select("MAX(id)").Scan(&last).Error; err != nil {
			return err
		}
		if last != nil {
			f.last = *last
		}
		f.started = true
		return nil
	}
	for range changeMaxPages {
		var rows []KeyChange
		if err := db.Select("id", "kid", "agent_uid", "change", "actor").Where("id > ?", f.last).Order("id").Limit(changePage).Find(&rows).Error; err != nil {
			return err
		}
		if len(rows) > 0 {
			f.logOperatorChanges(rows)
			f.apply(rows)
			f.last = rows[len(rows)-1].ID
		}
		if len(rows) < changePage {
			return nil
		}
	}
	return errChangeBacklog
}

var errChangeBacklog = errors.New("refserver: more than 100,000 key changes to read at once")

// logOperatorChanges writes one line per operator's change among rows
// (revoke, disable, enable) as this instance applies it, naming the agent,
// the key and who made the change; rotations and deletions are not logged
// here.
func (f *changeFeed) logOperatorChanges(rows []KeyChange) {
	for _, r := range rows {
		switch r.Change {
		case changeRevoke, changeDisable, changeEnable:
			f.log.LogAttrs(context.Background(), slog.LevelInfo, "key change applied",
				slog.String("change", r.Change), slog.String("uid", r.AgentUID), slog.String("kid", r.Kid), slog.String("by", r.Actor))
		}
	}
}
