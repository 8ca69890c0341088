//go:build !cgo

package pkcs11

import (
	"crypto"
	"io"
)

// Key is an Ed25519 key in a PKCS#11 token. Without cgo it cannot be opened.
type Key struct{}

// Open returns ErrNoCgo: this binary cannot load a PKCS#11 module.
func Open(URI) (*Key, error) { return nil, ErrNoCgo }

// Generate returns ErrNoCgo: this binary cannot load a PKCS#11 module.
func Generate(URI) (*Key, error) { return nil, ErrNoCgo }

// Public returns nil.
func (*Key) Public() crypto.PublicKey { return nil }

// Sign returns ErrNoCgo.
func (*Key) Sign(io.Reader, []byte, crypto.SignerOpts) ([]byte, error) { return nil, ErrNoCgo }

// ID returns nil.
func (*Key) ID() []byte { return nil }

// CheckProtected returns ErrNoCgo.
func (*Key) CheckProtected() error { return ErrNoCgo }

// Destroy returns ErrNoCgo.
func (*Key) Destroy() error { return ErrNoCgo }

// Close does nothing.
func (*Key) Close() error { return nil }

// Supported is false: this binary was built without cgo and cannot load a
// PKCS#11 module (Open and Generate return ErrNoCgo).
const Supported = false
