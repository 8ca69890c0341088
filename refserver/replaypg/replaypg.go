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
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/agentid/agentid/middleware"
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
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.DB == nil {
		return errors.New("replaypg: Config.DB is required")
	}
	if c.Timeout < 0 || c.PurgeInterval < 0 || c.PurgeBatch < 0 || c.MaxFlights < 0 || c.MaxBatch < 0 {
		return errors.New("replaypg: Config.Timeout, PurgeInterval, PurgeBatch, MaxFlights and MaxBatch must not be negative")
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
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Store is a middleware.ReplayStore on the replay_nonces table. It is safe
// for concurrent use.
type Store struct {
	cfg Config

	mu      sync.Mutex
	pending []*seenReq
	flights int
}

var _ middleware.ReplayStore = (*Store)(nil)

// New validates cfg and returns a Store. It does not touch the database.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{cfg: cfg.withDefaults()}, nil
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
// call (no statement running) runs its own statement on its own goroutine:
// no other goroutine is woken, and nothing waits for a batch to fill. The
// calls that
// arrive while a statement runs make the next batch: batches grow with the
// load, and each commit (a WAL flush on PostgreSQL) serves more calls.
// More statements (up to MaxFlights) run side by side only while a full
// batch is waiting. When a batch's statement fails, each of its keys is
// tried again alone, so one failing key (or a failure that hit the batch
// by chance) fails only the calls it belongs to.
func (s *Store) Seen(ctx context.Context, key string, expiry time.Time) (bool, error) {
	r := &seenReq{sum: sha256.Sum256([]byte(key)), expiry: expiry.UTC()}
	s.mu.Lock()
	if s.flights == 0 {
		// No statement runs (so none is pending): this call's statement
		// is the flight. The calls arriving meanwhile make the next batch,
		// which a goroutine of its own runs if there is one.
		s.flights++
		s.mu.Unlock()
		seen, err := s.lone(ctx, r)
		s.mu.Lock()
		if len(s.pending) > 0 {
			go s.flight()
		} else {
			s.flights--
		}
		s.mu.Unlock()
		return seen, err
	}
	r.done = make(chan seenRes, 1)
	s.pending = append(s.pending, r)
	if s.flights < s.cfg.MaxFlights && len(s.pending) >= s.cfg.MaxBatch {
		s.flights++
		go s.flight()
	}
	s.mu.Unlock()
	select {
	case res := <-r.done:
		return res.seen, res.err
	case <-ctx.Done():
		return false, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, ctx.Err())
	}
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
	return !fresh[r.sum], nil
}

type seenReq struct {
	sum    digest
	expiry time.Time
	done   chan seenRes
}

type seenRes struct {
	seen bool
	err  error
}

// flight runs batches until no call is waiting.
func (s *Store) flight() {
	for {
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.flights--
			s.mu.Unlock()
			return
		}
		n := min(len(s.pending), s.cfg.MaxBatch)
		batch := make([]*seenReq, n)
		copy(batch, s.pending)
		s.pending = append(s.pending[:0], s.pending[n:]...)
		s.mu.Unlock()
		s.runBatch(batch)
	}
}

// runBatch inserts the batch's distinct digests in one statement and
// answers every call in it. A digest twice in one batch is new at most
// once. If the statement fails and the batch holds more than one distinct
// digest, each is inserted again in a statement of its own (within the
// same deadline), and only the calls whose own statement fails get an
// error.
func (s *Store) runBatch(batch []*seenReq) {
	now := s.cfg.Now().UTC()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()

	distinct := make([]*seenReq, 0, len(batch))
	first := make(map[digest]bool, len(batch))
	for _, r := range batch {
		if !first[r.sum] {
			first[r.sum] = true
			distinct = append(distinct, r)
		}
	}
	fresh, err := s.insert(ctx, now, distinct)
	var errs map[digest]error // the error of each digest whose insert failed
	switch {
	case err == nil:
	case len(distinct) == 1:
		errs = map[digest]error{distinct[0].sum: err}
	default:
		fresh = make(map[digest]bool, len(distinct))
		errs = make(map[digest]error)
		for _, r := range distinct {
			one, err := s.insert(ctx, now, []*seenReq{r})
			if err != nil {
				errs[r.sum] = err
			}
			fresh[r.sum] = one[r.sum]
		}
	}
	for _, r := range batch {
		if err := errs[r.sum]; err != nil {
			r.done <- seenRes{err: err}
			continue
		}
		r.done <- seenRes{seen: !fresh[r.sum]}
		fresh[r.sum] = false // a second copy in the batch was seen
	}
}

// insert runs one upsert of reqs' digests and returns the set of digests
// inserted or revived. Errors wrap middleware.ErrReplayStore.
func (s *Store) insert(ctx context.Context, now time.Time, reqs []*seenReq) (map[digest]bool, error) {
	if len(reqs) == 1 {
		return s.insertOne(ctx, now, reqs[0])
	}
	var sb strings.Builder
	sb.Grow(len(insertSQL) + 8*len(reqs) + len(onConflictSQL))
	sb.WriteString(insertSQL)
	args := make([]any, 0, 2*len(reqs)+1)
	for i, r := range reqs {
		expiry := r.expiry
		if min := now.Add(MinTTL); expiry.Before(min) {
			expiry = min
		}
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("(?, ?)")
		args = append(args, keyHash(r.sum), expiry)
	}
	sb.WriteString(onConflictSQL)
	args = append(args, now)

	rows, err := s.cfg.DB.WithContext(ctx).Raw(sb.String(), args...).Rows()
	if err != nil {
		return nil, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, err)
	}
	defer rows.Close()
	fresh := make(map[digest]bool, len(reqs))
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, err)
		}
		if len(b) != sha256.Size {
			return nil, fmt.Errorf("%w: replaypg: a stored digest has %d bytes, want %d", middleware.ErrReplayStore, len(b), sha256.Size)
		}
		fresh[digest(b)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, err)
	}
	return fresh, nil
}

// insertOne is insert of one digest, told apart by the number of rows
// the statement changed rather than by RETURNING: an Exec, unlike a query
// with rows to read, costs database/sql no goroutine watching ctx.
func (s *Store) insertOne(ctx context.Context, now time.Time, r *seenReq) (map[digest]bool, error) {
	expiry := r.expiry
	if min := now.Add(MinTTL); expiry.Before(min) {
		expiry = min
	}
	res := s.cfg.DB.WithContext(ctx).Exec(insertOneSQL, keyHash(r.sum), expiry, now)
	if res.Error != nil {
		return nil, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, res.Error)
	}
	fresh := make(map[digest]bool, 1)
	if res.RowsAffected > 0 {
		fresh[r.sum] = true
	}
	return fresh, nil
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
