//go:build !agentid_stdlib_ed25519

package signer

import (
	"crypto/ed25519"
	"fmt"
	"testing"
)

// TestHotKeyCache checks the cache of expanded keys that verifies keys held
// without their precomputed form: a key is expanded on its second miss and
// found afterwards, the cache holds at most its size, keys taken in turn
// from more agents than that are not expanded at all, and every path
// verifies as crypto/ed25519 does (a good signature accepted, a bad one
// refused).
func TestHotKeyCache(t *testing.T) {
	const size = 4
	key := func(i int) (PublicKey, []byte, []byte) {
		seed := make([]byte, ed25519.SeedSize)
		seed[0], seed[1] = byte(i), byte(i>>8)
		priv := ed25519.NewKeyFromSeed(seed)
		msg := []byte(fmt.Sprintf("message %d", i))
		return newPublicKey(priv.Public().(ed25519.PublicKey)).Unexpanded(), msg, ed25519.Sign(priv, msg)
	}
	var c *ExpandedKeys
	check := func(k PublicKey, msg, sig []byte) {
		t.Helper()
		if !verifyEd25519(&k, msg, sig, c) {
			t.Fatal("a good signature was refused")
		}
		bad := append([]byte{}, sig...)
		bad[5] ^= 1
		if verifyEd25519(&k, msg, bad, c) {
			t.Fatal("a bad signature was accepted")
		}
	}
	if k, _, _ := key(0); k.ed != nil {
		t.Fatal("Unexpanded kept the precomputed form")
	}

	c = NewExpandedKeys(size)
	k, msg, sig := key(1)
	if c.expanded(k.Key) != nil {
		t.Fatal("a key was expanded on its first miss")
	}
	if c.expanded(k.Key) == nil || c.keys.Len() != 1 {
		t.Fatal("a key was not expanded on its second miss")
	}
	if ek := c.expanded(k.Key); ek == nil || c.keys.Len() != 1 {
		t.Fatal("an expanded key was not found")
	}
	check(k, msg, sig)

	// Many keys taken in turn, each verified once: none is expanded.
	c = NewExpandedKeys(size)
	for round := range 3 {
		for i := range 4 * size {
			k, msg, sig := key(100 + i)
			if !verifyEd25519(&k, msg, sig, c) {
				t.Fatal("a good signature was refused")
			}
			if len(c.seen) > size {
				t.Fatalf("round %d: %d keys remembered, want at most %d", round, len(c.seen), size)
			}
		}
	}
	if n := c.keys.Len(); n != 0 {
		t.Fatalf("%d keys taken in turn were expanded, want 0", n)
	}

	// Few keys used often: all expanded, the cache bounded.
	for range 3 {
		for i := range 2 * size {
			k, msg, sig := key(200 + i%size)
			check(k, msg, sig)
		}
	}
	if n := c.keys.Len(); n != size {
		t.Fatalf("cache holds %d keys, want %d", n, size)
	}

	// A key that is not a point is never cached, and verifies nothing.
	notPoint := PublicKey{Key: make(ed25519.PublicKey, ed25519.PublicKeySize)}
	copy(notPoint.Key, []byte{0xee, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	for range 3 {
		if verifyEd25519(&notPoint, msg, sig, c) != ed25519.Verify(notPoint.Key, msg, sig) {
			t.Fatal("a key that is not a point disagrees with crypto/ed25519")
		}
	}

	// Size 0, or no cache: keys verify without precomputation.
	c = NewExpandedKeys(0)
	check(k, msg, sig)
	check(k, msg, sig)
	if c.Len() != 0 {
		t.Fatal("size 0 kept a key")
	}
	c = nil
	check(k, msg, sig)

	// Two caches are independent: one filling does not touch the other.
	a, b := NewExpandedKeys(1), NewExpandedKeys(size)
	for i := range size {
		k, msg, sig := key(300 + i)
		for range 2 {
			a.Verify(k, "", msg, sig)
		}
	}
	if a.Len() != 1 || b.Len() != 0 {
		t.Fatalf("cache a holds %d keys (want 1), b %d (want 0)", a.Len(), b.Len())
	}
}
