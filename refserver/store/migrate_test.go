package store_test

import (
	"bytes"
	"context"
	"go/parser"
	"go/token"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"gorm.io/gorm"
)

func TestMigrate(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		pending, err := store.Pending(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.Join(pending, ","), "20260223204000,20260223205500,"; !strings.HasPrefix(got+",", want) {
			t.Errorf("Pending before = %s, want %s…", got, want)
		}
		all := store.Migrations()
		if len(pending) != len(all) {
			t.Errorf("Pending before lists %d migrations, want all %d", len(pending), len(all))
		}
		var out bytes.Buffer
		if err := store.Migrate(ctx, db, &out); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		want := []*regexp.Regexp{
			regexp.MustCompile(`^== 20260223204000 CreateAgentsTable: migrating =+$`),
			regexp.MustCompile(`^== 20260223204000 CreateAgentsTable: migrated \(\d+\.\d{4}s\) =+$`),
			regexp.MustCompile(`^== 20260223205500 CreatePublicJwksTable: migrating =+$`),
			regexp.MustCompile(`^== 20260223205500 CreatePublicJwksTable: migrated \(\d+\.\d{4}s\) =+$`),
		}
		for _, m := range all[2:] {
			want = append(want,
				regexp.MustCompile(`^== `+m.ID+` `+m.Name+`: migrating =+$`),
				regexp.MustCompile(`^== `+m.ID+` `+m.Name+`: migrated \(\d+\.\d{4}s\) =+$`))
		}
		if len(lines) != len(want) {
			t.Fatalf("Migrate printed %d lines, want %d:\n%s", len(lines), len(want), out.String())
		}
		for i, re := range want {
			if !re.MatchString(lines[i]) {
				t.Errorf("line %d = %q, want match %s", i, lines[i], re)
			}
			if len(lines[i]) != 79 {
				t.Errorf("line %d is %d columns, want 79", i, len(lines[i]))
			}
		}
		for _, table := range []string{"agents", "public_jwks", store.MigrationsTable} {
			if !db.Migrator().HasTable(table) {
				t.Errorf("table %s missing after Migrate", table)
			}
		}
		// Idempotent: a second run applies nothing and prints nothing.
		out.Reset()
		if err := store.Migrate(ctx, db, &out); err != nil {
			t.Fatalf("second Migrate: %v", err)
		}
		if out.Len() != 0 {
			t.Errorf("second Migrate printed %q, want nothing", out.String())
		}
		if pending, err = store.Pending(ctx, db); err != nil || len(pending) != 0 {
			t.Errorf("Pending after = %v, %v; want none", pending, err)
		}
		// A migration whose table already exists (half-applied database) is a no-op.
		if err := db.Exec("DELETE FROM " + store.MigrationsTable).Error; err != nil {
			t.Fatal(err)
		}
		out.Reset()
		if err := store.Migrate(ctx, db, &out); err != nil {
			t.Fatalf("Migrate over existing tables: %v", err)
		}
		if got := strings.Count(out.String(), "migrated ("); got != len(all) {
			t.Errorf("re-run over existing tables printed %d migrated lines, want %d", got, len(all))
		}
	})
}

func TestMigrationsOrdered(t *testing.T) {
	t.Parallel()
	ms := store.Migrations()
	for i, m := range ms {
		if !regexp.MustCompile(`^\d{14}$`).MatchString(m.ID) {
			t.Errorf("migration %d ID %q is not a 14-digit timestamp", i, m.ID)
		}
		if i > 0 && ms[i-1].ID >= m.ID {
			t.Errorf("migration %s is not after %s", m.ID, ms[i-1].ID)
		}
	}
}

// TestReplayNoncesMigration: the server's own migrations create
// replay_nonces, and 20261125120000 replaces a text-keyed table (rows
// included: they expire within minutes) with one keyed by a 32-byte digest.
func TestReplayNoncesMigration(t *testing.T) {
	t.Parallel()
	ids := map[string]string{}
	for _, m := range store.Migrations() {
		ids[m.ID] = m.Name
	}
	for id, name := range map[string]string{"20260301120000": "CreateReplayNoncesTable", "20261125120000": "HashReplayNonceKeys"} {
		if ids[id] != name {
			t.Errorf("migration %s = %q, want %s", id, ids[id], name)
		}
	}
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		// A database migrated before 20261125120000, with a remembered nonce.
		if err := db.Exec(`CREATE TABLE replay_nonces ("key" text PRIMARY KEY, expires_at timestamp NOT NULL)`).Error; err != nil {
			t.Fatal(err)
		}
		if err := db.Exec(`INSERT INTO replay_nonces ("key", expires_at) VALUES ('kid nonce', ?)`, time.Now().Add(time.Minute)).Error; err != nil {
			t.Fatal(err)
		}
		if err := store.Migrate(ctx, db, nil); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		mig := db.Migrator()
		cols, err := mig.ColumnTypes("replay_nonces")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range cols {
			names = append(names, c.Name())
		}
		if got := strings.Join(names, ","); got != "key_hash,expires_at" {
			t.Errorf("replay_nonces columns = %s, want key_hash,expires_at", got)
		}
		if !mig.HasIndex("replay_nonces", "idx_replay_nonces_expires_at") {
			t.Errorf("index idx_replay_nonces_expires_at missing")
		}
		var n int64
		if err := db.Table("replay_nonces").Count(&n).Error; err != nil || n != 0 {
			t.Errorf("rows after the upgrade = %d, %v; want 0 (old rows dropped)", n, err)
		}
		// A 32-byte digest fits.
		row := map[string]any{"key_hash": make([]byte, 32), "expires_at": time.Now()}
		if err := db.Table("replay_nonces").Create(row).Error; err != nil {
			t.Errorf("insert a digest: %v", err)
		}
	})
}

// TestImportDirection: the replay store builds on the server's tables, not
// the other way round. The server's migrations (migrate.go, models.go) do
// not come from refserver/replaypg; only the one constructor of a running
// server (open.go) builds a replay store from it.
func TestImportDirection(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	for _, name := range []string{"migrate.go", "models.go"} {
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "github.com/agentid/agentid/refserver/") {
				t.Errorf("%s imports %s", name, p)
			}
		}
	}
}

// TestProvenAtMigration: 20261201120100 adds public_jwks.proven_at and
// dates the keys already stored as proven when they were created (which
// of them a vestauth-compat rotation attached was never recorded), so
// registering an existing agent's key again still answers that agent.
func TestProvenAtMigration(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		if err := store.Migrate(ctx, db, nil); err != nil {
			t.Fatal(err)
		}
		// Back to the schema before 20261201120100, with an agent and a key.
		if err := db.Migrator().DropColumn(&store.PublicJWK{}, "proven_at"); err != nil {
			t.Fatal(err)
		}
		if err := db.Exec("DELETE FROM "+store.MigrationsTable+" WHERE id = ?", "20261201120100").Error; err != nil {
			t.Fatal(err)
		}
		created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		if err := db.Exec("INSERT INTO agents (uid, created_at, updated_at) VALUES (?, ?, ?)", "agent-000000000000000000000001", created, created).Error; err != nil {
			t.Fatal(err)
		}
		if err := db.Exec("INSERT INTO public_jwks (kid, agent_uid, jwk, created_at) VALUES (?, ?, ?, ?)", "k1", "agent-000000000000000000000001", "{}", created).Error; err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := store.Migrate(ctx, db, &out); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		if !strings.Contains(out.String(), "20261201120100 AddPublicJwksProvenAt: migrated") {
			t.Errorf("Migrate printed %q, want 20261201120100 applied", out.String())
		}
		var key store.PublicJWK
		if err := db.Where("kid = ?", "k1").Take(&key).Error; err != nil {
			t.Fatal(err)
		}
		if key.ProvenAt == nil || !key.ProvenAt.Equal(created) {
			t.Errorf("proven_at of a key stored before the migration = %v, want its created_at %v", key.ProvenAt, created)
		}
	})
}
