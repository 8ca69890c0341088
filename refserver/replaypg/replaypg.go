// Package replaypg is a middleware.ReplayStore in the reference server's SQL
// database (PostgreSQL, or the embedded SQLite), so that several server
// instances on one database reject a nonce that any of them has accepted.
//
//	store, err := replaypg.New(replaypg.Config{DB: db})
//	stop := store.Start(ctx) // purges expired rows in the background
//	defer stop()
//	mw := middleware.New(middleware.Config{Keys: keys, Authorities: []string{"api.example.com"}, Replay: store})
//
// The table comes from the reference server's own migrations
// (refserver.Migrate). Each row holds the SHA-256 digest of a replay key
// (32 bytes) and its expiry, never the key itself, so a row has one size
// whatever the length of the nonce.
package replaypg

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

// TableName is the table the store uses. The reference server's migrations
// create it (refserver.Migrate); this package only reads and writes it.
const TableName = "replay_nonces"

// Defaults applied by New.
const (
	DefaultPurgeInterval = time.Minute
	DefaultPurgeBatch    = 5000
	DefaultTimeout       = 3 * time.Second
	DefaultLinger        = 500 * time.Microsecond
	// MinTTL is the shortest time a row is kept: an expiry closer than this
	// (or in the past) is moved to now+MinTTL, as the in-memory store does.
	MinTTL = time.Second
)

// Config configures a Store. The zero value of each field but DB is a
// working default.
type Config struct {
	// DB is the database holding replay_nonces (migrated). Required.
	DB *gorm.DB
	// Now is the clock used to decide whether a row has expired. If nil,
	// time.Now is used. Instances sharing a database should have their
	// clocks in sync (within the verifier's skew).
	Now func() time.Time
	// Timeout bounds each Seen call (on top of the caller's ctx). If 0,
	// DefaultTimeout (3 s).
	Timeout time.Duration
	// PurgeInterval is how often Start's loop deletes expired rows. If 0,
	// DefaultPurgeInterval (1 min).
	PurgeInterval time.Duration
	// PurgeBatch is how many rows one DELETE removes at most. If 0,
	// DefaultPurgeBatch (5000).
	PurgeBatch int
	// Logger receives purge failures. If nil, they are discarded.
	Logger *slog.Logger
	// MaxFlights bounds the Seen statements in flight at once. One runs
	// whenever a call waits; another starts only while a full batch
	// (MaxBatch keys) is waiting. If 0, 4.
	MaxFlights int
	// MaxBatch bounds the keys of one statement. If 0, 256.
	MaxBatch int
	// ObserveStatement, if set, receives the duration of each statement
	// Seen runs on PostgreSQL's driver directly (the gorm path is timed by
	// whatever callbacks the gorm.DB has), so that a database metric of
	// every statement still counts the replay inserts.
	ObserveStatement func(time.Duration)
	// Linger is how long a statement that would carry few keys (fewer
	// than LingerBatch) may wait for more, counted from the arrival of
	// the oldest call in it, while concurrent calls arrive more often
	// than once per 2×Linger. It trades at most Linger of latency at
	// moderate load for fewer commits; an isolated call (the first after
	// a pause longer than 2×Linger) never waits, nor does a single
	// sequential caller. If 0, DefaultLinger (500 µs); negative: never
	// wait.
	Linger time.Duration
	// LingerBatch is the batch size at which a lingering statement stops
	// waiting (or fewer: as many calls as were recently in Seen at
	// once, since a few callers that each wait for an answer before
	// calling again cannot add more). If 0, 8.
	LingerBatch int
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.DB == nil {
		return errors.New("replaypg: Config.DB is required")
	}
	if c.Timeout < 0 || c.PurgeInterval < 0 || c.PurgeBatch < 0 || c.MaxFlights < 0 || c.MaxBatch < 0 || c.LingerBatch < 0 {
		return errors.New("replaypg: Config.Timeout, PurgeInterval, PurgeBatch, MaxFlights, MaxBatch and LingerBatch must not be negative")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.PurgeInterval = cmp.Or(c.PurgeInterval, DefaultPurgeInterval)
	c.PurgeBatch = cmp.Or(c.PurgeBatch, DefaultPurgeBatch)
	c.MaxFlights = cmp.Or(c.MaxFlights, 4)
	c.MaxBatch = cmp.Or(c.MaxBatch, 256)
	c.Linger = cmp.Or(c.Linger, DefaultLinger)
	c.LingerBatch = min(cmp.Or(c.LingerBatch, 8), c.MaxBatch)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Store is a middleware.ReplayStore on the replay_nonces table. It is safe
// for concurrent use.
type Store struct {
	cfg Config
	// pg is the pool under Config.DB when it is PostgreSQL: Seen's
	// statement then runs on the pooled pgx connection directly (nil:
	// through gorm). noPgx is set when a pooled connection turns out not
	// to be pgx's, after which gorm is used.
	pg    *sql.DB
	noPgx atomic.Bool
	stmts atomic.Int64 // statements run by Seen, for the benchmarks

	mu        sync.Mutex
	pending   []*seenReq
	flights   int
	last      time.Duration // arrival of the latest call (since epoch)
	gap       time.Duration // moving average of the time between calls
	overlap   int           // moving average, in 1/1024, of calls that found another in Seen
	peak      int           // recent peak of calls in Seen, in 1/64, decaying by 1/64 a call
	inside    atomic.Int32  // calls in Seen
	lingering bool          // a flight waits on wake for more calls
	wake      chan struct{}
}

var _ middleware.ReplayStore = (*Store)(nil)

// epoch anchors the monotonic arrival times used to decide on lingering.
var epoch = time.Now()

// New validates cfg and returns a Store. It does not touch the database.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The first call comes after an endless pause: it never lingers.
	s := &Store{cfg: cfg.withDefaults(), wake: make(chan struct{}, 1), gap: time.Second, last: -1 << 62}
	if db := cfg.DB; db.Config != nil && db.Dialector != nil && db.Dialector.Name() == "postgres" {
		s.pg, _ = db.ConnPool.(*sql.DB)
	}
	return s, nil
}

// insertSQL starts the statement that inserts each key's digest, or revives
// a row whose expiry has passed; an unexpired row is left alone, and
// RETURNING names the rows inserted or revived (the keys not seen before).
// One statement, so it is atomic on PostgreSQL (the primary key serialises
// concurrent inserts) and on SQLite (single writer); both accept this
// upsert syntax.
const (
	insertSQL     = `INSERT INTO replay_nonces (key_hash, expires_at) VALUES `
	onConflictSQL = ` ON CONFLICT (key_hash) DO UPDATE SET expires_at = excluded.expires_at ` +
		`WHERE replay_nonces.expires_at < ? RETURNING key_hash`
)

// unnestSQL is the same upsert on PostgreSQL with the keys as two arrays:
// one statement text whatever the batch size, so each connection prepares
// it once and reuses its plan.
const unnestSQL = `INSERT INTO replay_nonces (key_hash, expires_at) ` +
	`SELECT * FROM unnest($1::bytea[], $2::timestamptz[]) ` +
	`ON CONFLICT (key_hash) DO UPDATE SET expires_at = excluded.expires_at ` +
	`WHERE replay_nonces.expires_at < $3 RETURNING key_hash`

// digest is the stored form of a replay key.
type digest = [sha256.Size]byte

// keyHash binds a digest as one bytea/blob value (a bare []byte after "("
// in a raw statement would be expanded into one value per byte).
type keyHash digest

// Value implements driver.Valuer.
func (h keyHash) Value() (driver.Value, error) { return h[:], nil }

// Seen implements middleware.ReplayStore: it records the SHA-256 digest of
// key until expiry and reports whether an unexpired record already existed.
// Of concurrent calls with one key exactly one reports false. Database
// errors wrap middleware.ErrReplayStore.
//
// Concurrent calls are grouped: a statement inserts every key waiting at
// the time it starts (at most MaxBatch), so under load the database sees
// one statement and one commit per batch instead of per request. A lone
// call (no statement running, and none arrived within 2×Config.Linger
// before it) runs its own statement on its own goroutine at once: no
// other goroutine is woken, and nothing waits for a batch to fill. The
// calls that arrive while a statement runs make the next batch: batches
// grow with the load, and each commit (a WAL flush on PostgreSQL) serves
// more calls. At a moderate rate (concurrent calls, more often than once
// per 2×Linger, yet too few per statement round trip to batch by
// themselves) a batch of
// fewer than LingerBatch calls waits until its oldest call is Linger old
// or the batch reaches LingerBatch (or the recent peak of calls in Seen
// at once, if smaller), whichever comes first. More
// statements (up to MaxFlights) run side by side only while a full batch
// is waiting. When a batch's statement fails, each of its keys is tried
// again alone, so one failing key (or a failure that hit the batch by
// chance) fails only the calls it belongs to.
func (s *Store) Seen(ctx context.Context, key string, expiry time.Time) (bool, error) {
	r := &seenReq{sum: sha256.Sum256([]byte(key)), expiry: expiry.UTC(), at: time.Since(epoch)}
	inside := int(s.inside.Add(1))
	others := inside > 1
	defer s.inside.Add(-1)
	s.mu.Lock()
	gap := r.at - s.last
	s.last = r.at
	s.gap += (min(gap, time.Second) - s.gap) / 8
	s.peak = max(inside*64, s.peak-s.peak/64)
	if others {
		s.overlap += (1024 - s.overlap) / 8
	} else {
		s.overlap -= s.overlap / 8
	}
	if s.flights == 0 {
		// No statement runs (so none is pending): this call's statement
		// is the flight. The calls arriving meanwhile make the next batch,
		// which a goroutine of its own runs if there is one.
		s.flights++
		if !s.dense(gap) {
			s.mu.Unlock()
			seen, err := s.lone(ctx, r)
			s.land()
			return seen, err
		}
		// Concurrent calls are arriving densely: this one leads a batch
		// that waits a little for them.
		r.done = make(chan seenRes, 1)
		s.pending = append(s.pending, r)
		batch := s.take()
		s.mu.Unlock()
		if batch != nil {
			s.runBatch(batch)
		}
		s.land()
	} else {
		r.done = make(chan seenRes, 1)
		s.pending = append(s.pending, r)
		if s.flights < s.cfg.MaxFlights && len(s.pending) >= s.cfg.MaxBatch {
			s.flights++
			go s.flight()
		}
		if s.lingering && len(s.pending) >= s.lingerBatch() {
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
		s.mu.Unlock()
	}
	select {
	case res := <-r.done:
		return res.seen, res.err
	case <-ctx.Done():
		return false, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, ctx.Err())
	}
}

// dense reports whether calls arrive often enough that a small batch
// should wait for more: both the call that just came (gap after the one
// before it) and the recent average are within 2×Config.Linger (so a wait
// of Linger can expect at least half a call more), and calls overlap (at
// least a quarter of the recent ones found another call in Seen). A
// single caller whose calls follow one another closely never overlaps:
// waiting would gain it nothing. s.mu is held.
func (s *Store) dense(gap time.Duration) bool {
	l := 2 * s.cfg.Linger
	return l > 0 && gap <= l && s.gap <= l && s.overlap >= 256
}

// land ends the statement of a call that led a flight: the calls that
// arrived meanwhile get a flight goroutine of their own.
func (s *Store) land() {
	s.mu.Lock()
	if len(s.pending) > 0 {
		go s.flight()
	} else {
		s.flights--
	}
	s.mu.Unlock()
}

// lone inserts r's digest in a statement of its own, within ctx and
// Config.Timeout, and reports whether an unexpired record existed.
func (s *Store) lone(ctx context.Context, r *seenReq) (bool, error) {
	now := s.cfg.Now().UTC()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	fresh, err := s.insert(ctx, now, []*seenReq{r})
	if err != nil {
		return false, err
	}
	return !fresh[0], nil
}

type seenReq struct {
	sum    digest
	expiry time.Time
	at     time.Duration // arrival, since epoch
	done   chan seenRes
}

type seenRes struct {
	seen bool
	err  error
}

// flight runs batches until no call is waiting.
func (s *Store) flight() {
	s.mu.Lock()
	for {
		batch := s.take()
		if batch == nil {
			s.flights--
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		s.runBatch(batch)
		s.mu.Lock()
	}
}

// lingerBatch is the batch size at which lingering stops: LingerBatch, or
// fewer when fewer calls have recently been in Seen at once (a few
// callers each waiting for its answer before the next call: once all of
// them wait, no one else will come). s.mu is held.
func (s *Store) lingerBatch() int {
	return min(s.cfg.LingerBatch, (s.peak+63)/64)
}

// take removes the next batch (at most MaxBatch calls) from pending, or
// returns nil if none is waiting. A batch smaller than LingerBatch, taken
// by the only flight while calls arrive densely, first waits until its
// oldest call is Linger old or LingerBatch calls wait. s.mu is held on
// entry and on return (and released while waiting).
func (s *Store) take() []*seenReq {
	if len(s.pending) == 0 {
		return nil
	}
	if s.flights == 1 && len(s.pending) < s.lingerBatch() && s.dense(0) {
		if wait := s.pending[0].at + s.cfg.Linger - time.Since(epoch); wait > 0 {
			s.lingering = true
			s.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-s.wake:
			}
			t.Stop()
			s.mu.Lock()
			s.lingering = false
			select { // a signal sent after the timer fired
			case <-s.wake:
			default:
			}
		}
	}
	n := min(len(s.pending), s.cfg.MaxBatch)
	batch := make([]*seenReq, n)
	copy(batch, s.pending)
	rest := copy(s.pending, s.pending[n:])
	clear(s.pending[rest:])
	s.pending = s.pending[:rest]
	return batch
}

// runBatch inserts the batch's distinct digests in one statement and
// answers every call in it. It sorts batch by digest (so concurrent
// statements lock rows in one order); a digest twice in one batch is new
// at most once, for the call that came first. If the statement fails and
// the batch holds more than one distinct digest, each is inserted again in
// a statement of its own (within the same deadline), and only the calls
// whose own statement fails get an error.
func (s *Store) runBatch(batch []*seenReq) {
	now := s.cfg.Now().UTC()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()

	slices.SortStableFunc(batch, func(a, b *seenReq) int { return bytes.Compare(a.sum[:], b.sum[:]) })
	distinct := make([]*seenReq, 0, len(batch))
	for i, r := range batch {
		if i == 0 || r.sum != batch[i-1].sum {
			distinct = append(distinct, r)
		}
	}
	fresh, err := s.insert(ctx, now, distinct)
	var errs []error // the error of each distinct digest whose insert failed
	switch {
	case err == nil:
	case len(distinct) == 1:
		errs = []error{err}
	default:
		fresh = make([]bool, len(distinct))
		errs = make([]error, len(distinct))
		for i, r := range distinct {
			one, err := s.insert(ctx, now, []*seenReq{r})
			if err != nil {
				errs[i] = err
				continue
			}
			fresh[i] = one[0]
		}
	}
	d := -1 // index in distinct of batch[i]'s digest
	for i, r := range batch {
		first := i == 0 || r.sum != batch[i-1].sum
		if first {
			d++
		}
		switch {
		case errs != nil && errs[d] != nil:
			r.done <- seenRes{err: errs[d]}
		case first:
			r.done <- seenRes{seen: !fresh[d]}
		default: // a later copy in the batch is seen
			r.done <- seenRes{seen: true}
		}
	}
}

// errNotPgx: a pooled PostgreSQL connection is not pgx's.
var errNotPgx = errors.New("replaypg: not a pgx connection")

// insert runs one upsert of reqs' digests (distinct, sorted) and reports
// for each whether it was inserted or revived. Errors wrap
// middleware.ErrReplayStore.
func (s *Store) insert(ctx context.Context, now time.Time, reqs []*seenReq) ([]bool, error) {
	s.stmts.Add(1)
	if s.pg != nil && !s.noPgx.Load() {
		fresh, err := s.insertPgx(ctx, now, reqs)
		if !errors.Is(err, errNotPgx) {
			return fresh, err
		}
		s.noPgx.Store(true)
	}
	if len(reqs) == 1 {
		return s.insertOne(ctx, now, reqs[0])
	}
	var sb strings.Builder
	sb.Grow(len(insertSQL) + 8*len(reqs) + len(onConflictSQL))
	sb.WriteString(insertSQL)
	args := make([]any, 0, 2*len(reqs)+1)
	for i, r := range reqs {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("(?, ?)")
		args = append(args, keyHash(r.sum), keptUntil(r, now))
	}
	sb.WriteString(onConflictSQL)
	args = append(args, now)

	rows, err := s.cfg.DB.WithContext(ctx).Raw(sb.String(), args...).Rows()
	if err != nil {
		return nil, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, err)
	}
	defer rows.Close()
	fresh := make([]bool, len(reqs))
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, err)
		}
		if err := markFresh(reqs, fresh, b); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, err)
	}
	return fresh, nil
}

// insertPgx is insert on PostgreSQL through pgx on a pooled connection:
// unnestSQL, prepared once per connection, with the digests and expiries
// as two arrays. pgx follows ctx without a goroutine of its own (a
// database/sql query with rows to read would start one).
func (s *Store) insertPgx(ctx context.Context, now time.Time, reqs []*seenReq) ([]bool, error) {
	hashes := make([][]byte, len(reqs))
	expiries := make([]time.Time, len(reqs))
	for i, r := range reqs {
		hashes[i] = r.sum[:]
		expiries[i] = keptUntil(r, now)
	}
	fresh := make([]bool, len(reqs))
	conn, err := s.pg.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, err)
	}
	defer conn.Close()
	if observe := s.cfg.ObserveStatement; observe != nil {
		defer func(start time.Time) { observe(time.Since(start)) }(time.Now())
	}
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNotPgx
		}
		rows, err := c.Conn().Query(ctx, unnestSQL, hashes, expiries, now)
		if err != nil {
			return err
		}
		defer rows.Close()
		var d digestScan
		for rows.Next() {
			if err := rows.Scan(&d); err != nil {
				return err
			}
			if err := markFresh(reqs, fresh, d.b); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	switch {
	case errors.Is(err, errNotPgx), errors.Is(err, middleware.ErrReplayStore):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, err)
	}
	return fresh, nil
}

// digestScan receives a returned key_hash from pgx without a copy of its
// own; b is valid until the next row.
type digestScan struct{ b []byte }

// ScanBytes implements pgtype.BytesScanner.
func (d *digestScan) ScanBytes(v []byte) error { d.b = v; return nil }

// markFresh sets fresh[i] for the request of reqs (sorted by digest) whose
// digest is b.
func markFresh(reqs []*seenReq, fresh []bool, b []byte) error {
	if len(b) != sha256.Size {
		return fmt.Errorf("%w: replaypg: a stored digest has %d bytes, want %d", middleware.ErrReplayStore, len(b), sha256.Size)
	}
	i, ok := slices.BinarySearchFunc(reqs, b, func(r *seenReq, b []byte) int { return bytes.Compare(r.sum[:], b) })
	if !ok {
		return fmt.Errorf("%w: replaypg: the database returned a digest not inserted", middleware.ErrReplayStore)
	}
	fresh[i] = true
	return nil
}

// keptUntil is r's expiry, or now+MinTTL if that is later.
func keptUntil(r *seenReq, now time.Time) time.Time {
	if min := now.Add(MinTTL); r.expiry.Before(min) {
		return min
	}
	return r.expiry
}

// insertOne is insert of one digest through gorm, told apart by the
// number of rows the statement changed rather than by RETURNING: an Exec,
// unlike a query with rows to read, costs database/sql no goroutine
// watching ctx.
func (s *Store) insertOne(ctx context.Context, now time.Time, r *seenReq) ([]bool, error) {
	res := s.cfg.DB.WithContext(ctx).Exec(insertOneSQL, keyHash(r.sum), keptUntil(r, now), now)
	if res.Error != nil {
		return nil, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, res.Error)
	}
	return []bool{res.RowsAffected > 0}, nil
}

// insertOneSQL is the upsert of one digest without RETURNING: the row
// count (1 if inserted or revived, 0 if an unexpired row was left alone)
// tells the outcome.
const insertOneSQL = insertSQL + `(?, ?) ON CONFLICT (key_hash) DO UPDATE SET expires_at = excluded.expires_at ` +
	`WHERE replay_nonces.expires_at < ?`

// purgeSQL deletes at most one batch of expired rows. The subquery form
// works on PostgreSQL, PostgreSQL-compatible engines and SQLite alike.
const purgeSQL = `DELETE FROM replay_nonces WHERE key_hash IN ` +
	`(SELECT key_hash FROM replay_nonces WHERE expires_at < ? LIMIT ?)`

// Purge deletes the rows whose expiry has passed, in batches of
// Config.PurgeBatch rows (so no single statement holds locks for long),
// until none is left or ctx is done. It returns the number deleted.
func (s *Store) Purge(ctx context.Context) (int64, error) {
	now := s.cfg.Now().UTC()
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		res := s.cfg.DB.WithContext(ctx).Exec(purgeSQL, now, s.cfg.PurgeBatch)
		if res.Error != nil {
			return total, fmt.Errorf("replaypg: purge: %w", res.Error)
		}
		total += res.RowsAffected
		if res.RowsAffected < int64(s.cfg.PurgeBatch) {
			return total, nil
		}
	}
}

// Start runs Purge every Config.PurgeInterval in a goroutine until ctx is
// done or stop is called; stop waits for the goroutine to finish. Failures
// are logged to Config.Logger and retried at the next tick.
func (s *Store) Start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(s.cfg.PurgeInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				n, err := s.Purge(ctx)
				if err != nil && ctx.Err() == nil {
					s.cfg.Logger.Warn("replaypg: purge failed", "err", err)
				} else if n > 0 {
					s.cfg.Logger.Debug("replaypg: purged expired nonces", "rows", n)
				}
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}
