//go:build agentid_stdlib_ed25519

package signer

import "crypto/ed25519"

// With the build tag agentid_stdlib_ed25519, Ed25519 verification uses
// crypto/ed25519 from the standard library.

// ed25519Backend names the Ed25519 verification backend in use.
const ed25519Backend = "crypto/ed25519"

// edPublicKey is unused with the standard library backend.
type edPublicKey struct{}

func newEdPublicKey(ed25519.PublicKey) *edPublicKey { return nil }

// verifyEd25519 reports whether sig is k's signature of msg.
func verifyEd25519(k *PublicKey, msg, sig []byte, _ *ExpandedKeys) bool {
	if len(k.Key) != ed25519.PublicKeySize {
		return false
	}
	return ed25519.Verify(k.Key, msg, sig)
}

// DefaultExpandedKeyCacheSize is the size of the curve25519-voi backend's
// cache of expanded keys; the standard library backend keeps none.
const DefaultExpandedKeyCacheSize = 4096

// ExpandedKeys is the curve25519-voi backend's cache of expanded keys;
// with the standard library backend it keeps nothing.
type ExpandedKeys struct{}

// NewExpandedKeys returns a cache that keeps nothing.
func NewExpandedKeys(int) *ExpandedKeys { return &ExpandedKeys{} }

// Len returns 0.
func (*ExpandedKeys) Len() int { return 0 }
