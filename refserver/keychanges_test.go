package refserver_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware/metrics"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

// monoClock is a settable monotonic clock for the change log's bounds.
type monoClock struct{ d atomic.Int64 }

func (c *monoClock) Now() time.Duration      { return time.Duration(c.d.Load()) }
func (c *monoClock) Advance(d time.Duration) { c.d.Add(int64(d)) }

// failKeyChangeReads makes every query of key_changes through db fail
// while the returned flag is set (a dropped connection, as the reader of
// the log sees it).
func failKeyChangeReads(t *testing.T, db *gorm.DB) *atomic.Bool {
	t.Helper()
	var on atomic.Bool
	name := "test:fail_key_changes_" + dbtest.RandomHex(4)
	err := db.Callback().Query().Before("gorm:query").Register(name, func(tx *gorm.DB) {
		if on.Load() && tx.Statement.Table == "key_changes" {
			tx.AddError(errors.New("test: connection dropped"))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return &on
}

// TestKeyCacheAcrossInstances: instance B caches the keys it reads until
// the change log names them; a rotation through A is refused by B once B
// reads the log, and, when B cannot read the log, once its last complete
// read is 750 ms old (B then reads the database at every lookup until a
// read succeeds, which drops everything it cached).
func TestKeyCacheAcrossInstances(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		clock := signertest.NewClock(time.Now()) // stands still until advanced
		mono := &monoClock{}
		regB := metrics.NewRegistry()
		a := newTestEnvConfig(t, db, "", func(c *refserver.Config) { c.Now = clock.Now; refserver.ManualKeySync(c) })
		b := a.sibling(db, func(c *refserver.Config) { c.Now = clock.Now; c.Metrics = regB; refserver.ManualKeySync(c) })
		kb := b.srv.KeySource()
		kb.SetMonoClock(mono.Now)
		ctx := context.Background()
		syncB := func() {
			t.Helper()
			if !kb.SyncChanges(ctx) {
				t.Fatal("B: SyncChanges failed")
			}
		}
		k1, k2, k3, k4 := signertest.Key(111), signertest.Key(112), signertest.Key(113), signertest.Key(114)
		uid := a.register(k1)
		queries := countKeyQueries(t, db)
		whoami := func(what string, e *testEnv, key signer.PrivateKey, wantCode string) {
			t.Helper()
			r := e.send(e.whoamiReq(http.MethodGet, uid, key))
			code := ""
			if r.status != http.StatusOK {
				code = r.errorCode(t)
			}
			if code != wantCode {
				t.Fatalf("%s: status %d code %q, want code %q", what, r.status, code, wantCode)
			}
		}
		wantQueries := func(what string, want int64) {
			t.Helper()
			if got := queries.Load(); got != want {
				t.Errorf("%s: %d key queries, want %d", what, got, want)
			}
		}

		// Before B's first read of the log, nothing is cached.
		whoami("B before any read of the log", b, k1, "")
		whoami("B again", b, k1, "")
		wantQueries("B before any read of the log", 2)
		syncB()
		whoami("B reads k1 once read the log", b, k1, "")
		clock.Advance(10 * time.Second) // the server's clock does not expire cached keys
		for range 5 {
			whoami("B serves k1 from its cache", b, k1, "")
		}
		wantQueries("B with k1 cached", 3)

		if r := a.send(a.rotateReq(uid, k1, k2)); r.status != http.StatusOK {
			t.Fatalf("rotate through A: %d %s", r.status, r.body)
		}
		whoami("A refuses k1 at once (its cache was dropped)", a, k1, "revoked_key")
		whoami("B accepts k2 at once (a new kid is never served stale)", b, k2, "")
		whoami("B before reading the log still has k1 cached", b, k1, "")
		syncB()
		whoami("B refuses k1 once it read the log", b, k1, "revoked_key")
		whoami("B caches k2", b, k2, "")
		before := queries.Load()
		whoami("B serves k2 from its cache", b, k2, "")
		wantQueries("B with k2 cached", before)

		// The log cannot be read: within 750 ms of the last complete read
		// B may still use its cache; past it, it reads the database.
		failing := failKeyChangeReads(t, db)
		failing.Store(true)
		if r := a.send(a.rotateReq(uid, k2, k3)); r.status != http.StatusOK {
			t.Fatalf("rotate through A: %d %s", r.status, r.body)
		}
		if kb.SyncChanges(ctx) {
			t.Fatal("B: SyncChanges succeeded with the log unreadable")
		}
		mono.Advance(700 * time.Millisecond)
		whoami("B 700 ms after its last read of the log may still use k2", b, k2, "")
		mono.Advance(50 * time.Millisecond)
		whoami("B 750 ms after its last read of the log refuses k2 (read from the database)", b, k2, "revoked_key")
		before = queries.Load()
		for range 3 {
			whoami("B with the log unreadable accepts k3", b, k3, "")
		}
		wantQueries("B with the log unreadable reads the database at every lookup", before+3)

		// The log readable again: B's first read drops everything it
		// cached, then caches again.
		failing.Store(false)
		syncB()
		before = queries.Load()
		for range 3 {
			whoami("B once the log is read again", b, k3, "")
		}
		wantQueries("B once the log is read again caches k3", before+1)

		// A rotation with B stale and the log unreadable past its retention
		// is caught by the purge.
		failing.Store(true)
		mono.Advance(time.Second)
		if r := a.send(a.rotateReq(uid, k3, k4)); r.status != http.StatusOK {
			t.Fatalf("rotate through A: %d %s", r.status, r.body)
		}
		if err := db.Exec("DELETE FROM key_changes").Error; err != nil {
			t.Fatal(err)
		}
		failing.Store(false)
		syncB()
		whoami("B refuses k3 after a stale period whose changes were pruned", b, k3, "revoked_key")

		m := scrape(t, regB)
		if got := m[`agentid_key_cache_total{result="hit"}`]; got < 8 {
			t.Errorf("B key cache hits = %v, want at least 8", got)
		}
	})
}

// TestKeyChangeLogOrder: rows of the change log become visible in id
// order however many writers commit at once, so a reader that has read
// past an id never misses a smaller one.
func TestKeyChangeLogOrder(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		e := newTestEnvConfig(t, db, "", func(c *refserver.Config) { refserver.ManualKeySync(c) })
		const agents = 12
		keys := make([]signer.PrivateKey, agents)
		uids := make([]string, agents)
		for i := range keys {
			keys[i] = signertest.Key(byte(200 + i))
			uids[i] = e.register(keys[i])
		}
		// Read the log while rotations commit: each read's ids must extend
		// the previous read without a gap that a later read fills.
		var seen []uint64
		stop := make(chan struct{})
		readerDone := make(chan error, 1)
		go func() {
			var last uint64
			for {
				var ids []uint64
				if err := db.Model(&store.KeyChange{}).Where("id > ?", last).Order("id").Pluck("id", &ids).Error; err != nil {
					readerDone <- err
					return
				}
				seen = append(seen, ids...)
				if len(ids) > 0 {
					last = ids[len(ids)-1]
				}
				select {
				case <-stop:
					readerDone <- nil
					return
				default:
				}
			}
		}()
		var wg sync.WaitGroup
		for i := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := e.srv.RotateAgent(context.Background(), uids[i], keys[i].KeyID(), signertest.Key(byte(230+i)).Public); err != nil {
					t.Errorf("rotate %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		close(stop)
		if err := <-readerDone; err != nil {
			t.Fatal(err)
		}
		var all []uint64
		if err := db.Model(&store.KeyChange{}).Order("id").Pluck("id", &all).Error; err != nil {
			t.Fatal(err)
		}
		if len(all) != agents {
			t.Fatalf("change log holds %d rows, want %d (one per revoked key)", len(all), agents)
		}
		// A last read after the writers are done sees everything: the
		// reader may only have missed rows it reads at its end.
		var tail []uint64
		last := uint64(0)
		if len(seen) > 0 {
			last = seen[len(seen)-1]
		}
		db.Model(&store.KeyChange{}).Where("id > ?", last).Order("id").Pluck("id", &tail)
		seen = append(seen, tail...)
		if len(seen) != len(all) {
			t.Errorf("a reader following the log saw ids %v, the log holds %v: a row committed behind the reader", seen, all)
		}
	})
}

// TestRevocationReachesEveryInstanceUnderLoad: two instances, each with
// its own connections to one database, the background reader of the
// change log running. While instance B serves a stream of requests signed
// with k1, k1 is revoked by a rotation through A; on PostgreSQL, B's
// database connections are killed just before (a dropped connection: its
// reads of the log fail until it reconnects). Every request B begins more
// than 1 s after the rotation committed is refused with revoked_key.
func TestRevocationReachesEveryInstanceUnderLoad(t *testing.T) {
	t.Parallel()
	for _, backend := range dbtest.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			url := backend.URL(t)
			appName := "agentid_test_b_" + dbtest.RandomHex(4)
			urlB := url
			if backend.Name == "postgres" {
				urlB += "&application_name=" + appName
			}
			dbA := dbtest.Migrated(t, url)
			dbB := dbtest.Open(t, urlB)
			a := newTestEnvConfig(t, dbA, "", nil)
			b := newTestEnvConfig(t, dbB, a.base, nil)
			k1, k2 := signertest.Key(121), signertest.Key(122)
			uid := a.register(k1)

			type outcome struct {
				began  time.Time
				status int
				code   string
			}
			var (
				mu       sync.Mutex
				outcomes []outcome
				okBefore atomic.Int64
			)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						req := b.whoamiReq(http.MethodGet, uid, k1)
						began := time.Now()
						r, err := b.do(req)
						if err != nil {
							t.Errorf("B: %v", err)
							return
						}
						o := outcome{began: began, status: r.status}
						if r.status == http.StatusOK {
							okBefore.Add(1)
						} else {
							o.code = r.errorCode(t)
						}
						mu.Lock()
						outcomes = append(outcomes, o)
						mu.Unlock()
					}
				}()
			}
			// B serves k1 (from its cache) before the revocation.
			for deadline := time.Now().Add(10 * time.Second); okBefore.Load() < 50; {
				if time.Now().After(deadline) {
					close(stop)
					wg.Wait()
					t.Fatalf("B served %d requests with k1 in 10 s, want 50", okBefore.Load())
				}
				time.Sleep(5 * time.Millisecond)
			}
			if backend.Name == "postgres" {
				var n int64
				if err := dbA.Raw("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = ?", appName).Scan(&n).Error; err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					t.Fatal("no connection of B to terminate")
				}
			}
			if r := a.send(a.rotateReq(uid, k1, k2)); r.status != http.StatusOK {
				t.Fatalf("rotate through A: %d %s", r.status, r.body)
			}
			committed := time.Now() // the rotation committed before A answered
			time.Sleep(1500 * time.Millisecond)
			close(stop)
			wg.Wait()

			bound := committed.Add(time.Second)
			after, firstRefusal := 0, time.Time{}
			for _, o := range outcomes {
				if o.code == "revoked_key" && (firstRefusal.IsZero() || o.began.Before(firstRefusal)) {
					firstRefusal = o.began
				}
				if o.began.Before(bound) {
					continue
				}
				after++
				if o.status != http.StatusUnauthorized || o.code != "revoked_key" {
					t.Errorf("B, request begun %v after the rotation committed: status %d code %q, want 401 revoked_key",
						o.began.Sub(committed).Round(time.Millisecond), o.status, o.code)
				}
			}
			if after == 0 {
				t.Fatal("no request began more than 1 s after the rotation")
			}
			t.Logf("%d requests; B refused k1 from %v after the rotation committed; %d requests checked past 1 s",
				len(outcomes), firstRefusal.Sub(committed).Round(time.Millisecond), after)
		})
	}
}

// TestLookupPlansUseIndexes: on PostgreSQL, with 20,000 agents, keys and
// change log rows (analysed), the statements the key lookup and the read of
// the change log run are planned as index scans, not sequential scans.
func TestLookupPlansUseIndexes(t *testing.T) {
	t.Parallel()
	db := dbtest.Migrated(t, dbtest.PostgresURL(t))
	e := newTestEnvConfig(t, db, "", func(c *refserver.Config) { refserver.ManualKeySync(c) })
	const n = 20000
	for _, q := range []string{
		`INSERT INTO agents (uid, created_at, updated_at) SELECT 'agent-' || lpad(to_hex(g), 24, '0'), now(), now() FROM generate_series(1, ?) g`,
		`INSERT INTO public_jwks (kid, agent_uid, jwk, created_at) SELECT md5(g::text), 'agent-' || lpad(to_hex(g), 24, '0'), '{}', now() FROM generate_series(1, ?) g`,
		`INSERT INTO key_changes (kid, agent_uid, change, actor, created_at) SELECT md5(g::text), 'agent-' || lpad(to_hex(g), 24, '0'), 'revoke', 'test', now() FROM generate_series(1, ?) g`,
	} {
		if err := db.Exec(q, n).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Exec("ANALYZE").Error; err != nil {
		t.Fatal(err)
	}
	type stmt struct {
		sql  string
		vars []any
	}
	var mu sync.Mutex
	captured := map[string]stmt{}
	err := db.Callback().Query().After("gorm:query").Register("test:capture_plans", func(tx *gorm.DB) {
		if tbl := tx.Statement.Table; tbl == "public_jwks" || tbl == "key_changes" {
			mu.Lock()
			defer mu.Unlock()
			captured[tbl] = stmt{tx.Statement.SQL.String(), append([]any(nil), tx.Statement.Vars...)}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ks := e.srv.KeySource()
	ctx := context.Background()
	ks.SyncChanges(ctx) // the first read: MAX(id)
	ks.SyncChanges(ctx) // then the rows past it
	uid := "agent-" + "000000000000000000000abc"
	set := e.keySet(uid)
	ks.Key(ctx, set, signertest.Key(1).KeyID())
	for _, tbl := range []string{"public_jwks", "key_changes"} {
		st, ok := captured[tbl]
		if !ok {
			t.Fatalf("no statement on %s captured", tbl)
		}
		var lines []string
		if err := db.Raw("EXPLAIN "+st.sql, st.vars...).Scan(&lines).Error; err != nil {
			t.Fatalf("EXPLAIN %s: %v", st.sql, err)
		}
		plan := strings.Join(lines, "\n")
		if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "Index") {
			t.Errorf("plan of %s:\n%s\nwant index scans only", st.sql, plan)
		} else {
			t.Logf("%s\n%s", st.sql, plan)
		}
	}
}

// TestDeleteAgentsLogsChanges: agents deleted through AgentDB (idcli
// bench's cleanup) are dropped from every instance's cache once it reads
// the change log.
func TestDeleteAgentsLogsChanges(t *testing.T) {
	t.Parallel()
	for _, backend := range dbtest.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			url := backend.URL(t)
			db := dbtest.Migrated(t, url)
			e := newTestEnvConfig(t, db, "", refserver.ManualKeySync)
			ks := e.srv.KeySource()
			ctx := context.Background()
			ks.SyncChanges(ctx)
			key := signertest.Key(131)
			uid := e.register(key)
			if _, err := ks.Key(ctx, e.keySet(uid), key.KeyID()); err != nil {
				t.Fatal(err)
			}
			adb, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer adb.Close()
			if n, err := adb.DeleteAgents(ctx, []string{uid, "agent-aaaaaaaaaaaaaaaaaaaaaaaa"}); err != nil || n != 1 {
				t.Fatalf("DeleteAgents = %d, %v; want 1", n, err)
			}
			if _, err := ks.Key(ctx, e.keySet(uid), key.KeyID()); err != nil {
				t.Errorf("before reading the log: Key = %v, want the cached key", err)
			}
			if !ks.SyncChanges(ctx) {
				t.Fatal("SyncChanges failed")
			}
			if _, err := ks.Key(ctx, e.keySet(uid), key.KeyID()); !errors.Is(err, signer.ErrUnknownKey) {
				t.Errorf("after reading the log: Key error = %v, want %v", err, signer.ErrUnknownKey)
			}
		})
	}
}

// TestServerCloseStopsTheReader: once Close is called the change log is
// no longer read, and closing the database after it logs no failure.
func TestServerCloseStopsTheReader(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, dbtest.SQLiteURL(t))
	var reads atomic.Int64
	// Registered before the server exists: no reader runs yet.
	if err := db.Callback().Query().After("gorm:query").Register("test:count_change_reads", func(tx *gorm.DB) {
		if tx.Statement.Table == "key_changes" {
			reads.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	e := newTestEnvConfig(t, db, "", nil)
	key := signertest.Key(181)
	uid := e.register(key)
	ks := e.srv.KeySource()
	for reads.Load() < 2 { // the reader runs once a lookup wants it
		if _, err := ks.Key(context.Background(), e.keySet(uid), key.KeyID()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.srv.Close()
	e.srv.Close() // twice is fine; Close waited for a read in flight
	before := reads.Load()
	sqlDB, _ := db.DB()
	sqlDB.Close()
	for range 3 {
		ks.Key(context.Background(), e.keySet(uid), key.KeyID()) // does not start the reader again
	}
	time.Sleep(600 * time.Millisecond)
	if got := reads.Load(); got != before {
		t.Errorf("reads of the change log after Close: %d, want none", got-before)
	}
	if logs := e.logs.String(); strings.Contains(logs, "key change log unreadable") {
		t.Errorf("the reader logged a failure after Close:\n%s", logs)
	}
}

// TestNotifyWakesReaders (PostgreSQL): a change wakes every instance's
// reader of the change log at once through NOTIFY, without waiting for the
// interval (set to an hour here). When B's listening connection is killed
// the notification of the next change is lost: B still refuses the revoked
// key on every request begun 1 s after the change (its cache is stale,
// so it reads the database), and its listener reconnects for the changes
// after.
func TestNotifyWakesReaders(t *testing.T) {
	t.Parallel()
	url := dbtest.PostgresURL(t)
	appName := "agentid_test_listen_" + dbtest.RandomHex(4)
	dbA := dbtest.Migrated(t, url)
	dbB := dbtest.Open(t, url+"&application_name="+appName)
	a := newTestEnvConfig(t, dbA, "", nil)
	b := newTestEnvConfig(t, dbB, a.base, nil)
	kb := b.srv.KeySource()
	kb.SetChangeInterval(time.Hour)
	keys := []signer.PrivateKey{signertest.Key(191), signertest.Key(192), signertest.Key(193)}
	uid := a.register(keys[0])
	whoamiB := func(key signer.PrivateKey) (int, string) {
		r := b.send(b.whoamiReq(http.MethodGet, uid, key))
		if r.status == http.StatusOK {
			return r.status, ""
		}
		return r.status, r.errorCode(t)
	}
	if st, code := whoamiB(keys[0]); st != http.StatusOK {
		t.Fatalf("B: %d %s", st, code)
	}
	waitReads := func(what string, after int64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); kb.ChangeReads() <= after; {
			if time.Now().After(deadline) {
				t.Fatalf("%s: B read the change log %d times in 10 s, want more than %d (no notification woke it)", what, kb.ChangeReads(), after)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitReads("B's first read", 0)

	before := kb.ChangeReads()
	if r := a.send(a.rotateReq(uid, keys[0], keys[1])); r.status != http.StatusOK {
		t.Fatalf("rotate: %d %s", r.status, r.body)
	}
	waitReads("after a rotation through A", before)
	if st, code := whoamiB(keys[0]); code != "revoked_key" {
		t.Errorf("B once woken: %d %q, want revoked_key", st, code)
	}

	// Lose the next notification: kill B's connections (the listener's
	// among them).
	var n int64
	if err := dbA.Raw("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = ?", appName).Scan(&n).Error; err != nil || n == 0 {
		t.Fatalf("terminate B's connections: %d, %v", n, err)
	}
	if r := a.send(a.rotateReq(uid, keys[1], keys[2])); r.status != http.StatusOK {
		t.Fatalf("rotate: %d %s", r.status, r.body)
	}
	changed := time.Now()
	for {
		began := time.Now()
		st, code := whoamiB(keys[1])
		if code == "revoked_key" {
			break
		}
		if began.After(changed.Add(time.Second)) {
			t.Fatalf("B, %v after a rotation whose notification was lost: %d %q, want revoked_key", began.Sub(changed).Round(time.Millisecond), st, code)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The listener is back within about a second; the next change wakes B.
	time.Sleep(1500 * time.Millisecond)
	before = kb.ChangeReads()
	adb := store.New(dbA)
	if _, _, err := adb.SetAgentDisabled(context.Background(), uid, true, "test"); err != nil {
		t.Fatal(err)
	}
	waitReads("after the listener reconnected", before)
	if st, code := whoamiB(keys[2]); code != "forbidden" {
		t.Errorf("B after the agent was disabled: %d %q, want forbidden", st, code)
	}
}
