package refserver

// The reader of the change log (see refserver/store's changelog.go for
// what writes it and why rows are read in id order): each instance reads
// the rows past the last one it saw every changeInterval, and at once when
// PostgreSQL notifies a write, and drops the keys and directories they
// name.
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
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentid/agentid/refserver/store"
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
	// changePruneEvery is how often an instance prunes the rows past
	// the log's retention.
	changePruneEvery = time.Minute
)

// monoBase anchors monotonic timestamps kept as int64 nanoseconds.
var monoBase = time.Now()

func monoNow() time.Duration { return time.Since(monoBase) }

// changeFeed reads the change log for one instance and tells whether the
// instance's cached verdicts may be used.
type changeFeed struct {
	db      *store.DB
	log     *slog.Logger
	mono    func() time.Duration    // monotonic clock: the feed's bounds are real time
	apply   func([]store.KeyChange) // drops what the rows name
	purge   func()                  // drops every cached verdict
	manual  bool                    // tests: no background reader; Sync reads
	maxWait time.Duration           // bound of one read

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

func newChangeFeed(db *store.DB, log *slog.Logger, apply func([]store.KeyChange), purge func()) *changeFeed {
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
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.db.ListenChanges(ctx, wake)
	}()
	defer wg.Wait()
	defer cancel()
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
	err := f.read(ctx)
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
		f.db.PruneChanges(ctx)
	}
	return true
}

// read applies the rows past f.last, all of them (at most changeMaxPages
// pages), or fails.
func (f *changeFeed) read(ctx context.Context) error {
	if !f.started {
		// Nothing is cached yet (the first complete read purges): start
		// from the end of the log.
		last, err := f.db.LastChange(ctx)
		if err != nil {
			return err
		}
		f.last, f.started = last, true
		return nil
	}
	for range changeMaxPages {
		rows, err := f.db.ChangesAfter(ctx, f.last, changePage)
		if err != nil {
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
// (revoke, disable, enable, approve, reject) as this instance applies it, naming the agent,
// the key and who made the change; rotations and deletions are not logged
// here.
func (f *changeFeed) logOperatorChanges(rows []store.KeyChange) {
	for _, r := range rows {
		switch r.Change {
		case store.ChangeRevoke, store.ChangeDisable, store.ChangeEnable, store.ChangeApprove, store.ChangeReject:
			f.log.LogAttrs(context.Background(), slog.LevelInfo, "key change applied",
				slog.String("change", r.Change), slog.String("uid", r.AgentUID), slog.String("kid", r.Kid), slog.String("by", r.Actor))
		}
	}
}
