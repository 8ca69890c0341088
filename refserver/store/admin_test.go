package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
)

// checkAdminCycle runs create, create, migrate, migrate, drop, drop on
// databaseURL and checks each outcome.
func checkAdminCycle(t *testing.T, databaseURL, wantName string) {
	t.Helper()
	ctx := context.Background()
	for i, want := range []bool{true, false} {
		name, created, err := store.CreateDatabase(ctx, databaseURL)
		if err != nil || name != wantName || created != want {
			t.Fatalf("CreateDatabase #%d = %q, %v, %v; want %q, %v, nil", i+1, name, created, err, wantName, want)
		}
	}
	var log strings.Builder
	if err := store.MigrateDatabase(ctx, databaseURL, &log); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(log.String(), "\n"); n != 2*len(store.Migrations()) {
		t.Errorf("MigrateDatabase printed %d lines, want %d:\n%s", n, 2*len(store.Migrations()), log.String())
	}
	log.Reset()
	if err := store.MigrateDatabase(ctx, databaseURL, &log); err != nil || log.Len() != 0 {
		t.Errorf("second MigrateDatabase: %v, printed %q; want nothing", err, log.String())
	}
	for i, want := range []bool{true, false} {
		name, dropped, err := store.DropDatabase(ctx, databaseURL)
		if err != nil || name != wantName || dropped != want {
			t.Fatalf("DropDatabase #%d = %q, %v, %v; want %q, %v, nil", i+1, name, dropped, err, wantName, want)
		}
	}
}

func TestDatabaseAdminSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "agentid.db")
	checkAdminCycle(t, "sqlite://"+path, path)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if _, err := os.Stat(path + suffix); !os.IsNotExist(err) {
			t.Errorf("stat %s after DropDatabase: %v, want not exist", path+suffix, err)
		}
	}

	for _, f := range []func(context.Context, string) (string, bool, error){store.CreateDatabase, store.DropDatabase} {
		if name, done, err := f(context.Background(), "sqlite::memory:"); name != store.InMemory || done || err != nil {
			t.Errorf("on sqlite::memory: = %q, %v, %v; want %q, false, nil", name, done, err, store.InMemory)
		}
	}
}

func TestDatabaseAdminPostgres(t *testing.T) {
	t.Parallel()
	base := dbtest.PostgresBaseURL(t)
	name := "agentid_admin_" + dbtest.RandomHex(6)
	u, err := dbtest.WithDatabase(base, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.DropDatabase(context.Background(), u) })
	checkAdminCycle(t, u, name)

	// A database in use cannot be dropped; the error says so and names the fix.
	if _, _, err := store.CreateDatabase(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	db := dbtest.Open(t, u)
	if err := db.Exec("SELECT 1").Error; err != nil {
		t.Fatal(err)
	}
	_, dropped, err := store.DropDatabase(context.Background(), u)
	var de *store.DBError
	if dropped || !errors.Is(err, store.ErrDatabaseInUse) || !errors.As(err, &de) || !strings.Contains(de.Fix, "stop the server") {
		t.Errorf("DropDatabase while in use = %v, %v; want ErrDatabaseInUse with a fix", dropped, err)
	}
}

func TestDatabaseErrors(t *testing.T) {
	t.Parallel()
	missing := "sqlite://" + filepath.Join(t.TempDir(), "no", "such", "dir", "agentid.db")
	tests := []struct {
		name      string
		url       string
		postgres  bool
		wantKind  error
		wantParts []string
	}{
		{name: "refused", url: "postgres://postgres:s3cret@127.0.0.1:1/agentid?connect_timeout=2", wantKind: store.ErrDatabaseUnreachable,
			wantParts: []string{"cannot reach the database", "connection refused", "DATABASE_URL", "xxxxx"}},
		{name: "unknown host", url: "postgres://postgres@db.invalid/agentid?connect_timeout=2", wantKind: store.ErrDatabaseUnreachable,
			wantParts: []string{"cannot reach the database", "db.invalid"}},
		{name: "sqlite folder missing", url: missing, wantKind: store.ErrDatabaseUnreachable, wantParts: []string{"cannot reach the database"}},
		{name: "unsupported", url: "mysql://localhost/agentid", wantKind: store.ErrUnsupportedDatabaseURL, wantParts: []string{"mysql"}},
		{name: "no database name", url: "postgres://localhost", wantKind: store.ErrUnsupportedDatabaseURL, wantParts: []string{"names no database"}},
		{name: "database does not exist", postgres: true, wantKind: store.ErrDatabaseNotFound, wantParts: []string{"does not exist", "create it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := tt.url
			if tt.postgres {
				base := dbtest.PostgresBaseURL(t)
				var err error
				if u, err = dbtest.WithDatabase(base, "agentid_missing_"+dbtest.RandomHex(6)); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			if tt.name == "no database name" {
				_, _, err = store.CreateDatabase(context.Background(), u)
			} else {
				err = store.MigrateDatabase(context.Background(), u, nil)
			}
			var de *store.DBError
			if !errors.As(err, &de) || !errors.Is(err, tt.wantKind) {
				t.Fatalf("error = %v (%T); want a *DBError of kind %v", err, err, tt.wantKind)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") || strings.Contains(msg, "s3cret") {
				t.Errorf("error %q spans lines or leaks the password", msg)
			}
			for _, p := range tt.wantParts {
				if !strings.Contains(msg, p) {
					t.Errorf("error %q lacks %q", msg, p)
				}
			}
		})
	}
}
