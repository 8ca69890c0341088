package metrics_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware/metrics"
)

// The inventory gauges come from one count per MinInventoryEvery whatever
// the number of scrapes (concurrent ones share it); a failed count keeps
// the last values and their timestamp; before any success the families
// are left out.
func TestInventoryCountedAtABoundedRate(t *testing.T) {
	reg := metrics.NewRegistry()
	var calls atomic.Int32
	var fail atomic.Bool
	count := func(ctx context.Context) (metrics.Inventory, error) {
		n := int64(calls.Add(1))
		time.Sleep(10 * time.Millisecond) // long enough for scrapes to overlap
		if fail.Load() {
			return metrics.Inventory{}, errors.New("database down")
		}
		return metrics.Inventory{
			Agents: map[string]int64{"active": 10 * n, "no_keys": 0, "pending": 1},
			Keys:   map[string]int64{"active": 7, "revoked": n},
		}, nil
	}
	reg.CountInventory(count, time.Second) // raised to MinInventoryEvery
	now := time.Unix(1_800_000_000, 0)
	var mu sync.Mutex
	metrics.SetInventoryClock(reg, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	srv := httptest.NewServer(reg.Handler())
	defer srv.Close()

	fail.Store(true)
	if e := scrape(t, srv.URL); e.types["agentid_agents"] != "" || e.types["agentid_keys"] != "" {
		t.Errorf("families exposed before any successful count: %v", e.types)
	}
	fail.Store(false)
	advance(metrics.MinInventoryEvery)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { scrape(t, srv.URL) })
	}
	wg.Wait()
	if got := calls.Load(); got != 2 {
		t.Fatalf("count called %d times for a failed scrape and 8 concurrent ones, want 2", got)
	}
	e := scrape(t, srv.URL)
	if e.types["agentid_agents"] != "gauge" || e.types["agentid_keys"] != "gauge" {
		t.Errorf("types: %v, want gauges", e.types)
	}
	e.want(t, `agentid_agents{state="active"}`, 20)
	e.want(t, `agentid_agents{state="no_keys"}`, 0)
	e.want(t, `agentid_agents{state="pending"}`, 1)
	e.want(t, `agentid_keys{state="active"}`, 7)
	e.want(t, `agentid_keys{state="revoked"}`, 2)
	e.want(t, `agentid_inventory_counted_timestamp_seconds`, float64(now.Unix()))
	counted := now

	advance(metrics.MinInventoryEvery - time.Second)
	scrape(t, srv.URL)
	if got := calls.Load(); got != 2 {
		t.Errorf("count called again %v after the last: %d calls, want 2", metrics.MinInventoryEvery-time.Second, got)
	}
	advance(time.Second)
	fail.Store(true)
	e = scrape(t, srv.URL)
	if got := calls.Load(); got != 3 {
		t.Errorf("count not called %v after the last: %d calls, want 3", metrics.MinInventoryEvery, got)
	}
	e.want(t, `agentid_agents{state="active"}`, 20) // the last good count
	e.want(t, `agentid_inventory_counted_timestamp_seconds`, float64(counted.Unix()))
	scrape(t, srv.URL)
	if got := calls.Load(); got != 3 {
		t.Errorf("a failed count retried at once: %d calls, want 3", got)
	}
	advance(metrics.MinInventoryEvery)
	fail.Store(false)
	e = scrape(t, srv.URL)
	e.want(t, `agentid_agents{state="active"}`, 40)
	e.want(t, `agentid_inventory_counted_timestamp_seconds`, float64(now.Unix()))
}
