package agentlimit_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
)

// heapInUse returns the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestKeyHeaderValuesCapped: an agent that sends a new covered key_header
// value with every request gets at most its cap of buckets, so at most
// cap × quota requests, not one budget per value. (Before, 1,000 values
// were 1,000 budgets.)
func TestKeyHeaderValuesCapped(t *testing.T) {
	const quota, values, capacity = 1, 1000, 64 // capacity: agentlimit.DefaultBucketsPerAgent
	store := agentlimit.NewMemoryStore(agentlimit.MemoryConfig{})
	l := newLimiter(t, agentlimit.Config{
		Agent:     agentlimit.Limit{Quota: quota, Window: time.Hour},
		KeyHeader: "Signed-Agent-Metadata",
		Store:     store,
	})
	covered := verified("https://a.example", `"@authority"`, `"signed-agent-metadata"`)
	allowed := 0
	for i := range values {
		r := request("192.0.2.1:1")
		r.Header.Set("Signed-Agent-Metadata", fmt.Sprintf(`operator="op-%d"`, i))
		if l.Take(r, covered).Allowed {
			allowed++
		}
	}
	if allowed > capacity*quota || allowed == 0 {
		t.Errorf("%d of %d requests with new values passed, want between 1 and %d (the agent's bucket cap)", allowed, values, capacity*quota)
	}
	if n := store.Len(); n > capacity {
		t.Errorf("the agent holds %d buckets, want at most %d", n, capacity)
	}
	// Another agent still has its own budget.
	r := request("192.0.2.1:1")
	r.Header.Set("Signed-Agent-Metadata", `operator="op-1"`)
	if !l.Take(r, verified("https://b.example", `"@authority"`, `"signed-agent-metadata"`)).Allowed {
		t.Error("another agent was refused")
	}
}

// TestLongKeysBoundedMemory: buckets named by long keys (padded
// identities, 512 KB covered key_header values) hold no copy of the key
// (before, each held one until it was evicted).
func TestLongKeysBoundedMemory(t *testing.T) {
	const n, size = 200, 512 << 10
	store := agentlimit.NewMemoryStore(agentlimit.MemoryConfig{})
	pad := strings.Repeat("a", size)
	before := heapInUse()
	for i := range n {
		store.Take(context.Background(), fmt.Sprintf("agent %d ", i)+pad, 5, time.Hour)
	}
	grown := int64(heapInUse()) - int64(before)
	if store.Len() != n {
		t.Fatalf("Len = %d, want %d", store.Len(), n)
	}
	if bound := int64(1 << 20); grown > bound {
		t.Errorf("%d buckets of %d-byte keys hold %d bytes, want under %d", n, size, grown, bound)
	}
	runtime.KeepAlive(store)

	// Through the limiter: identities padded with a long path on one host
	// and long covered values are one host's buckets.
	l := newLimiter(t, agentlimit.Config{Agent: agentlimit.Limit{Quota: 5, Window: time.Hour}, KeyHeader: "Signed-Agent-Metadata", Store: store})
	before = heapInUse()
	passed := 0
	for i := range n {
		res := verified(fmt.Sprintf("https://pad.example/%d/%s", i, pad[:4096]), `"@authority"`, `"signed-agent-metadata"`)
		r := request("192.0.2.1:1")
		r.Header.Set("Signed-Agent-Metadata", fmt.Sprintf("%d", i)+pad)
		if l.Take(r, res).Allowed {
			passed++
		}
	}
	grown = int64(heapInUse()) - int64(before)
	if bound := int64(1 << 20); grown > bound {
		t.Errorf("%d padded identities hold %d bytes, want under %d", n, grown, bound)
	}
	if passed > 5*64 {
		t.Errorf("%d requests of one host passed, want at most %d", passed, 5*64)
	}
}

// BenchmarkMemoryStoreBuckets fills an in-memory store with 100,000
// distinct bucket keys of 8 KB each and reports the heap each bucket
// holds (bytes/bucket); it fails above 200 bytes per bucket (the keys
// alone would be 8,192). The agent-cap case has one agent open buckets
// with a new covered key_header value of 8 KB per request: it stops at
// its cap (buckets/agent).
func BenchmarkMemoryStoreBuckets(b *testing.B) {
	const keys, size = 100_000, 8 << 10
	b.Run("distinct-8KB-keys", func(b *testing.B) {
		key := []byte(strings.Repeat("k", size))
		for b.Loop() {
			before := heapInUse()
			store := agentlimit.NewMemoryStore(agentlimit.MemoryConfig{MaxKeys: keys})
			for i := range keys {
				copy(key, fmt.Sprintf("%08d", i))
				store.Take(context.Background(), string(key), 10, time.Minute)
			}
			held := store.Len()
			perBucket := float64(int64(heapInUse())-int64(before)) / float64(held)
			runtime.KeepAlive(store)
			b.ReportMetric(perBucket, "bytes/bucket")
			b.ReportMetric(float64(held), "buckets")
			if perBucket > 200 || held < keys*9/10 {
				b.Fatalf("%d buckets hold %.0f bytes each, want at most 200 and at least %d buckets", held, perBucket, keys*9/10)
			}
		}
	})
	// The same-run baseline: buckets held under their keys, as the store
	// did before (a map from the key to its state), for a tenth of the
	// keys (the full set would be 800 MB).
	b.Run("baseline-keys-kept-10k", func(b *testing.B) {
		key := []byte(strings.Repeat("k", size))
		for b.Loop() {
			before := heapInUse()
			held := map[string]*[3]float64{}
			for i := range keys / 10 {
				copy(key, fmt.Sprintf("%08d", i))
				held[string(key)] = &[3]float64{10}
			}
			perBucket := float64(int64(heapInUse())-int64(before)) / float64(len(held))
			runtime.KeepAlive(held)
			b.ReportMetric(perBucket, "bytes/bucket")
		}
	})
	b.Run("one-agent-cap", func(b *testing.B) {
		store := agentlimit.NewMemoryStore(agentlimit.MemoryConfig{})
		l, err := agentlimit.New(agentlimit.Config{Agent: agentlimit.Limit{Quota: 10, Window: time.Minute}, KeyHeader: "X-Op", Store: store})
		if err != nil {
			b.Fatal(err)
		}
		res := &middleware.Result{Outcome: middleware.OutcomeVerified, Agent: middleware.Agent{ID: "https://a.example", Components: []string{`"@authority"`, `"x-op"`}}}
		val := []byte(strings.Repeat("v", size))
		r := request("192.0.2.1:1")
		i := 0
		for b.Loop() {
			copy(val, fmt.Sprintf("%08d", i))
			i++
			r.Header = http.Header{"X-Op": {string(val)}}
			l.Take(r, res)
		}
		b.ReportMetric(float64(store.Len()), "buckets/agent")
		if store.Len() > agentlimit.DefaultBucketsPerAgent {
			b.Fatalf("one agent opened %d buckets, want at most %d", store.Len(), agentlimit.DefaultBucketsPerAgent)
		}
	})
}
