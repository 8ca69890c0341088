package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/internal/webhook"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
)

// flaky is a receiver that answers 503 until up is set, recording every
// event it takes (repeats included).
type flaky struct {
	*httptest.Server
	up       atomic.Bool
	refused  atomic.Int64
	mu       sync.Mutex
	received []string
}

func newFlaky(t *testing.T) *flaky {
	f := &flaky{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !f.up.Load() {
			f.refused.Add(1)
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		var ev webhook.Event
		json.NewDecoder(r.Body).Decode(&ev)
		f.mu.Lock()
		f.received = append(f.received, ev.ID)
		f.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *flaky) ids() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.received...)
}

// TestWorkersDeliverEverything: two workers (two instances) share one
// database and one webhook; the receiver refuses for a while, then takes
// events; every event of the outbox arrives, in order of first arrival,
// and the cursor ends past the last with the failures forgotten. Both
// databases (SQLite as a file, shared by two pools).
func TestWorkersDeliverEverything(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			u := b.URL(t)
			dbtest.Migrated(t, u)
			ctx := context.Background()
			open := func() *store.DB {
				db, err := store.Open(ctx, u)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				return db
			}
			dbA, dbB := open(), open()
			rc := newFlaky(t)
			url := rc.URL + "/hook"
			if err := dbA.EnsureWebhookCursor(ctx, url); err != nil {
				t.Fatal(err)
			}
			key := signertest.Key(3)
			worker := func(db *store.DB, name string) *webhook.Worker {
				return &webhook.Worker{DB: db, URLs: []string{url}, Owner: name, Poll: 20 * time.Millisecond, Batch: 3,
					MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
					Deliverer: &webhook.Deliverer{Client: keyfetch.NewClient(true, time.Second), Key: key, Origin: "https://agentid.example", Timeout: time.Second}}
			}
			wctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			for _, w := range []*webhook.Worker{worker(dbA, "a"), worker(dbB, "b")} {
				wg.Add(1)
				go func() { defer wg.Done(); w.Run(wctx) }()
			}
			defer func() { stop(); wg.Wait() }()

			const n = 10
			for i := range n {
				k := signertest.Key(byte(10 + i))
				if err := dbA.CreateAgent(ctx, store.NewAgent{UID: fmt.Sprintf("agent-%024x", i+1), Kid: k.KeyID(), JWK: k.Public.JWK.MarshalPublic(), Now: time.Now().UTC()}); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(10 * time.Second)
			for rc.refused.Load() < 3 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			cs, _ := dbA.WebhookCursors(ctx)
			if len(cs) != 1 || cs[0].Attempts == 0 || cs[0].LastError == "" {
				t.Errorf("while the receiver is down: cursor %+v; want failed attempts recorded", cs)
			}
			rc.up.Store(true)
			outbox, err := dbA.OutboxAfter(ctx, 0, 100)
			if err != nil || len(outbox) != n {
				t.Fatalf("outbox: %d rows, %v", len(outbox), err)
			}
			for time.Now().Before(deadline) {
				if cs, _ := dbA.WebhookCursors(ctx); len(cs) == 1 && cs[0].LastEventID == outbox[n-1].ID {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			got := rc.ids()
			first := map[string]int{}
			var order []string
			for _, id := range got {
				if _, ok := first[id]; !ok {
					first[id] = len(order)
					order = append(order, id)
				}
			}
			if len(order) != n {
				t.Fatalf("%d distinct events arrived (%d posts), want %d", len(order), len(got), n)
			}
			for i, e := range outbox {
				if order[i] != e.EventID {
					t.Errorf("arrival %d is %s, want %s (outbox order)", i, order[i], e.EventID)
				}
			}
			cs, _ = dbA.WebhookCursors(ctx)
			if cs[0].Attempts != 0 || cs[0].LastError != "" {
				t.Errorf("after recovery: cursor %+v; want the failures forgotten", cs[0])
			}
		})
	}
}
