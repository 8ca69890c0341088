package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// backupFixture is what a backup must carry: an agent whose key verifies,
// one whose key was revoked, and the service's signing key.
type backupFixture struct {
	active, revoked       string // uids
	activeKey, revokedKey signer.PrivateKey
	serviceKeys           string // the service's key directory as served before the backup
}

// seedForBackup registers two agents on s (its database at databaseURL),
// revokes the second one's key with idcli server keys revoke, and creates
// the service's signing key.
func seedForBackup(t *testing.T, s *startedServer, databaseURL string) backupFixture {
	t.Helper()
	ctx := context.Background()
	f := backupFixture{activeKey: signertest.Key(0xb1), revokedKey: signertest.Key(0xb2)}
	f.active = clitest.Register(t, nil, s.base, f.activeKey)
	f.revoked = clitest.Register(t, nil, s.base, f.revokedKey)
	if r := runCLI(ctx, s.dir, map[string]string{"DATABASE_URL": databaseURL}, "server", "keys", "revoke", "--", f.revoked, f.revokedKey.KeyID()); r.err != nil {
		t.Fatalf("keys revoke: %v", r.err)
	}
	db, err := store.Open(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.EnsureServiceKey(ctx); err != nil {
		t.Fatal(err)
	}
	f.serviceKeys = serviceKeys(t, s)
	if !strings.Contains(f.serviceKeys, `"kid"`) {
		t.Fatalf("service directory without a key after EnsureServiceKey: %s", f.serviceKeys)
	}
	// The revocation reaches the running server through the change log
	// within a second.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st, _ := s.send(t, clitest.WhoamiRequest(t, s.base, f.revoked, f.revokedKey)); st == http.StatusUnauthorized {
			break
		}
	}
	f.check(t, s, "before the backup")
	return f
}

func serviceKeys(t *testing.T, s *startedServer) string {
	t.Helper()
	d := clitest.MustDo(t, http.MethodGet, s.base+signer.DirectoryPath, "", nil, nil)
	if d.Status != http.StatusOK {
		t.Fatalf("service directory: %d %s", d.Status, d.Body)
	}
	return strings.TrimSpace(d.Body)
}

// check wants, on s, the active agent's signed request verified, the
// revoked key refused, and the service key the one served before.
func (f backupFixture) check(t *testing.T, s *startedServer, when string) {
	t.Helper()
	if st, code := s.send(t, clitest.WhoamiRequest(t, s.base, f.active, f.activeKey)); st != http.StatusOK {
		t.Errorf("%s: whoami of the active agent: %d %s, want 200", when, st, code)
	}
	if st, code := s.send(t, clitest.WhoamiRequest(t, s.base, f.revoked, f.revokedKey)); st != http.StatusUnauthorized || code != "revoked_key" {
		t.Errorf("%s: whoami with the revoked key: %d %s, want 401 revoked_key", when, st, code)
	}
	if f.serviceKeys != "" {
		if got := serviceKeys(t, s); got != f.serviceKeys {
			t.Errorf("%s: the service's key directory is %s, want %s", when, got, f.serviceKeys)
		}
	}
}

func runTool(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
}

// The PostgreSQL backup of docs/deployment.md: pg_dump -Fc of the live
// database, pg_restore into a fresh database (both created by the test
// and dropped after), a server started on the copy.
func TestServerBackupRestorePostgres(t *testing.T) {
	t.Parallel()
	base := dbtest.PostgresBaseURL(t)
	why := "the backup test (apt-get install postgresql-client)"
	pgDump, pgRestore := needTool(t, why, "pg_dump"), needTool(t, why, "pg_restore")
	ctx := context.Background()
	dir := t.TempDir()
	suffix := dbtest.RandomHex(4)
	var live, restored string
	for _, u := range []*string{&live, &restored} {
		name := "agentid_backup_" + suffix
		if u == &restored {
			name = "agentid_restored_" + suffix
		}
		var err error
		if *u, err = dbtest.WithDatabase(base, name); err != nil {
			t.Fatal(err)
		}
		url := *u
		t.Cleanup(func() { // after the servers stop (cleanups run last first)
			if r := runCLI(ctx, dir, nil, "server", "db:drop", "--database-url", url); r.err != nil {
				t.Errorf("db:drop: %v", r.err)
			}
		})
	}
	for _, cmd := range []string{"db:create", "db:migrate"} {
		if r := runCLI(ctx, dir, nil, "server", cmd, "--database-url", live); r.err != nil {
			t.Fatalf("%s: %v", cmd, r.err)
		}
	}
	a := startServerOn(t, freePort(t), dir, live, "--bind", "127.0.0.1")
	f := seedForBackup(t, a, live)

	// The dump is taken while the server runs.
	dump := filepath.Join(dir, "agentid.dump")
	runTool(t, pgDump, "-Fc", "--no-owner", "--file", dump, "--dbname", live)
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(ctx, dir, nil, "server", "db:create", "--database-url", restored); r.err != nil {
		t.Fatal(r.err)
	}
	runTool(t, pgRestore, "--no-owner", "--no-privileges", "--exit-on-error", "--dbname", restored, dump)
	if r := runCLI(ctx, dir, nil, "server", "db:migrate", "--database-url", restored); r.err != nil || r.stdout != "" {
		t.Fatalf("db:migrate on the restored database: %q %v, want nothing to do", r.stdout, r.err)
	}
	f.check(t, startServerOn(t, freePort(t), dir, restored, "--bind", "127.0.0.1"), "restored with pg_restore")
}

// The SQLite backups of docs/deployment.md: VACUUM INTO while the server
// runs (what `sqlite3 agentid.db "VACUUM INTO '…'"` sends, here through the
// server's own driver), and a plain copy of the file once it is stopped.
func TestServerBackupRestoreSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	live := migratedSQLite(t, dir)
	a := startServerOn(t, freePort(t), dir, live, "--bind", "127.0.0.1")
	f := seedForBackup(t, a, live)

	backups := t.TempDir()
	online := filepath.Join(backups, "online.db")
	db := dbtest.Open(t, live)
	if err := db.Exec("VACUUM INTO ?", online).Error; err != nil {
		t.Fatalf("VACUUM INTO while the server runs: %v", err)
	}
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.Close()
	}
	livePath := strings.TrimPrefix(live, "sqlite://")
	restores := []string{online}
	// The documented command, when the sqlite3 shell is here (idcli does
	// not need it, so CI does not install it).
	if sqlite3, err := exec.LookPath("sqlite3"); err == nil {
		shell := filepath.Join(backups, "shell.db")
		runTool(t, sqlite3, livePath, "VACUUM INTO '"+shell+"'")
		restores = append(restores, shell)
	} else {
		t.Logf("no sqlite3 shell: VACUUM INTO tested through the driver only")
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(livePath + suffix); err == nil {
			t.Errorf("%s left after the server stopped: a plain copy of the database file alone would miss it", filepath.Base(livePath+suffix))
		}
	}
	copied := filepath.Join(backups, "copied.db")
	b, err := os.ReadFile(livePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copied, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range append(restores, copied) {
		url := "sqlite://" + path
		if r := runCLI(ctx, dir, nil, "server", "db:migrate", "--database-url", url); r.err != nil || r.stdout != "" {
			t.Fatalf("db:migrate on %s: %q %v, want nothing to do", filepath.Base(path), r.stdout, r.err)
		}
		s := startServerOn(t, freePort(t), dir, url, "--bind", "127.0.0.1")
		f.check(t, s, "restored from "+filepath.Base(path))
		if err := s.stop(); err != nil {
			t.Fatal(err)
		}
	}
}
