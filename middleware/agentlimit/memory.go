package agentlimit

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

// DefaultMaxKeys bounds the buckets a MemoryStore holds.
const DefaultMaxKeys = 100_000

const memoryShards = 64

// MemoryConfig configures a MemoryStore.
type MemoryConfig struct {
	// MaxKeys bounds the buckets held. When a shard is full, buckets that
	// have refilled completely (so dropping them changes nothing) are
	// dropped first, then an arbitrary one. If 0, DefaultMaxKeys.
	MaxKeys int
	// Now is the clock. If nil, time.Now is used.
	Now func() time.Time
}

// MemoryStore is a Store in this process's memory. It is safe for
// concurrent use.
type MemoryStore struct {
	now      func() time.Time
	perShard int
	seed     maphash.Seed
	shards   [memoryShards]memoryShard
}

type memoryShard struct {
	mu      sync.Mutex
	buckets map[string]*memBucket
}

type memBucket struct {
	tokens float64
	last   time.Time
	full   time.Time // when the bucket is full again
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(cfg MemoryConfig) *MemoryStore {
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &MemoryStore{now: cfg.Now, perShard: max(1, cfg.MaxKeys/memoryShards), seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].buckets = make(map[string]*memBucket)
	}
	return s
}

// Take implements Store.
func (s *MemoryStore) Take(_ context.Context, key string, quota int, window time.Duration) (bool, float64, error) {
	now := s.now()
	rate := float64(quota) / window.Seconds()
	sh := &s.shards[maphash.String(s.seed, key)%memoryShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b := sh.buckets[key]
	if b == nil {
		if len(sh.buckets) >= s.perShard {
			sh.evict(now)
		}
		b = &memBucket{tokens: float64(quota), last: now}
		sh.buckets[key] = b
	} else if el := now.Sub(b.last); el > 0 {
		b.tokens = min(float64(quota), b.tokens+el.Seconds()*rate)
		b.last = now
	}
	ok := b.tokens >= 1
	if ok {
		b.tokens--
	}
	b.full = now.Add(time.Duration((float64(quota) - b.tokens) / rate * float64(time.Second)))
	return ok, b.tokens, nil
}

// evict drops the buckets that are full again, or one arbitrary bucket
// when none is. sh.mu is held.
func (sh *memoryShard) evict(now time.Time) {
	n := len(sh.buckets)
	for k, b := range sh.buckets {
		if !now.Before(b.full) {
			delete(sh.buckets, k)
		}
	}
	if len(sh.buckets) < n {
		return
	}
	for k := range sh.buckets {
		delete(sh.buckets, k)
		return
	}
}

// Len returns the number of buckets held.
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		s.shards[i].mu.Lock()
		n += len(s.shards[i].buckets)
		s.shards[i].mu.Unlock()
	}
	return n
}
