package metrics

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"
)

// Inventory is what the database holds: agents by state and keys by state
// (label values from a fixed set, never an identity).
type Inventory struct {
	Agents map[string]int64
	Keys   map[string]int64
}

// MinInventoryEvery is the shortest interval between two inventory counts
// (CountInventory): scrapes in between are answered from the last count.
const MinInventoryEvery = 15 * time.Second

// inventory is the last count of a CountInventory function, counted at
// most once per every whatever the number of scrapes.
type inventory struct {
	count func(context.Context) (Inventory, error)
	every time.Duration
	now   func() time.Time

	mu      sync.Mutex // held while counting: concurrent scrapes share one count
	last    Inventory
	counted time.Time // of last; zero before the first successful count
	tried   time.Time // of the last count, whatever its outcome
}

// CountInventory makes the registry expose agentid_agents{state} and
// agentid_keys{state} from count, called by a scrape when the last call is
// at least every ago (MinInventoryEvery at the least), and
// agentid_inventory_counted_timestamp_seconds, when the values were
// counted. A failed count keeps the last values (and their timestamp)
// until the next call; before any success the families are left out.
func (r *Registry) CountInventory(count func(context.Context) (Inventory, error), every time.Duration) {
	r.inv.Store(&inventory{count: count, every: max(every, MinInventoryEvery), now: time.Now})
}

// snapshot returns the inventory, counting it anew when the last try is
// older than every, and when it was counted (zero: never).
func (v *inventory) snapshot(ctx context.Context) (Inventory, time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if now := v.now(); v.tried.IsZero() || now.Sub(v.tried) >= v.every {
		v.tried = now
		// One scraper hanging up does not waste the count the others wait for.
		if inv, err := v.count(context.WithoutCancel(ctx)); err == nil {
			v.last, v.counted = inv, now
		}
	}
	return v.last, v.counted
}

// writeInventory writes the inventory families, if CountInventory was
// called and a count succeeded.
func (r *Registry) writeInventory(ctx context.Context, w io.Writer) {
	v := r.inv.Load()
	if v == nil {
		return
	}
	inv, at := v.snapshot(ctx)
	if at.IsZero() {
		return
	}
	gauges := func(name, help string, m map[string]int64) {
		family(w, name, "gauge", help)
		for _, state := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(w, "%s{state=%s} %d\n", name, quote(state), m[state])
		}
	}
	gauges("agentid_agents", "Agents by state (active, no_keys, disabled, pending, rejected), as the database last counted them.", inv.Agents)
	gauges("agentid_keys", "Agents' public keys by state (active, revoked), as the database last counted them.", inv.Keys)
	family(w, "agentid_inventory_counted_timestamp_seconds", "gauge", "When agentid_agents and agentid_keys were counted (Unix time).")
	fmt.Fprintf(w, "agentid_inventory_counted_timestamp_seconds %d\n", at.Unix())
}
