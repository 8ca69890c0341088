// Package replaypg is a middleware.ReplayStore in the reference server's SQL
// database (PostgreSQL, or the embedded SQLite), so that several server
// instances on one database reject a nonce that any of them has accepted.
//
//	replay, err := replaypg.New(replaypg.Config{DB: db.Gorm()}) // db: a *store.DB
//	stop := replay.Start(ctx) // purges expired rows in the background
//	defer stop()
//	v, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{"api.example.com"}, Replay: replay})
//
// The table replay_nonces comes from the reference server's own
// migrations (refserver/store). Each row holds the SHA-256 digest of a replay key
// (32 bytes) and its expiry, never the key itself, so a row has one size
// whatever the length of the nonce.
package replaypg

import (
	"cmp"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentid/agentid/middleware"
	"gorm.io/gorm"
)

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
	// MaxStatements bounds the Seen statements running at once. One runs
	// whenever a call waits; another starts only while a full batch
	// (MaxBatch keys) is waiting. If 0, 4.
	MaxStatements int
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
	if c.Timeout < 0 || c.PurgeInterval < 0 || c.PurgeBatch < 0 || c.MaxStatements < 0 || c.MaxBatch < 0 || c.LingerBatch < 0 {
		return errors.New("replaypg: Config.Timeout, PurgeInterval, PurgeBatch, MaxStatements, MaxBatch and LingerBatch must not be negative")
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
	c.MaxStatements = cmp.Or(c.MaxStatements, 4)
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
	runners   int           // calls running a statement of their own, plus runBatches goroutines
	last      time.Duration // arrival of the latest call (since epoch)
	gap       time.Duration // moving average of the time between calls
	overlap   int           // moving average, in 1/1024, of calls that found another in Seen
	peak      int           // recent peak of calls in Seen, in 1/64, decaying by 1/64 a call
	inside    atomic.Int32  // calls in Seen
	lingering bool          // a runner waits on wake for more calls
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
