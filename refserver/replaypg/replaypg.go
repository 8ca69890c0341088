// Package replaypg is a middleware.ReplayStore in the reference server's SQL
// database (PostgreSQL, or the embedded SQLite), so that several server
// instances on one database reject a nonce that any of them has accepted.
//
//	store, err := replaypg.New(replaypg.Config{DB: db})
//	stop := store.Start(ctx) // purges expired rows in the background
//	defer stop()
//	mw := middleware.New(middleware.Config{Keys: keys, Replay: store})
//
// The table comes from Migration (ID 20260301120000), which the server
// appends to its ordered migration list.
package replaypg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"
)

// Migration identity and table name.
const (
	MigrationID   = "20260301120000"
	MigrationName = "CreateReplayNoncesTable"
	TableName     = "replay_nonces"
)

// Defaults applied by New.
const (
	DefaultPurgeInterval = time.Minute
	DefaultPurgeBatch    = 5000
	DefaultTimeout       = 3 * time.Second
	// MinTTL is the shortest time a row is kept: an expiry closer than this
	// (or in the past) is moved to now+MinTTL, as the in-memory store does.
	MinTTL = time.Second
)

// ReplayNonce is replay_nonces as created by migration 20260301120000: one
// row per (keyid, nonce) pair seen, kept until ExpiresAt. It is the
// migration's own copy of the model; later changes need a new migration.
type ReplayNonce struct {
	Key       string    `gorm:"column:key;type:text;primaryKey"`
	ExpiresAt time.Time `gorm:"column:expires_at;not null;index:idx_replay_nonces_expires_at"`
}

// TableName implements gorm's Tabler.
func (ReplayNonce) TableName() string { return TableName }

// CreateTable creates replay_nonces and its expires_at index. It is
// idempotent: an existing table is left alone.
func CreateTable(tx *gorm.DB) error {
	if tx.Migrator().HasTable(&ReplayNonce{}) {
		return nil
	}
	return tx.Migrator().CreateTable(&ReplayNonce{})
}

// DropTable drops replay_nonces (the migration's rollback).
func DropTable(tx *gorm.DB) error {
	return tx.Migrator().DropTable(&ReplayNonce{})
}

// Migration returns the gormigrate migration creating replay_nonces:
// ID MigrationID ("20260301120000"), named MigrationName
// ("CreateReplayNoncesTable"), Migrate CreateTable, Rollback DropTable.
func Migration() *gormigrate.Migration {
	return &gormigrate.Migration{ID: MigrationID, Migrate: CreateTable, Rollback: DropTable}
}

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
	// MaxFlights bounds the Seen statements in flight at once. If 0, 4.
	MaxFlights int
	// MaxBatch bounds the keys of one statement. If 0, 256.
	MaxBatch int
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.DB == nil {
		return errors.New("replaypg: Config.DB is required")
	}
	if c.Timeout < 0 || c.PurgeInterval < 0 || c.PurgeBatch < 0 {
		return errors.New("replaypg: Config.Timeout, PurgeInterval and PurgeBatch must not be negative")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.PurgeInterval == 0 {
		c.PurgeInterval = DefaultPurgeInterval
	}
	if c.PurgeBatch == 0 {
		c.PurgeBatch = DefaultPurgeBatch
	}
	if c.MaxFlights == 0 {
		c.MaxFlights = 4
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 256
	}
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

// seenSQL inserts the key, or revives a row whose expiry has passed; an
// unexpired row is left alone. One statement, so it is atomic on PostgreSQL
// (the unique index serialises concurrent inserts) and on SQLite (single
// writer). Both accept this upsert syntax.
const seenSQL = `INSERT INTO replay_nonces ("key", expires_at) VALUES (?, ?) ` +
	`ON CONFLICT ("key") DO UPDATE SET expires_at = excluded.expires_at ` +
	`WHERE replay_nonces.expires_at < ?`

// Seen implements middleware.ReplayStore: it records key until expiry and
// reports whether an unexpired record already existed. Of concurrent calls
// with one key exactly one reports false. Database errors wrap
// middleware.ErrReplayStore.
//
// Concurrent calls are grouped: up to MaxFlights statements run at once,
// each inserting every key waiting at the time it starts (at most
// MaxBatch), so under load the database sees one statement and one commit
// per batch instead of per request. A lone call is one statement, as
// before; nothing waits for a batch to fill.
func (s *Store) Seen(ctx context.Context, key string, expiry time.Time) (bool, error) {
	r := &seenReq{key: key, expiry: expiry.UTC(), done: make(chan seenRes, 1)}
	s.mu.Lock()
	s.pending = append(s.pending, r)
	if s.flights < s.cfg.MaxFlights {
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

type seenReq struct {
	key    string
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

// runBatch inserts the batch's distinct keys in one statement; RETURNING
// names the keys inserted or revived (not seen). A key twice in one batch
// is new at most once.
func (s *Store) runBatch(batch []*seenReq) {
	now := s.cfg.Now().UTC()
	var sb strings.Builder
	sb.WriteString(`INSERT INTO replay_nonces ("key", expires_at) VALUES `)
	args := make([]any, 0, 2*len(batch)+1)
	first := make(map[string]bool, len(batch))
	for _, r := range batch {
		if first[r.key] {
			continue
		}
		first[r.key] = true
		expiry := r.expiry
		if min := now.Add(MinTTL); expiry.Before(min) {
			expiry = min
		}
		if len(args) > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("(?, ?)")
		args = append(args, r.key, expiry)
	}
	sb.WriteString(` ON CONFLICT ("key") DO UPDATE SET expires_at = excluded.expires_at WHERE replay_nonces.expires_at < ? RETURNING "key"`)
	args = append(args, now)

	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	var fresh []string
	err := s.cfg.DB.WithContext(ctx).Raw(sb.String(), args...).Scan(&fresh).Error
	if err != nil {
		err = fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, err)
		for _, r := range batch {
			r.done <- seenRes{err: err}
		}
		return
	}
	isNew := make(map[string]bool, len(fresh))
	for _, k := range fresh {
		isNew[k] = true
	}
	for _, r := range batch {
		r.done <- seenRes{seen: !isNew[r.key]}
		isNew[r.key] = false // a second copy in the batch was seen
	}
}

// purgeSQL deletes at most one batch of expired rows. The subquery form
// works on PostgreSQL, PostgreSQL-compatible engines and SQLite alike.
const purgeSQL = `DELETE FROM replay_nonces WHERE "key" IN ` +
	`(SELECT "key" FROM replay_nonces WHERE expires_at < ? LIMIT ?)`

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
