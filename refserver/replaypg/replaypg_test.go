package replaypg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/replaypg"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// migrated applies the reference server's migrations, which create
// replay_nonces.
func migrated(t *testing.T, db *gorm.DB) {
	t.Helper()
	if err := store.Migrate(context.Background(), db, nil); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
}

func newStore(t *testing.T, db *gorm.DB, cfg replaypg.Config) *replaypg.Store {
	t.Helper()
	cfg.DB = db
	s, err := replaypg.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func count(t *testing.T, db *gorm.DB) int64 {
	t.Helper()
	var n int64
	if err := db.Table("replay_nonces").Count(&n).Error; err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

func TestSeen(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		migrated(t, db)
		ctx := context.Background()
		clk := signertest.NewClock(t0)
		s := newStore(t, db, replaypg.Config{Now: clk.Now})
		steps := []struct {
			name string
			now  time.Time
			key  string
			exp  time.Time
			want bool
		}{
			{"first use", t0, "kid a", t0.Add(5 * time.Minute), false},
			{"second use", t0, "kid a", t0.Add(5 * time.Minute), true},
			{"other nonce", t0, "kid b", t0.Add(5 * time.Minute), false},
			{"just before expiry", t0.Add(5*time.Minute - time.Millisecond), "kid a", t0.Add(10 * time.Minute), true},
			{"after expiry the row counts as unseen", t0.Add(6 * time.Minute), "kid a", t0.Add(11 * time.Minute), false},
			{"revived row is seen again", t0.Add(6 * time.Minute), "kid a", t0.Add(11 * time.Minute), true},
			{"past expiry kept MinTTL", t0.Add(7 * time.Minute), "kid c", t0, false},
			{"past expiry seen within MinTTL", t0.Add(7*time.Minute + 500*time.Millisecond), "kid c", t0, true},
		}
		for _, st := range steps {
			clk.Set(st.now)
			got, err := s.Seen(ctx, st.key, st.exp)
			if err != nil {
				t.Fatalf("%s: Seen: %v", st.name, err)
			}
			if got != st.want {
				t.Errorf("%s: Seen(%q) = %v, want %v", st.name, st.key, got, st.want)
			}
		}
	})
}

func TestSeenConcurrent(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		migrated(t, db)
		s := newStore(t, db, replaypg.Config{})
		const n = 50
		var (
			wg     sync.WaitGroup
			unseen atomic.Int64
			errMu  sync.Mutex
			errs   []error
		)
		start := make(chan struct{})
		exp := time.Now().Add(time.Minute)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				seen, err := s.Seen(context.Background(), "kid same", exp)
				if err != nil {
					errMu.Lock()
					errs = append(errs, err)
					errMu.Unlock()
					return
				}
				if !seen {
					unseen.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("Seen errors: %v", errs)
		}
		if got := unseen.Load(); got != 1 {
			t.Errorf("calls that saw the key first = %d, want 1", got)
		}
	})
}

func TestPurge(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		migrated(t, db)
		ctx := context.Background()
		clk := signertest.NewClock(t0)
		s := newStore(t, db, replaypg.Config{Now: clk.Now, PurgeBatch: 3})
		for i := range 10 {
			if _, err := s.Seen(ctx, fmt.Sprintf("kid old-%d", i), t0.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 4 {
			if _, err := s.Seen(ctx, fmt.Sprintf("kid new-%d", i), t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		clk.Set(t0.Add(2 * time.Minute))
		n, err := s.Purge(ctx)
		if err != nil {
			t.Fatalf("Purge: %v", err)
		}
		if n != 10 {
			t.Errorf("Purge deleted %d rows, want 10", n)
		}
		if got := count(t, db); got != 4 {
			t.Errorf("rows left = %d, want 4", got)
		}
		// The unexpired nonces are still remembered.
		if seen, err := s.Seen(ctx, "kid new-0", t0.Add(time.Hour)); err != nil || !seen {
			t.Errorf("Seen(kid new-0) after purge = %v, %v; want true, nil", seen, err)
		}
		if n, err := s.Purge(ctx); err != nil || n != 0 {
			t.Errorf("second Purge = %d, %v; want 0, nil", n, err)
		}
	})
}

func TestStartPurgesInBackground(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		migrated(t, db)
		ctx := context.Background()
		clk := signertest.NewClock(t0)
		s := newStore(t, db, replaypg.Config{Now: clk.Now, PurgeInterval: 10 * time.Millisecond})
		for i := range 5 {
			if _, err := s.Seen(ctx, fmt.Sprintf("kid %d", i), t0.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		clk.Set(t0.Add(2 * time.Minute))
		stop := s.Start(ctx)
		defer stop()
		deadline := time.Now().Add(10 * time.Second)
		for count(t, db) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("rows left after 10 s = %d, want 0", count(t, db))
			}
			time.Sleep(10 * time.Millisecond)
		}
		stop()
		stop() // idempotent
	})
}

func TestSeenDatabaseError(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		// No migration: the table does not exist, so the statement fails.
		s := newStore(t, db, replaypg.Config{})
		seen, err := s.Seen(context.Background(), "kid x", time.Now().Add(time.Minute))
		if !errors.Is(err, middleware.ErrReplayStore) {
			t.Errorf("Seen error = %v, want one wrapping middleware.ErrReplayStore", err)
		}
		if seen {
			t.Errorf("Seen = true on error, want false")
		}
	})
}

func TestNewValidates(t *testing.T) {
	for name, cfg := range map[string]replaypg.Config{
		"no db":            {},
		"negative timeout": {DB: &gorm.DB{}, Timeout: -1},
		"negative batch":   {DB: &gorm.DB{}, MaxBatch: -1},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := replaypg.New(cfg); err == nil {
				t.Errorf("New error = nil, want an error")
			}
		})
	}
}

// TestSeenCancelled checks that a call alone (which runs its own
// statement) whose context is done fails with an error wrapping
// middleware.ErrReplayStore and the context's error, reports nothing as
// seen, and leaves the store working.
func TestSeenCancelled(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		migrated(t, db)
		s := newStore(t, db, replaypg.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		seen, err := s.Seen(ctx, "kid cancelled", time.Now().Add(time.Minute))
		if !errors.Is(err, middleware.ErrReplayStore) || !errors.Is(err, context.Canceled) {
			t.Errorf("Seen with a cancelled context: error %v, want one wrapping middleware.ErrReplayStore and context.Canceled", err)
		}
		if seen {
			t.Errorf("Seen with a cancelled context = true, want false")
		}
		// The store still works for the next call.
		if seen, err := s.Seen(context.Background(), "kid after", time.Now().Add(time.Minute)); err != nil || seen {
			t.Errorf("Seen after a cancelled call = %v, %v; want false, nil", seen, err)
		}
	})
}
