package replaypg_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/replaypg"
	"github.com/agentid/agentid/refserver/store"
	"gorm.io/gorm"
)

// seenRes is one call's answer in a batch.
type seenRes struct {
	seen bool
	err  error
}

// runOneBatch hands keys to the store as one batch and returns each call's
// answer in order.
func runOneBatch(t *testing.T, s *replaypg.Store, keys []string, expiry time.Time) []seenRes {
	t.Helper()
	seen, errs, ok := s.RunOneBatch(keys, expiry)
	out := make([]seenRes, len(keys))
	for i := range keys {
		if !ok[i] {
			t.Fatalf("call %d (%.20q) got no answer", i, keys[i])
		}
		out[i] = seenRes{seen[i], errs[i]}
	}
	return out
}

func migratedStore(t testing.TB, db *gorm.DB) *replaypg.Store {
	t.Helper()
	if err := store.Migrate(context.Background(), db, nil); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	s, err := replaypg.New(replaypg.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// refuseDigest installs a trigger that makes any insert of key's digest
// fail, on either database.
func refuseDigest(t *testing.T, db *gorm.DB, key string) {
	t.Helper()
	sum := sha256.Sum256([]byte(key))
	h := hex.EncodeToString(sum[:])
	var stmts []string
	if db.Dialector.Name() == "postgres" {
		stmts = []string{
			`CREATE FUNCTION refuse_test_digest() RETURNS trigger AS $$ BEGIN ` +
				`IF NEW.key_hash = decode('` + h + `', 'hex') THEN RAISE EXCEPTION 'forced failure'; END IF; ` +
				`RETURN NEW; END $$ LANGUAGE plpgsql`,
			`CREATE TRIGGER refuse_test_digest BEFORE INSERT ON replay_nonces ` +
				`FOR EACH ROW EXECUTE FUNCTION refuse_test_digest()`,
		}
	} else {
		stmts = []string{`CREATE TRIGGER refuse_test_digest BEFORE INSERT ON replay_nonces ` +
			`WHEN NEW.key_hash = X'` + h + `' BEGIN SELECT RAISE(ABORT, 'forced failure'); END`}
	}
	for _, q := range stmts {
		if err := db.Exec(q).Error; err != nil {
			t.Fatalf("install trigger: %v", err)
		}
	}
}

// TestBatchFailureIsolated: a batch whose statement fails because of one
// key answers every other call in it; only the bad key's call errors.
func TestBatchFailureIsolated(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		s := migratedStore(t, db)
		refuseDigest(t, db, "kid bad")
		exp := time.Now().Add(time.Minute)
		keys := []string{"kid good-1", "kid bad", "kid good-2", "kid good-1"}
		got := runOneBatch(t, s, keys, exp)
		wantSeen := []bool{false, false, false, true}
		for i, r := range got {
			if keys[i] == "kid bad" {
				if !errors.Is(r.err, middleware.ErrReplayStore) {
					t.Errorf("%s: error = %v, want one wrapping middleware.ErrReplayStore", keys[i], r.err)
				}
				continue
			}
			if r.err != nil || r.seen != wantSeen[i] {
				t.Errorf("call %d %s: seen, err = %v, %v; want %v, nil", i, keys[i], r.seen, r.err, wantSeen[i])
			}
		}
		// The good keys were recorded: a second batch sees them.
		for i, r := range runOneBatch(t, s, []string{"kid good-1", "kid good-2"}, exp) {
			if r.err != nil || !r.seen {
				t.Errorf("replay %d: seen, err = %v, %v; want true, nil", i, r.seen, r.err)
			}
		}
	})
}

// TestLongKeysStoredAsDigests: 3,000-character nonces in one batch with
// normal ones all succeed (a row is 32 bytes of digest whatever the key
// length), and only digests reach the table.
func TestLongKeysStoredAsDigests(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		s := migratedStore(t, db)
		exp := time.Now().Add(time.Minute)
		var keys []string
		for i := range 10 {
			keys = append(keys, "https://agent-a.example kid-a "+strings.Repeat(string(rune('a'+i)), 3000))
			keys = append(keys, "https://agent-b.example kid-b nonce-"+string(rune('a'+i)))
		}
		for i, r := range runOneBatch(t, s, keys, exp) {
			if r.err != nil || r.seen {
				t.Errorf("first use %d (%d chars): seen, err = %v, %v; want false, nil", i, len(keys[i]), r.seen, r.err)
			}
		}
		for i, r := range runOneBatch(t, s, keys, exp) {
			if r.err != nil || !r.seen {
				t.Errorf("replay %d (%d chars): seen, err = %v, %v; want true, nil", i, len(keys[i]), r.seen, r.err)
			}
		}
		want := map[string]bool{}
		for _, k := range keys {
			sum := sha256.Sum256([]byte(k))
			want[string(sum[:])] = true
		}
		var stored [][]byte
		rows, err := db.Raw("SELECT key_hash FROM " + "replay_nonces").Rows()
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var b []byte
			if err := rows.Scan(&b); err != nil {
				t.Fatal(err)
			}
			stored = append(stored, b)
		}
		if len(stored) != len(keys) {
			t.Errorf("rows = %d, want %d", len(stored), len(keys))
		}
		for _, b := range stored {
			if len(b) != sha256.Size || !want[string(b)] {
				t.Errorf("stored key_hash %x is not the SHA-256 of a key", b)
			}
		}
	})
}

// TestLinger: a call after a pause runs at once (with an hour of Linger,
// a wait would hang the test); then, in a dense stream of concurrent
// calls, they wait for one another and share one statement.
func TestLinger(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		migrated(t, db)
		const n = 4
		s := newStore(t, db, replaypg.Config{Linger: time.Hour, LingerBatch: n})
		exp := time.Now().Add(time.Minute)
		if seen, err := s.Seen(context.Background(), "kid first", exp); err != nil || seen {
			t.Fatalf("first Seen = %v, %v; want false, nil", seen, err)
		}
		if got := s.Statements(); got != 1 {
			t.Fatalf("statements after the first call = %d, want 1", got)
		}
		s.SetDense(n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if seen, err := s.Seen(context.Background(), fmt.Sprint("kid dense ", i), exp); err != nil || seen {
					t.Errorf("Seen %d = %v, %v; want false, nil", i, seen, err)
				}
			}()
		}
		wg.Wait()
		if got := s.Statements(); got != 2 {
			t.Errorf("statements = %d, want 2 (the %d dense calls in one)", got, n)
		}
		if got := count(t, db); got != n+1 {
			t.Errorf("rows = %d, want %d", got, n+1)
		}
	})
}

// TestPostgresUsesPgx: on PostgreSQL through OpenDB, Seen's statement runs
// on pgx directly rather than falling back to gorm.
func TestPostgresUsesPgx(t *testing.T) {
	db := dbtest.Open(t, dbtest.PostgresURL(t))
	s := migratedStore(t, db)
	for i := range 3 {
		if _, err := s.Seen(context.Background(), fmt.Sprint("kid pgx ", i), time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if !s.UsesPgx() {
		t.Errorf("UsesPgx = false, want true")
	}
}

// TestLingerDuplicates: concurrent callers in a dense stream (so batches
// linger), each key sent by two of them: every key is new to exactly one
// call.
func TestLingerDuplicates(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		migrated(t, db)
		s := newStore(t, db, replaypg.Config{Linger: time.Millisecond})
		const callers, keys = 8, 40
		exp := time.Now().Add(time.Minute)
		var fresh [callers / 2][keys]atomic.Int32
		var wg sync.WaitGroup
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range keys {
					seen, err := s.Seen(context.Background(), fmt.Sprintf("kid %d-%d", c/2, k), exp)
					if err != nil {
						t.Errorf("Seen: %v", err)
						return
					}
					if !seen {
						fresh[c/2][k].Add(1)
					}
				}
			}()
		}
		wg.Wait()
		for p := range fresh {
			for k := range fresh[p] {
				if n := fresh[p][k].Load(); n != 1 {
					t.Errorf("key %d-%d: new to %d calls, want 1", p, k, n)
				}
			}
		}
	})
}

// TestObserveStatement: each statement Seen runs on PostgreSQL's driver
// directly reaches Config.ObserveStatement (the server's database metric
// counts them, as gorm's callbacks count every other statement).
func TestObserveStatement(t *testing.T) {
	db := dbtest.Open(t, dbtest.PostgresURL(t))
	migrated(t, db)
	var observed atomic.Int32
	s := newStore(t, db, replaypg.Config{ObserveStatement: func(d time.Duration) {
		if d <= 0 {
			t.Errorf("statement observed with duration %v", d)
		}
		observed.Add(1)
	}})
	for i := range 3 {
		if _, err := s.Seen(context.Background(), fmt.Sprint("kid observed ", i), time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if n := observed.Load(); n != 3 {
		t.Errorf("%d statements observed, want 3 (one per sequential call)", n)
	}
}
