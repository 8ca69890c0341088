package lru_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/signer/lru"
	"github.com/agentid/agentid/signer/signertest"
)

// clock is a settable test clock.
type clock = signertest.Clock

// op is one step of a scripted test: an action on the cache, then the
// expected contents (key → value; absent keys must miss).
type op struct {
	do   func(c *lru.Cache[string, int], clk *clock)
	want map[string]int
	miss []string
}

func add(k string, v int) func(*lru.Cache[string, int], *clock) {
	return func(c *lru.Cache[string, int], _ *clock) { c.Add(k, v) }
}

func get(k string) func(*lru.Cache[string, int], *clock) {
	return func(c *lru.Cache[string, int], _ *clock) { c.Get(k) }
}

func advance(d time.Duration) func(*lru.Cache[string, int], *clock) {
	return func(_ *lru.Cache[string, int], clk *clock) { clk.Advance(d) }
}

func TestCache(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		size int
		ttl  time.Duration
		ops  []op
	}{
		{"add and get", 2, 0, []op{
			{do: add("a", 1), want: map[string]int{"a": 1}, miss: []string{"b"}},
			{do: add("a", 2), want: map[string]int{"a": 2}},
		}},
		{"evicts the least recently added", 2, 0, []op{
			{do: add("a", 1)},
			{do: add("b", 2)},
			{do: add("c", 3), want: map[string]int{"b": 2, "c": 3}, miss: []string{"a"}},
		}},
		{"get refreshes recency", 2, 0, []op{
			{do: add("a", 1)},
			{do: add("b", 2)},
			{do: get("a")},
			{do: add("c", 3), want: map[string]int{"a": 1, "c": 3}, miss: []string{"b"}},
		}},
		{"replacing refreshes recency", 2, 0, []op{
			{do: add("a", 1)},
			{do: add("b", 2)},
			{do: add("a", 10)},
			{do: add("c", 3), want: map[string]int{"a": 10, "c": 3}, miss: []string{"b"}},
		}},
		{"size one", 1, 0, []op{
			{do: add("a", 1)},
			{do: add("b", 2), want: map[string]int{"b": 2}, miss: []string{"a"}},
		}},
		{"ttl: fresh until ttl, then gone", 4, time.Second, []op{
			{do: add("a", 1)},
			{do: advance(999 * time.Millisecond), want: map[string]int{"a": 1}},
			{do: advance(time.Millisecond), miss: []string{"a"}},
		}},
		{"ttl restarts when replaced", 4, time.Second, []op{
			{do: add("a", 1)},
			{do: advance(600 * time.Millisecond)},
			{do: add("a", 2)},
			{do: advance(600 * time.Millisecond), want: map[string]int{"a": 2}},
			{do: advance(400 * time.Millisecond), miss: []string{"a"}},
		}},
		{"no ttl: entries stay", 4, 0, []op{
			{do: add("a", 1)},
			{do: advance(24 * time.Hour), want: map[string]int{"a": 1}},
		}},
		{"remove", 4, 0, []op{
			{do: add("a", 1)},
			{do: add("b", 2)},
			{do: func(c *lru.Cache[string, int], _ *clock) { c.Remove("a") }, want: map[string]int{"b": 2}, miss: []string{"a"}},
		}},
		{"remove func", 8, 0, []op{
			{do: add("a", 1)},
			{do: add("b", 2)},
			{do: add("c", 3)},
			{do: func(c *lru.Cache[string, int], _ *clock) {
				c.RemoveFunc(func(_ string, v int) bool { return v%2 == 1 })
			},
				want: map[string]int{"b": 2}, miss: []string{"a", "c"}},
		}},
		{"purge", 8, 0, []op{
			{do: add("a", 1)},
			{do: func(c *lru.Cache[string, int], _ *clock) { c.Purge() }, miss: []string{"a"}},
			{do: add("b", 2), want: map[string]int{"b": 2}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := signertest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			c := lru.New[string, int](tt.size, tt.ttl, clk.Now)
			for i, o := range tt.ops {
				o.do(c, clk)
				// Check misses first: a hit refreshes recency.
				for _, k := range o.miss {
					if v, ok := c.Get(k); ok {
						t.Errorf("step %d: Get(%q) = %d, true; want a miss", i, k, v)
					}
				}
				for k, want := range o.want {
					if got, ok := c.Get(k); !ok || got != want {
						t.Errorf("step %d: Get(%q) = %d, %v; want %d, true", i, k, got, ok, want)
					}
				}
				if n := c.Len(); n > tt.size {
					t.Errorf("step %d: Len = %d, above the size %d", i, n, tt.size)
				}
			}
		})
	}
}

func TestRemoveReports(t *testing.T) {
	t.Parallel()
	c := lru.New[string, int](4, 0, nil)
	c.Add("a", 1)
	if !c.Remove("a") {
		t.Errorf("Remove(present) = false, want true")
	}
	if c.Remove("a") {
		t.Errorf("Remove(absent) = true, want false")
	}
	c.Add("x", 1)
	c.Add("y", 2)
	if n := c.RemoveFunc(func(string, int) bool { return true }); n != 2 {
		t.Errorf("RemoveFunc = %d, want 2", n)
	}
	if n := c.Len(); n != 0 {
		t.Errorf("Len = %d, want 0", n)
	}
}

// TestOnRemove: every way an entry leaves reaches the hook once, with its
// key and value; replacing a value does not.
func TestOnRemove(t *testing.T) {
	t.Parallel()
	clk := &clock{}
	c := lru.New[string, int](2, time.Second, clk.Now)
	var gone []string
	c.OnRemove(func(k string, v int) { gone = append(gone, fmt.Sprintf("%s=%d", k, v)) })
	steps := []struct {
		do   func()
		want []string
	}{
		{func() { c.Add("a", 1); c.Add("b", 2); c.Add("a", 10) }, nil},
		{func() { c.Add("c", 3) }, []string{"b=2"}}, // evicted
		{func() { c.Remove("c"); c.Remove("c") }, []string{"c=3"}},
		{func() { c.Add("d", 4); c.RemoveFunc(func(k string, _ int) bool { return k == "d" }) }, []string{"d=4"}},
		{func() { clk.Advance(time.Second); c.Get("a") }, []string{"a=10"}}, // expired
		{func() { c.Add("e", 5); c.Add("f", 6); c.Purge() }, []string{"f=6", "e=5"}},
	}
	for i, s := range steps {
		gone = nil
		s.do()
		if fmt.Sprint(gone) != fmt.Sprint(s.want) {
			t.Errorf("step %d: removed %v, want %v", i, gone, s.want)
		}
	}
	if n := c.Len(); n != 0 {
		t.Errorf("Len = %d after Purge, want 0", n)
	}
}

func TestAddIfGeneration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		between   func(c *lru.Cache[string, int])
		wantStore bool
	}{
		{"nothing removed", func(c *lru.Cache[string, int]) {}, true},
		{"an add does not count", func(c *lru.Cache[string, int]) { c.Add("other", 1) }, true},
		{"remove", func(c *lru.Cache[string, int]) { c.Remove("k") }, false},
		{"remove of another key", func(c *lru.Cache[string, int]) { c.Remove("other") }, false},
		{"remove func", func(c *lru.Cache[string, int]) { c.RemoveFunc(func(string, int) bool { return false }) }, false},
		{"purge", func(c *lru.Cache[string, int]) { c.Purge() }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := lru.New[string, int](4, 0, nil)
			gen := c.Generation()
			tt.between(c)
			if got := c.AddIfGeneration("k", 1, gen); got != tt.wantStore {
				t.Errorf("AddIfGeneration = %v, want %v", got, tt.wantStore)
			}
			if _, ok := c.Get("k"); ok != tt.wantStore {
				t.Errorf("Get after AddIfGeneration: present = %v, want %v", ok, tt.wantStore)
			}
		})
	}
}

func TestNewPanicsOnBadSize(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Errorf("New(0, …) did not panic")
		}
	}()
	lru.New[string, int](0, 0, nil)
}

// TestConcurrent hammers one small cache from many goroutines (run with
// -race); the bound holds throughout.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	const size = 64
	c := lru.New[int, int](size, time.Millisecond, nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				k := (g*7919 + i) % 300
				if v, ok := c.Get(k); ok && v != k {
					t.Errorf("Get(%d) = %d", k, v)
					return
				}
				c.Add(k, k)
				if i%500 == 0 {
					c.RemoveFunc(func(k, _ int) bool { return k%3 == 0 })
				}
				if n := c.Len(); n > size {
					t.Errorf("Len = %d, above %d", n, size)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// filled returns a cache of 10,000 entries at most holding 1,000 keys.
func filled() (*lru.Cache[string, int], []string) {
	c := lru.New[string, int](10_000, time.Second, nil)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "kid-" + strconv.Itoa(i)
		c.Add(keys[i], i)
	}
	return c, keys
}

func BenchmarkGetHit(b *testing.B) {
	c, keys := filled()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Get(keys[i%len(keys)])
	}
}

func BenchmarkAddEvict(b *testing.B) {
	c := lru.New[string, int](1000, time.Second, nil)
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "kid-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Add(keys[i%len(keys)], i)
	}
}

func BenchmarkGetParallel(b *testing.B) {
	c, keys := filled()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			c.Get(keys[i%len(keys)])
			i++
		}
	})
}

func Example() {
	c := lru.New[string, string](2, 0, nil)
	c.Add("a", "alpha")
	c.Add("b", "beta")
	c.Get("a")          // a is now the most recently used
	c.Add("c", "gamma") // evicts b
	for _, k := range []string{"a", "b", "c"} {
		v, ok := c.Get(k)
		fmt.Println(k, v, ok)
	}
	// Output:
	// a alpha true
	// b  false
	// c gamma true
}
