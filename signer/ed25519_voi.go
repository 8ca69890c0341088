//go:build !agentid_stdlib_ed25519

package signer

import (
	"crypto/ed25519"

	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// Ed25519 verification runs on curve25519-voi with the standard library's
// acceptance rules (VerifyOptionsStdLib: the same small-order and
// non-canonical encodings accepted and refused as crypto/ed25519, checked by
// FuzzEd25519Backend). Each key's expanded form is computed once, when the
// PublicKey is made, and reused by every verification. Build with the tag
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
	if k.ed == nil {
		return voi.VerifyWithOptions(voi.PublicKey(k.Key), msg, sig, voiOptions)
	}
	return voi.VerifyExpandedWithOptions(k.ed, msg, sig, voiOptions)
}
