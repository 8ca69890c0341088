// Package dbtest gives each test an isolated, empty database for the
// reference server: an in-memory SQLite database always, and a fresh
// PostgreSQL schema when AGENTID_TEST_DATABASE_URL is set (each test gets
// its own schema, dropped at cleanup, so packages can run in parallel
// against one database).
//
//	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
//		store.Migrate(ctx, db, nil)
//		…
//	})
//
// When AGENTID_TEST_DATABASE_URL is set but PostgreSQL does not answer, the
// PostgreSQL variants fail if CI is set and are skipped (with the reason)
// otherwise.
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/redact"
	"github.com/agentid/agentid/signer/signertest/testenv"
	"gorm.io/gorm"
)

// EnvVar names the variable holding the PostgreSQL test database URL.
const EnvVar = "AGENTID_TEST_DATABASE_URL"

// Backend is a database kind tests can run against.
type Backend struct {
	// Name is "sqlite" or "postgres".
	Name string
	// URL returns a DATABASE_URL for a fresh, empty database (a PostgreSQL
	// schema or a SQLite file) that is removed when the test ends.
	URL func(t testing.TB) string
}

// Backends returns SQLite and PostgreSQL. PostgreSQL's URL skips its
// subtest, naming AGENTID_TEST_DATABASE_URL, when the variable is unset
// (failing instead when CI is set): see PostgresBaseURL.
func Backends() []Backend {
	return []Backend{{Name: "sqlite", URL: SQLiteURL}, {Name: "postgres", URL: PostgresURL}}
}

// Each runs fn as a subtest per backend, each with a fresh, unmigrated
// database (in-memory for SQLite).
func Each(t *testing.T, fn func(t *testing.T, db *gorm.DB)) {
	t.Helper()
	for _, b := range Backends() {
		t.Run(b.Name, func(t *testing.T) {
			var db *gorm.DB
			if b.Name == "sqlite" {
				db = Open(t, "sqlite::memory:")
			} else {
				db = Open(t, b.URL(t))
			}
			fn(t, db)
		})
	}
}

// Open opens databaseURL with store.OpenGorm and closes it at cleanup.
func Open(t testing.TB, databaseURL string) *gorm.DB {
	t.Helper()
	db, err := store.OpenGorm(databaseURL)
	if err != nil {
		t.Fatalf("dbtest: open %s: %v", redact.URL(databaseURL), err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	return db
}

// Migrated opens databaseURL and applies the migrations.
func Migrated(t testing.TB, databaseURL string) *gorm.DB {
	t.Helper()
	db := Open(t, databaseURL)
	if err := store.Migrate(context.Background(), db, nil); err != nil {
		t.Fatalf("dbtest: migrate: %v", err)
	}
	return db
}

// SQLiteURL returns sqlite://<temp dir>/agentid.db, a fresh file database.
func SQLiteURL(t testing.TB) string {
	t.Helper()
	return "sqlite://" + filepath.Join(t.TempDir(), "agentid.db")
}

var (
	pgOnce sync.Once
	pgErr  error
)

// PostgresURL returns AGENTID_TEST_DATABASE_URL with search_path set to a
// new schema, dropped (CASCADE) at cleanup. It skips the test when the
// variable is unset or PostgreSQL is unreachable (failing instead if CI
// is set), as PostgresBaseURL does.
func PostgresURL(t testing.TB) string {
	t.Helper()
	base := PostgresBaseURL(t)
	admin, err := store.OpenGorm(base)
	if err != nil {
		t.Fatalf("dbtest: open %s: %v", redact.URL(base), err)
	}
	schema := "agentid_test_" + RandomHex(8)
	if err := admin.Exec(`CREATE SCHEMA "` + schema + `"`).Error; err != nil {
		t.Fatalf("dbtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := admin.WithContext(ctx).Exec(`DROP SCHEMA IF EXISTS "` + schema + `" CASCADE`).Error; err != nil {
			t.Errorf("dbtest: drop schema %s: %v", schema, err)
		}
		if sqlDB, err := admin.DB(); err == nil {
			sqlDB.Close()
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("dbtest: parse %s: %v", EnvVar, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// PostgresBaseURL returns AGENTID_TEST_DATABASE_URL. It skips the test,
// saying why, when the variable is unset or PostgreSQL does not answer;
// with CI set, both fail the test instead. Tests that create whole
// databases use it (see WithDatabase).
func PostgresBaseURL(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("dbtest: the PostgreSQL variants are skipped with -short (SQLite runs)")
	}
	base := os.Getenv(EnvVar)
	if base == "" {
		testenv.SkipOrFail(t, "dbtest: %s is not set; PostgreSQL tests skipped (set it to a postgres:// URL, e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)", EnvVar)
	}
	pgOnce.Do(func() { pgErr = ping(base) })
	if pgErr != nil {
		testenv.SkipOrFail(t, "dbtest: PostgreSQL at %s (%s) is unreachable, skipped: %v", redact.URL(base), EnvVar, pgErr)
	}
	return base
}

// WithDatabase returns the PostgreSQL URL databaseURL naming the database
// name instead: only the path changes (the user name, which may be the
// same as the database's, and the query are kept).
func WithDatabase(databaseURL, name string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "", err
	}
	u.Path, u.RawPath = "/"+name, ""
	return u.String(), nil
}

func ping(databaseURL string) error {
	db, err := store.OpenGorm(databaseURL)
	if err != nil {
		return err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// RandomHex returns 2n random lowercase hex characters.
func RandomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
