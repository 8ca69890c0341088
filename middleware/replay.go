package middleware

import (
	"context"
	"crypto/sha256"
	"time"

	"github.com/patrickmn/go-cache"
)

// MemoryReplayStore is an in-process ReplayStore on go-cache. Entries are
// kept until their expiry (the signature's expires plus the allowed skew)
// and purged every minute. Keys are held at a fixed size: the Verifier's
// keys (ReplayKey) are 32-byte digests and are kept as they are; any longer
// key is replaced by its SHA-256. It suits a single instance; several
// instances need a shared store (PostgreSQL or Redis).
type MemoryReplayStore struct {
	c   *cache.Cache
	now func() time.Time
}

// NewMemoryReplayStore returns an empty in-memory store on the real clock.
func NewMemoryReplayStore() *MemoryReplayStore {
	return newMemoryReplayStore(nil)
}

// newMemoryReplayStore returns an empty in-memory store that measures the
// time left until each entry's expiry with now (the clock the Verifier
// checks signatures with). If now is nil, time.Now is used. A Verifier
// whose Config.Replay is nil builds its store this way.
func newMemoryReplayStore(now func() time.Time) *MemoryReplayStore {
	if now == nil {
		now = time.Now
	}
	return &MemoryReplayStore{c: cache.New(cache.NoExpiration, time.Minute), now: now}
}

// Seen implements ReplayStore. go-cache's Add is atomic: of two concurrent
// calls with the same key exactly one succeeds.
func (s *MemoryReplayStore) Seen(_ context.Context, key string, expiry time.Time) (bool, error) {
	ttl := expiry.Sub(s.now())
	if ttl < time.Second {
		ttl = time.Second
	}
	if len(key) > sha256.Size {
		sum := sha256.Sum256([]byte(key))
		key = string(sum[:])
	}
	if err := s.c.Add(key, struct{}{}, ttl); err != nil {
		return true, nil
	}
	return false, nil
}

// Len returns the number of remembered nonces (expired ones may linger until
// the next purge).
func (s *MemoryReplayStore) Len() int { return s.c.ItemCount() }
