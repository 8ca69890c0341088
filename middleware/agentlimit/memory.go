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
//
// A bucket is held under a fixed-size name: 128 bits of two seeded hashes
// of its key (hash/maphash, seeds drawn per store, so a client cannot
// choose keys that collide), never the key itself. A bucket costs the same
// whatever the length of its key: about 60 bytes of map entry (16 of name,
// 24 of state) with the map's slack; BenchmarkMemoryStoreBuckets measures
// it (docs/signature-agent.md has the figure).
type MemoryStore struct {
	now      func() time.Time
	perShard int
	seeds    [2]maphash.Seed
	shards   [memoryShards]memoryShard
}

// bucketName is the fixed-size name of a bucket.
type bucketName [2]uint64

type memoryShard struct {
	mu      sync.Mutex
	buckets map[bucketName]memBucket
}

type memBucket struct {
	tokens float64
	last   int64 // unix nanoseconds of the last update
	full   int64 // unix nanoseconds when the bucket is full again
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(cfg MemoryConfig) *MemoryStore {
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &MemoryStore{now: cfg.Now, perShard: max(1, cfg.MaxKeys/memoryShards), seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}}
	for i := range s.shards {
		s.shards[i].buckets = make(map[bucketName]memBucket)
	}
	return s
}

// Take implements Store.
func (s *MemoryStore) Take(_ context.Context, key string, quota int, window time.Duration) (bool, float64, error) {
	now := s.now().UnixNano()
	rate := float64(quota) / window.Seconds()
	name := bucketName{maphash.String(s.seeds[0], key), maphash.String(s.seeds[1], key)}
	sh := &s.shards[name[0]%memoryShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b, ok := sh.buckets[name]
	if !ok {
		if len(sh.buckets) >= s.perShard {
			sh.evict(now)
		}
		b = memBucket{tokens: float64(quota), last: now}
	} else if el := now - b.last; el > 0 {
		b.tokens = min(float64(quota), b.tokens+float64(el)/1e9*rate)
		b.last = now
	}
	took := b.tokens >= 1
	if took {
		b.tokens--
	}
	b.full = now + int64((float64(quota)-b.tokens)/rate*1e9)
	sh.buckets[name] = b
	return took, b.tokens, nil
}

// evict drops the buckets that are full again, or one arbitrary bucket
// when none is. sh.mu is held.
func (sh *memoryShard) evict(now int64) {
	n := len(sh.buckets)
	for k, b := range sh.buckets {
		if now >= b.full {
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
