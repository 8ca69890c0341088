//go:build !agentid_stdlib_ed25519

package signer

import (
	"crypto/ed25519"
	"hash/maphash"
	"sync"

	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"

	"github.com/agentid/agentid/signer/lru"
)

// Ed25519 verification runs on curve25519-voi with the standard library's
// acceptance rules (VerifyOptionsStdLib: the same small-order and
// non-canonical encodings accepted and refused as crypto/ed25519, checked by
// FuzzEd25519Backend). A key's expanded form (its precomputed table, most
// of the key's memory) is computed when the PublicKey is made and reused by every
// verification. A key without it (PublicKey.Unexpanded, as key caches
// holding many keys keep them) is verified through a bounded cache of
// expanded keys (ExpandedKeys), or without precomputation. Build with the tag
// agentid_stdlib_ed25519 to use crypto/ed25519 instead.

// ed25519Backend names the Ed25519 verification backend in use.
const ed25519Backend = "curve25519-voi"

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

// verifyEd25519 reports whether sig is k's signature of msg; a key held
// without its expanded form is looked up in c (which may be nil).
func verifyEd25519(k *PublicKey, msg, sig []byte, c *ExpandedKeys) bool {
	if len(k.Key) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize {
		return false
	}
	ek := k.ed
	if ek == nil {
		ek = c.expanded(k.Key)
	}
	if ek == nil {
		return voi.VerifyWithOptions(voi.PublicKey(k.Key), msg, sig, voiOptions)
	}
	return voi.VerifyExpandedWithOptions(ek, msg, sig, voiOptions)
}

// DefaultExpandedKeyCacheSize is the size of the cache of expanded keys a
// verifier keeps unless told otherwise.
const DefaultExpandedKeyCacheSize = 4096

// ExpandedKeys keeps the expanded forms of the Ed25519 keys verifying most
// often, for keys held without theirs (PublicKey.Unexpanded): an agent
// signing often is then verified as fast as a key with its expanded form,
// while a cache of many agents' keys holds 32 bytes per key. A key is
// admitted on its second miss within the last size misses (seen remembers
// the hashes of keys missed once, and is cleared when full), so keys taken
// in turn from more agents than size are verified without precomputation
// instead of being expanded and evicted on every request. It is safe for
// concurrent use; with the standard library backend it keeps nothing.
type ExpandedKeys struct {
	keys *lru.Cache[[ed25519.PublicKeySize]byte, *edPublicKey]
	size int
	seed maphash.Seed
	mu   sync.Mutex // guards seen
	seen map[uint64]struct{}
}

// NewExpandedKeys returns a cache of at most size expanded keys; with
// size ≤ 0 it keeps none, and every key held without its expanded form is
// verified without precomputation.
func NewExpandedKeys(size int) *ExpandedKeys {
	if size <= 0 {
		return &ExpandedKeys{}
	}
	return &ExpandedKeys{keys: lru.New[[ed25519.PublicKeySize]byte, *edPublicKey](size, 0, nil), size: size,
		seed: maphash.MakeSeed(), seen: map[uint64]struct{}{}}
}

// Len returns the number of keys expanded in c.
func (c *ExpandedKeys) Len() int {
	if c == nil || c.keys == nil {
		return 0
	}
	return c.keys.Len()
}

// expanded returns pub's expanded form from the cache, expanding it on its
// second miss; nil when c keeps nothing, pub is not cached yet, or pub is
// not a point.
func (c *ExpandedKeys) expanded(pub ed25519.PublicKey) *edPublicKey {
	if c == nil || c.keys == nil {
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
