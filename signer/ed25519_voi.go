//go:build !agentid_stdlib_ed25519

package signer

import (
	"crypto/ed25519"
	"hash/maphash"
	"sync"
	"sync/atomic"

	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"

	"github.com/agentid/agentid/signer/lru"
)

// Ed25519 verification runs on curve25519-voi with the standard library's
// acceptance rules (VerifyOptionsStdLib: the same small-order and
// non-canonical encodings accepted and refused as crypto/ed25519, checked by
// FuzzEd25519Backend). A key's expanded form (its precomputed table, about
// 1.5 KB) is computed when the PublicKey is made and reused by every
// verification. A key without it (PublicKey.Unexpanded, as key caches
// holding many keys keep them) is verified through the bounded cache of
// expanded keys below, or without precomputation. Build with the tag
// agentid_stdlib_ed25519 to use crypto/ed25519 instead.

// Ed25519Backend names the Ed25519 verification backend in use.
const Ed25519Backend = "curve25519-voi"

var voiOptions = &voi.Options{Verify: voi.VerifyOptionsStdLib}

// edPublicKey is a precomputed (expanded) Ed25519 public key.
type edPublicKey = voi.ExpandedPublicKey

// newEdPublicKey expands pub, or returns nil when pub is not a point (such
// a key verifies nothing, as with crypto/ed25519).
func newEdPublicKey(pub ed25519.PublicKey) *edPublicKey {
	if len(pub) != ed25519.PublicKeySize {
		return nil
	}
	k, err := voi.NewExpandedPublicKey(voi.PublicKey(pub))
	if err != nil {
		return nil
	}
	return k
}

// verifyEd25519 reports whether sig is k's signature of msg.
func verifyEd25519(k *PublicKey, msg, sig []byte) bool {
	if len(k.Key) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize {
		return false
	}
	ek := k.ed
	if ek == nil {
		ek = hotKeys.Load().expanded(k.Key)
	}
	if ek == nil {
		return voi.VerifyWithOptions(voi.PublicKey(k.Key), msg, sig, voiOptions)
	}
	return voi.VerifyExpandedWithOptions(ek, msg, sig, voiOptions)
}

// DefaultExpandedKeyCacheSize is how many expanded Ed25519 keys the
// package keeps for keys held without theirs (PublicKey.Unexpanded), unless
// SetExpandedKeyCacheSize says otherwise. An entry holds about 1.7 KB
// (the expanded key, its 32-byte key and the cache's node), so the default
// holds at most about 7 MB.
const DefaultExpandedKeyCacheSize = 4096

// SetExpandedKeyCacheSize sets how many expanded Ed25519 keys are kept for
// the keys held without theirs (PublicKey.Unexpanded): the keys verifying
// most often, so that an agent signing often is verified as fast as a key
// with its expanded form while a cache of many agents' keys holds 32 bytes
// per key. A key is expanded when it misses the cache twice within about
// size misses; until then, and for every key when size ≤ 0, it is verified
// without precomputation (about 10% more CPU per request with many agents
// taken in turn). It replaces the cache (emptied). It has no effect with the
// standard library backend.
func SetExpandedKeyCacheSize(size int) {
	if size <= 0 {
		hotKeys.Store(nil)
		return
	}
	hotKeys.Store(newHotCache(size))
}

var hotKeys atomic.Pointer[hotCache]

func init() { SetExpandedKeyCacheSize(DefaultExpandedKeyCacheSize) }

// hotCache holds the expanded forms of the keys verifying most often. A
// key is admitted on its second miss within the last size misses (seen
// remembers the hashes of keys missed once, and is cleared when full), so
// keys taken in turn from more agents than size are verified without
// precomputation instead of being expanded and evicted on every request.
type hotCache struct {
	keys *lru.Cache[[ed25519.PublicKeySize]byte, *edPublicKey]
	size int
	seed maphash.Seed
	mu   sync.Mutex // guards seen
	seen map[uint64]struct{}
}

func newHotCache(size int) *hotCache {
	return &hotCache{keys: lru.New[[ed25519.PublicKeySize]byte, *edPublicKey](size, 0, nil), size: size,
		seed: maphash.MakeSeed(), seen: map[uint64]struct{}{}}
}

// expanded returns pub's expanded form from the cache, expanding it on its
// second miss; nil when c is nil, pub is not cached yet, or pub is not a
// point.
func (c *hotCache) expanded(pub ed25519.PublicKey) *edPublicKey {
	if c == nil {
		return nil
	}
	key := [ed25519.PublicKeySize]byte(pub)
	if ek, ok := c.keys.Get(key); ok {
		return ek
	}
	// The hash is keyed with a random seed, so a signer cannot make its
	// key pass for another's; a collision would only expand a key early.
	h := maphash.Bytes(c.seed, pub)
	c.mu.Lock()
	_, again := c.seen[h]
	if again {
		delete(c.seen, h)
	} else {
		if len(c.seen) >= c.size {
			clear(c.seen)
		}
		c.seen[h] = struct{}{}
	}
	c.mu.Unlock()
	if !again {
		return nil
	}
	ek := newEdPublicKey(pub)
	if ek != nil {
		c.keys.Add(key, ek)
	}
	return ek
}
