package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/agentid/agentid/signer/redact"
)

// Database connection defaults applied by OpenGorm.
const (
	// DefaultStatementTimeout bounds every PostgreSQL statement (server side).
	DefaultStatementTimeout = 10 * time.Second
	// DefaultConnectTimeout bounds establishing a PostgreSQL connection.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultMaxOpenConns is the PostgreSQL pool size.
	DefaultMaxOpenConns = 20
	// sqliteBusyTimeout is how long SQLite waits for another writer.
	sqliteBusyTimeout = 5 * time.Second
)

// ErrUnsupportedDatabaseURL is returned by OpenGorm for a URL whose scheme is
// neither postgres://, postgresql:// nor sqlite:.
var ErrUnsupportedDatabaseURL = errors.New("store: unsupported database url")

// DatabaseKind reports which driver a DATABASE_URL selects: "postgres",
// "sqlite" or "" when unsupported.
func DatabaseKind(databaseURL string) string {
	switch {
	case strings.HasPrefix(databaseURL, "postgres://"), strings.HasPrefix(databaseURL, "postgresql://"):
		return "postgres"
	case strings.HasPrefix(databaseURL, "sqlite:"):
		return "sqlite"
	}
	return ""
}

// SQLitePath returns the file path of a sqlite:// URL, or ":memory:" for
// sqlite::memory: (and sqlite://:memory:).
func SQLitePath(databaseURL string) (string, error) {
	rest, ok := strings.CutPrefix(databaseURL, "sqlite:")
	if !ok {
		return "", fmt.Errorf("%w: %q is not a sqlite url", ErrUnsupportedDatabaseURL, redact.URL(databaseURL))
	}
	if rest == ":memory:" {
		return ":memory:", nil
	}
	p, ok := strings.CutPrefix(rest, "//")
	if !ok {
		//lint:ignore ST1005 the message ends with the URL form sqlite::memory:
		return "", fmt.Errorf("%w: want sqlite://PATH or sqlite::memory:", ErrUnsupportedDatabaseURL)
	}
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if p == "" {
		return "", fmt.Errorf("%w: sqlite url has no path", ErrUnsupportedDatabaseURL)
	}
	return p, nil
}

// OpenGorm opens the database named by databaseURL and checks that it answers:
//
//   - postgres:// or postgresql:// uses PostgreSQL (gorm.io/driver/postgres,
//     pgx). Unless the URL sets them, connect_timeout is 5 s and
//     statement_timeout 10 s; the pool holds at most 20 connections (kept
//     while busy, closed after 5 idle minutes), recycled after 30 minutes.
//   - sqlite://PATH (sqlite:///abs/path or sqlite://relative.db) or
//     sqlite::memory: uses the embedded pure-Go SQLite, with foreign keys on,
//     a 5 s busy timeout, WAL journal and one connection (SQLite has a single
//     writer; one connection also keeps an in-memory database alive).
//
// gorm's SQL logging is off: statements and their values are never logged.
// Database errors are translated (gorm.ErrDuplicatedKey for unique
// violations).
func OpenGorm(databaseURL string) (*gorm.DB, error) {
	cfg := &gorm.Config{
		Logger:         logger.Discard,
		TranslateError: true,
		NowFunc:        func() time.Time { return time.Now().UTC() },
	}
	switch DatabaseKind(databaseURL) {
	case "postgres":
		dsn, err := postgresDSN(databaseURL)
		if err != nil {
			return nil, err
		}
		db, err := gorm.Open(postgres.Open(dsn), cfg)
		if err != nil {
			return nil, fmt.Errorf("store: open database: %w", err)
		}
		sqlDB, err := db.DB()
		if err != nil {
			return nil, fmt.Errorf("store: open database: %w", err)
		}
		sqlDB.SetMaxOpenConns(DefaultMaxOpenConns)
		// Idle connections are kept up to the pool size: a smaller idle
		// limit closes and reopens connections under load (a PostgreSQL
		// backend start each time); ConnMaxIdleTime trims them when quiet.
		sqlDB.SetMaxIdleConns(DefaultMaxOpenConns)
		sqlDB.SetConnMaxLifetime(30 * time.Minute)
		sqlDB.SetConnMaxIdleTime(5 * time.Minute)
		return db, nil
	case "sqlite":
		path, err := SQLitePath(databaseURL)
		if err != nil {
			return nil, err
		}
		params := url.Values{}
		params.Add("_pragma", "foreign_keys(1)")
		params.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", sqliteBusyTimeout.Milliseconds()))
		if path != ":memory:" {
			params.Add("_pragma", "journal_mode(WAL)")
		}
		params.Set("_txlock", "immediate")
		db, err := gorm.Open(sqlite.Open(path+"?"+params.Encode()), cfg)
		if err != nil {
			return nil, fmt.Errorf("store: open database: %w", err)
		}
		sqlDB, err := db.DB()
		if err != nil {
			return nil, fmt.Errorf("store: open database: %w", err)
		}
		sqlDB.SetMaxOpenConns(1)
		sqlDB.SetMaxIdleConns(1)
		sqlDB.SetConnMaxLifetime(0)
		sqlDB.SetConnMaxIdleTime(0)
		return db, nil
	}
	return nil, fmt.Errorf("%w: %q (want postgres://, postgresql://, sqlite://PATH or sqlite::memory:)", ErrUnsupportedDatabaseURL, redact.URL(databaseURL))
}

// postgresDSN adds default connect_timeout and statement_timeout parameters.
func postgresDSN(databaseURL string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "", fmt.Errorf("%w: cannot parse the postgres url", ErrUnsupportedDatabaseURL)
	}
	q := u.Query()
	if q.Get("connect_timeout") == "" {
		q.Set("connect_timeout", fmt.Sprint(int(DefaultConnectTimeout.Seconds())))
	}
	if q.Get("statement_timeout") == "" {
		q.Set("statement_timeout", fmt.Sprint(DefaultStatementTimeout.Milliseconds()))
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// pingDB checks within ctx that db answers.
func pingDB(ctx context.Context, db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.PingContext(ctx)
}
