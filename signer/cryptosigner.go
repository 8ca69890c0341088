package signer

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
)

// NewSignerKey wraps s, any crypto.Signer holding an Ed25519 key, as a
// PrivateKey that signs through s: a key in a PKCS#11 token, a cloud KMS or
// a Vault transit engine, whose private half never leaves it. s must sign
// the message itself (crypto.Hash(0) options, RFC 8032 Ed25519, 64-byte
// signatures); when s also implements crypto.MessageSigner, SignMessage is
// used. The returned key has no private bytes (Key is nil), so JWK and
// MarshalPrivateJWK carry no d; Exportable reports false.
func NewSignerKey(s crypto.Signer) (PrivateKey, error) {
	if s == nil {
		return PrivateKey{}, errors.New("signer: nil crypto.Signer")
	}
	pub, ok := s.Public().(ed25519.PublicKey)
	if !ok || len(pub) != ed25519.PublicKeySize {
		return PrivateKey{}, fmt.Errorf("signer: the crypto.Signer holds a %T, want an Ed25519 key", s.Public())
	}
	return PrivateKey{Signer: s, Public: newPublicKey(pub)}, nil
}

// Exportable reports whether k holds its private bytes (a JWK or seed key)
// and so can be written as a private JWK. A key built by NewSignerKey is
// not exportable.
func (k PrivateKey) Exportable() bool { return len(k.Key) == ed25519.PrivateKeySize }

// CanSign reports whether k can sign: it holds an Ed25519 private key or a
// crypto.Signer.
func (k PrivateKey) CanSign() bool { return k.Exportable() || k.Signer != nil }

// signMessage signs msg with k (Ed25519, RFC 8032): with the private bytes
// when k holds them, else through k.Signer. The signature is checked
// against k's public key, so a remote signer that answers with a wrong
// key or a corrupt value fails here rather than at a verifier.
func (k PrivateKey) signMessage(msg []byte) ([]byte, error) {
	if k.Exportable() {
		return ed25519.Sign(k.Key, msg), nil
	}
	if k.Signer == nil {
		return nil, errors.New("signer: no private key")
	}
	sig, err := crypto.SignMessage(k.Signer, rand.Reader, msg, crypto.Hash(0))
	if err != nil {
		return nil, fmt.Errorf("signer: sign with %T: %w", k.Signer, err)
	}
	if k.Public.Verify(AlgEd25519, msg, sig) != nil {
		return nil, fmt.Errorf("signer: the signature from %T does not verify with kid %s", k.Signer, k.KeyID())
	}
	return sig, nil
}
