// Package signertest holds what the tests of several packages share: the
// published test vectors' shapes and loaders, and fixed keys.
//
//	v := signertest.LoadVectors(t, "testdata/vectors.json")
//	r := v.B26.Request.Build()
//	key := signertest.Key(7) // an Ed25519 key from a fixed seed
//
// Each package keeps its own copy of the vectors in its testdata folder.
package signertest

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/signer"
)

// VectorRequest is a request of the vectors file.
type VectorRequest struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// Build returns the request as a server receives it (httptest.NewRequest),
// its Host header as r.Host.
func (vr VectorRequest) Build() *http.Request {
	r := httptest.NewRequest(vr.Method, vr.URL, strings.NewReader(vr.Body))
	for k, v := range vr.Headers {
		if strings.EqualFold(k, "host") {
			r.Host = v
			continue
		}
		r.Header.Set(k, v)
	}
	return r
}

// Vectors are the published vectors: RFC 9421 B.1.4 (the Ed25519 test key)
// and B.2.6, RFC 8037 A.3, RFC 9530's digests, and the web-bot-auth
// directory draft's E.2.1 and E.2.2.
type Vectors struct {
	Key struct {
		JWK             json.RawMessage `json:"jwk"`
		Thumbprint      string          `json:"thumbprint"`
		ThumbprintInput string          `json:"thumbprint_input"`
	} `json:"ed25519_test_key_rfc9421_b14"`
	RFC8037 struct {
		X          string `json:"x"`
		Thumbprint string `json:"thumbprint"`
	} `json:"rfc8037_a3_thumbprint"`
	Digests map[string]string `json:"rfc9530_digests"`
	B26     struct {
		Request        VectorRequest `json:"request"`
		SignatureInput string        `json:"signature_input"`
		Signature      string        `json:"signature"`
		SignatureBase  string        `json:"signature_base"`
		BaseSHA256     string        `json:"signature_base_sha256_hex"`
	} `json:"rfc9421_b26"`
	E21 struct {
		Request       VectorRequest `json:"request"`
		SignatureBase string        `json:"signature_base"`
	} `json:"webbotauth_e21_dictionary_signature_agent"`
	E22 struct {
		Request VectorRequest `json:"request"`
	} `json:"webbotauth_e22_legacy_string_signature_agent"`
}

// LoadVectors reads the vectors file at path.
func LoadVectors(t testing.TB, path string) Vectors {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v Vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// B26Request returns the RFC 9421 B.2.6 request with its signature.
func (v Vectors) B26Request() *http.Request {
	r := v.B26.Request.Build()
	r.Header.Set("Signature-Input", v.B26.SignatureInput)
	r.Header.Set("Signature", v.B26.Signature)
	return r
}

// PrivateKey returns the RFC 9421 B.1.4 Ed25519 test key.
func (v Vectors) PrivateKey(t testing.TB) signer.PrivateKey {
	t.Helper()
	k, err := signer.ParsePrivateJWK(v.Key.JWK)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Key returns the Ed25519 key whose 32-byte seed is n repeated: the same
// key in every run, a different key per n.
func Key(n byte) signer.PrivateKey {
	return signer.NewPrivateKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{n}, ed25519.SeedSize)))
}

// FirstBase parses r's Signature-Input and Signature and returns the first
// signature with its base for r.
func FirstBase(t testing.TB, r *http.Request) (signer.Signature, []byte) {
	t.Helper()
	sigs, err := signer.ParseSignatures(r.Header.Values("Signature-Input"), r.Header.Values("Signature"))
	if err != nil {
		t.Fatal(err)
	}
	base, err := sigs[0].Base(r)
	if err != nil {
		t.Fatal(err)
	}
	return sigs[0], base
}

// Clock is a settable clock for lifetimes and windows: pass its Now where
// a Config takes a clock. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// RSAKey reads the PKCS #8 RSA private key of the PEM file at path (a
// fixed test key kept in the calling package's testdata).
func RSAKey(t testing.TB, path string) *rsa.PrivateKey {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s holds no PEM block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	priv, ok := k.(*rsa.PrivateKey)
	if !ok {
		t.Fatalf("%s holds a %T, not an RSA key", path, k)
	}
	return priv
}

// SignRSAPSS signs msg as rsa-pss-sha512 does (RFC 9421 §3.3.1: SHA-512,
// a 64-byte salt).
func SignRSAPSS(priv *rsa.PrivateKey, msg []byte) []byte {
	h := sha512.Sum512(msg)
	sig, err := rsa.SignPSS(rand.Reader, priv, crypto.SHA512, h[:], &rsa.PSSOptions{SaltLength: sha512.Size})
	if err != nil {
		panic(err)
	}
	return sig
}

// SignECDSA signs msg as ecdsa-p256-sha256 does (RFC 9421 §3.3.4: SHA-256,
// r‖s in 64 bytes).
func SignECDSA(priv *ecdsa.PrivateKey, msg []byte) []byte {
	h := sha256.Sum256(msg)
	r, s, err := ecdsa.Sign(rand.Reader, priv, h[:])
	if err != nil {
		panic(err)
	}
	out := make([]byte, 64)
	r.FillBytes(out[:32])
	s.FillBytes(out[32:])
	return out
}

// SyncBuffer is a bytes.Buffer that a server or command may write to while
// a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
