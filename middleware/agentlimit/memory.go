package agentlimit

import (
	"context"
	"time"

	"github.com/agentid/agentid/middleware/ratelimit"
)

// DefaultMaxKeys bounds the buckets a MemoryStore holds.
const DefaultMaxKeys = ratelimit.DefaultMaxKeys

// MemoryConfig configures a MemoryStore.
type MemoryConfig struct {
	// MaxKeys bounds the buckets held. When a shard is full, buckets that
	// have refilled completely (so dropping them changes nothing) are
	// dropped first, then an arbitrary one. If 0, DefaultMaxKeys.
	MaxKeys int
	// Now is the clock. If nil, time.Now is used.
	Now func() time.Time
}

// MemoryStore is a Store in this process's memory: the token buckets of
// middleware/ratelimit, whose bucket names are fixed-size hashes of the
// keys (BenchmarkMemoryStoreBuckets measures a bucket's cost;
// docs/signature-agent.md has the figure). It is safe for concurrent use.
type MemoryStore struct {
	buckets *ratelimit.Buckets
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(cfg MemoryConfig) *MemoryStore {
	return &MemoryStore{buckets: ratelimit.NewBuckets(ratelimit.BucketsConfig{MaxKeys: cfg.MaxKeys, Now: cfg.Now})}
}

// Take implements Store.
func (s *MemoryStore) Take(_ context.Context, key string, quota int, window time.Duration) (bool, float64, error) {
	ok, tokens := s.buckets.Take(key, quota, float64(quota)/window.Seconds())
	return ok, tokens, nil
}

// Len returns the number of buckets held.
func (s *MemoryStore) Len() int { return s.buckets.Len() }
