package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/redact"
)

// instances opens n more handles on databaseURL, each its own pool, as
// server instances sharing the database.
func instances(t *testing.T, databaseURL string, n int) []*store.DB {
	t.Helper()
	dbs := make([]*store.DB, n)
	for i := range dbs {
		db, err := store.Open(context.Background(), databaseURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		dbs[i] = db
	}
	return dbs
}

func cursorOf(t *testing.T, db *store.DB) store.WebhookCursor {
	t.Helper()
	cs, err := db.WebhookCursors(context.Background())
	if err != nil || len(cs) != 1 {
		t.Fatalf("WebhookCursors = %d cursors, %v; want 1", len(cs), err)
	}
	return cs[0]
}

// TestWebhookCursor: a new URL starts after the newest outbox row; one
// instance at a time holds a URL's lease, however many claim at once;
// the cursor moves forward only, for the lease's owner only; a failure
// puts the next attempt off and frees the URL; an expired lease (its
// owner died) lets another instance take over; a release frees it at
// once. Both databases.
func TestWebhookCursor(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			u := b.URL(t)
			f := newAuditFixture(t, u) // one registration: one outbox row
			dbs := instances(t, u, 6)
			a := dbs[0]
			const url = "https://hooks.example/agentid?token=s3cret"

			var wg sync.WaitGroup
			for _, db := range dbs {
				wg.Add(1)
				go func() { defer wg.Done(); db.EnsureWebhookCursor(ctx, url) }()
			}
			wg.Wait()
			first, err := a.OutboxAfter(ctx, 0, 10)
			if err != nil || len(first) != 1 {
				t.Fatalf("outbox before = %d rows, %v; want the registration", len(first), err)
			}
			cur := cursorOf(t, a)
			if cur.LastEventID != first[0].ID || cur.Attempts != 0 || strings.Contains(cur.URL, "s3cret") || cur.URL != redact.HostOnly(url) {
				t.Errorf("new cursor = %+v; want it after outbox row %d, the URL named by its host", cur, first[0].ID)
			}

			for i := range 3 {
				f.register(t, fmt.Sprintf("agent-%024x", i+1), nil)
			}
			var won atomic.Int32
			var owner atomic.Value
			for i, db := range dbs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, ok, err := db.ClaimWebhook(ctx, url, fmt.Sprintf("instance-%d", i), 5*time.Second); err != nil {
						t.Errorf("instance %d: ClaimWebhook: %v", i, err)
					} else if ok {
						won.Add(1)
						owner.Store(i)
					}
				}()
			}
			wg.Wait()
			if won.Load() != 1 {
				t.Fatalf("%d instances hold the lease, want 1", won.Load())
			}
			a = dbs[owner.Load().(int)]
			aName := fmt.Sprintf("instance-%d", owner.Load().(int))
			c := dbs[(owner.Load().(int)+1)%len(dbs)]
			events, err := a.OutboxAfter(ctx, cur.LastEventID, 10)
			if err != nil || len(events) != 3 || events[0].ID >= events[1].ID || events[0].Kind != store.ActionRegister || len(events[0].EventID) != 32 {
				t.Fatalf("OutboxAfter = %+v, %v; want the 3 registrations in id order", events, err)
			}
			if ok, err := c.AdvanceWebhook(ctx, url, "intruder", events[0].ID, time.Second); ok || err != nil {
				t.Errorf("AdvanceWebhook by a non-owner = %v, %v; want false", ok, err)
			}
			if ok, err := a.AdvanceWebhook(ctx, url, aName, events[1].ID, 5*time.Second); !ok || err != nil {
				t.Errorf("AdvanceWebhook by the owner = %v, %v; want true", ok, err)
			}
			if ok, _ := a.AdvanceWebhook(ctx, url, aName, events[0].ID, 5*time.Second); ok {
				t.Errorf("AdvanceWebhook backwards moved the cursor")
			}
			if got := cursorOf(t, a).LastEventID; got != events[1].ID {
				t.Errorf("cursor at %d, want %d", got, events[1].ID)
			}

			// A failure: the next attempt in 1.5 s, the URL free then.
			cause := "webhook https://hooks.example/agentid?token=xxxxx answered 503\x1b[31m" + strings.Repeat("x", 400)
			if err := a.FailWebhook(ctx, url, aName, 1500*time.Millisecond, cause); err != nil {
				t.Fatal(err)
			}
			if _, ok, _ := c.ClaimWebhook(ctx, url, "other", 5*time.Second); ok {
				t.Errorf("claimed before the next attempt is due")
			}
			cur = cursorOf(t, a)
			if cur.Attempts != 1 || cur.LeaseOwner != "" || len(cur.LastError) > 300 || strings.ContainsAny(cur.LastError, "\x1b") || !strings.Contains(cur.LastError, "answered 503") {
				t.Errorf("after a failure: %+v; want 1 attempt, no lease, the cause cut and without control characters", cur)
			}
			time.Sleep(1600 * time.Millisecond)
			got, ok, err := c.ClaimWebhook(ctx, url, "other", time.Second)
			if !ok || err != nil || got.Attempts != 1 || got.LastEventID != events[1].ID {
				t.Fatalf("claim when due = %+v, %v, %v", got, ok, err)
			}

			// "other" dies holding a 1 s lease: a takes over once it expires.
			if _, ok, _ := a.ClaimWebhook(ctx, url, aName, 5*time.Second); ok {
				t.Errorf("claimed while another's lease runs")
			}
			time.Sleep(1100 * time.Millisecond)
			if _, ok, err := a.ClaimWebhook(ctx, url, aName, 5*time.Second); !ok || err != nil {
				t.Fatalf("claim after the lease expired = %v, %v; want true", ok, err)
			}
			if ok, _ := c.AdvanceWebhook(ctx, url, "other", events[2].ID, time.Second); ok {
				t.Errorf("the dead owner moved the cursor after losing the lease")
			}
			if ok, _ := a.AdvanceWebhook(ctx, url, aName, events[2].ID, 5*time.Second); !ok {
				t.Errorf("the new owner could not move the cursor")
			}
			cur = cursorOf(t, a)
			if cur.Attempts != 0 || cur.LastError != "" || cur.LastEventID != events[2].ID {
				t.Errorf("after a delivery: %+v; want the failures forgotten", cur)
			}
			if err := a.ReleaseWebhook(ctx, url, aName); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := c.ClaimWebhook(ctx, url, "other", time.Second); !ok || err != nil {
				t.Errorf("claim after a release = %v, %v; want true", ok, err)
			}
		})
	}
}

// TestPruneOutbox: old outbox rows go once every cursor has passed them,
// not before; a cursor nobody touched for the retention goes, and holds
// nothing back any more; recent rows stay.
func TestPruneOutbox(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newAuditFixture(t, b.URL(t))
			db := f.db
			const url = "https://hooks.example/a"
			if err := db.EnsureWebhookCursor(ctx, url); err != nil {
				t.Fatal(err)
			}
			for i := range 4 {
				f.register(t, fmt.Sprintf("agent-%024x", i+1), nil)
			}
			rows, _ := db.OutboxAfter(ctx, 0, 10)
			if len(rows) != 5 {
				t.Fatalf("%d outbox rows, want 5", len(rows))
			}
			g := db.Gorm()
			long := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
			// All but the newest are old; the cursor has passed the first 3.
			if err := g.Exec(`UPDATE outbox_events SET created_at = ? WHERE id < ?`, long, rows[4].ID).Error; err != nil {
				t.Fatal(err)
			}
			if _, ok, _ := db.ClaimWebhook(ctx, url, "me", time.Minute); !ok {
				t.Fatal("no lease")
			}
			if ok, _ := db.AdvanceWebhook(ctx, url, "me", rows[2].ID, time.Minute); !ok {
				t.Fatal("no advance")
			}
			left := func() []uint64 {
				rs, _ := db.OutboxAfter(ctx, 0, 10)
				var ids []uint64
				for _, r := range rs {
					ids = append(ids, r.ID)
				}
				return ids
			}
			if err := db.PruneOutbox(ctx, time.Hour); err != nil {
				t.Fatal(err)
			}
			if got, want := fmt.Sprint(left()), fmt.Sprint([]uint64{rows[3].ID, rows[4].ID}); got != want {
				t.Errorf("after a prune: rows %s, want %s (old and passed gone; the cursor holds the rest)", got, want)
			}
			// The URL is configured nowhere any more: its cursor ages out.
			if err := g.Exec(`UPDATE webhook_cursors SET updated_at = ?`, long).Error; err != nil {
				t.Fatal(err)
			}
			if err := db.PruneOutbox(ctx, time.Hour); err != nil {
				t.Fatal(err)
			}
			if got, want := fmt.Sprint(left()), fmt.Sprint([]uint64{rows[4].ID}); got != want {
				t.Errorf("after the cursor aged out: rows %s, want %s (the recent one stays)", got, want)
			}
			if cs, _ := db.WebhookCursors(ctx); len(cs) != 0 {
				t.Errorf("%d cursors left, want the stale one gone", len(cs))
			}
		})
	}
}
