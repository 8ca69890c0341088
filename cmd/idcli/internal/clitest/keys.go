package clitest

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// RSAKey returns the fixed RSA 2048 test key of
// cmd/idcli/testdata/rsa_test_key.pem.
func RSAKey(t testing.TB) *rsa.PrivateKey {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return signertest.RSAKey(t, filepath.Join(filepath.Dir(file), "..", "..", "testdata", "rsa_test_key.pem"))
}

// ECKey returns a fixed P-256 test key (its scalar is 32 bytes of seed).
func ECKey(t testing.TB, seed byte) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), bytes.Repeat([]byte{seed}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// PublicJWK returns the public JWK of an RSA or P-256 key as a JSON object,
// with kid and alg when not "".
func PublicJWK(t testing.TB, pub crypto.PublicKey, kid, alg string) map[string]any {
	t.Helper()
	m := map[string]any{}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		m["kty"], m["n"], m["e"] = "RSA", b64(k.N.Bytes()), b64(big.NewInt(int64(k.E)).Bytes())
	case *ecdsa.PublicKey:
		raw, err := k.Bytes() // 0x04 ‖ x ‖ y
		if err != nil {
			t.Fatal(err)
		}
		m["kty"], m["crv"], m["x"], m["y"] = "EC", "P-256", b64(raw[1:33]), b64(raw[33:])
	default:
		t.Fatalf("PublicJWK: unsupported key %T", pub)
	}
	if kid != "" {
		m["kid"] = kid
	}
	if alg != "" {
		m["alg"] = alg
	}
	return m
}

// RSAPrivateJWK returns k as a private JWK (RFC 7518 §6.3.2) marked
// "alg":"PS512", the form npm web-bot-auth signs with.
func RSAPrivateJWK(t testing.TB, k *rsa.PrivateKey) map[string]any {
	t.Helper()
	m := PublicJWK(t, &k.PublicKey, "", "PS512")
	k.Precompute()
	m["d"], m["p"], m["q"] = b64(k.D.Bytes()), b64(k.Primes[0].Bytes()), b64(k.Primes[1].Bytes())
	m["dp"], m["dq"], m["qi"] = b64(k.Precomputed.Dp.Bytes()), b64(k.Precomputed.Dq.Bytes()), b64(k.Precomputed.Qinv.Bytes())
	return m
}

// Thumbprint returns the RFC 7638 thumbprint of a public JWK object, as
// signer computes it.
func Thumbprint(t testing.TB, jwk map[string]any) string {
	t.Helper()
	b, err := json.Marshal(jwk)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := signer.ParseKeySetJWK(b)
	if err != nil {
		t.Fatalf("ParseKeySetJWK(%s): %v", b, err)
	}
	return pk.Thumbprint
}

// RSAPSS signs a signature base as rsa-pss-sha512 (signertest.SignRSAPSS).
func RSAPSS(k *rsa.PrivateKey) func([]byte) ([]byte, error) {
	return func(base []byte) ([]byte, error) { return signertest.SignRSAPSS(k, base), nil }
}

// ECDSAP256 signs a signature base as ecdsa-p256-sha256
// (signertest.SignECDSA).
func ECDSAP256(k *ecdsa.PrivateKey) func([]byte) ([]byte, error) {
	return func(base []byte) ([]byte, error) { return signertest.SignECDSA(k, base), nil }
}

// SignedWith signs method rawURL carrying Signature-Agent agentField (if
// not "") with a Signature-Input given as text (params, for label sig1) and
// the signing function sign, and returns the three headers.
func SignedWith(t testing.TB, method, rawURL, agentField, params string, sign func([]byte) ([]byte, error)) map[string]string {
	t.Helper()
	r := httptest.NewRequest(method, rawURL, nil)
	h := map[string]string{"Signature-Input": "sig1=" + params}
	if agentField != "" {
		r.Header.Set("Signature-Agent", agentField)
		h["Signature-Agent"] = agentField
	}
	base, err := signer.SignatureBase(r, params)
	if err != nil {
		t.Fatalf("signature base for %s: %v", params, err)
	}
	sig, err := sign(base)
	if err != nil {
		t.Fatal(err)
	}
	h["Signature"] = "sig1=:" + base64.StdEncoding.EncodeToString(sig) + ":"
	return h
}

// ServeJSON starts a loopback server answering each path of docs with its
// JSON document (and content type), 404 elsewhere, until the test ends.
func ServeJSON(t testing.TB, docs map[string]Doc) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", d.ContentType)
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"1"`)
		b, _ := json.Marshal(d.Body)
		w.Write(b)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// Doc is one document ServeJSON serves.
type Doc struct {
	ContentType string
	Body        any
}
