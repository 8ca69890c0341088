package middleware

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/http"
	"time"

	"github.com/patrickmn/go-cache"

	"github.com/agentid/agentid/signer"
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

// len returns the number of remembered nonces (expired ones may linger until
// the next purge).
func (s *MemoryReplayStore) len() int { return s.c.ItemCount() }

// replay records the nonce of a verified signature (step 9).
func (v *Verifier) replay(r *http.Request, a *Agent, hasExpires bool) *Error {
	if a.Nonce == "" {
		return nil
	}
	cfg := &v.cfg
	expires := a.Expires
	if !hasExpires {
		expires = a.Created.Add(max(cfg.MaxWindow, 0))
	}
	seen, err := cfg.Replay.Seen(r.Context(), ReplayKey(a.Thumbprint, a.Nonce), expires.Add(cfg.Skew))
	if err != nil {
		return &Error{Code: CodeDatabaseUnavailable, Message: "the replay store is unavailable", Err: fmt.Errorf("%w: %w", ErrReplayStore, err)}
	}
	if seen {
		return Fail(CodeReplayedNonce, "nonce already used with key %q", signer.Truncate(a.KeyID))
	}
	return nil
}

// ReplayKey is the key a Verifier records in its ReplayStore for a
// verified signature: the SHA-256 digest (32 bytes, as a string) of the
// verified key's RFC 7638 thumbprint and the nonce, each length-prefixed
// so that no two pairs share a key. It depends on nothing else — not on
// how Signature-Agent was spelled, the keyid, the route or the instance —
// so a nonce is accepted once per key wherever the signature is sent.
func ReplayKey(thumbprint, nonce string) string {
	var buf [512]byte
	b := buf[:0]
	for _, s := range [2]string{thumbprint, nonce} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	sum := sha256.Sum256(b)
	return string(sum[:])
}
