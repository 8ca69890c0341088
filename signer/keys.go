package signer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"math/big"
)

// Algorithms of RFC 9421 §3.3 that a verifier accepts. Signing stays
// Ed25519.
const (
	AlgEd25519         = "ed25519"
	AlgRSAPSSSHA512    = "rsa-pss-sha512"
	AlgECDSAP256SHA256 = "ecdsa-p256-sha256"
)

// RSA key bounds. A key set is fetched from hosts the verifier does not
// control, and the cost of an RSA verification grows with the modulus and
// the exponent: a huge modulus with a huge exponent makes every check slow
// (docs/benchmarks.md has the figure). So ParseKeySetJWK accepts moduli of MinRSABits
// to LimitRSABits bits and only the exponent RSAExponent, refusing any other
// key from the lengths of its members, before any arithmetic on them; a
// verifier uses keys of up to DefaultMaxRSABits bits unless its
// Limits.MaxRSABits says otherwise.
const (
	// MinRSABits is the smallest RSA modulus accepted.
	MinRSABits = 2048
	// DefaultMaxRSABits is the largest RSA modulus a verifier uses by
	// default (Limits.MaxRSABits).
	DefaultMaxRSABits = 4096
	// LimitRSABits is the largest RSA modulus parsed, and the largest
	// Limits.MaxRSABits accepted.
	LimitRSABits = 8192
	// RSAExponent is the only public exponent accepted (F4).
	RSAExponent = 65537
)

// Algorithm returns the RFC 9421 algorithm the key verifies: AlgEd25519,
// AlgRSAPSSSHA512 or AlgECDSAP256SHA256 ("" for the zero PublicKey).
func (k PublicKey) Algorithm() string {
	switch {
	case len(k.Key) == ed25519.PublicKeySize:
		return AlgEd25519
	case k.RSA != nil:
		return AlgRSAPSSSHA512
	case k.ECDSA != nil:
		return AlgECDSAP256SHA256
	}
	return ""
}

// Verify checks sig over msg with alg ("" means the key's own algorithm).
// It returns nil, ErrAlgorithmMismatch or ErrBadSignature. Ed25519 accepts
// exactly what crypto/ed25519.Verify accepts; RSA is RSASSA-PSS with
// SHA-512 and a 64-byte salt; ECDSA P-256 takes r‖s (64 bytes) over SHA-256.
func (k PublicKey) Verify(alg string, msg, sig []byte) error {
	return k.verify(alg, msg, sig, nil)
}

// Verify is PublicKey.Verify for k, an Ed25519 key held without its
// expanded form (PublicKey.Unexpanded) looked up in c, and expanded there
// when it verifies often; c may be nil (no cache).
func (c *ExpandedKeys) Verify(k PublicKey, alg string, msg, sig []byte) error {
	return k.verify(alg, msg, sig, c)
}

func (k PublicKey) verify(alg string, msg, sig []byte, c *ExpandedKeys) error {
	own := k.Algorithm()
	if own == "" || alg != "" && alg != own {
		return ErrAlgorithmMismatch
	}
	ok := false
	switch own {
	case AlgEd25519:
		ok = verifyEd25519(&k, msg, sig, c)
	case AlgRSAPSSSHA512:
		h := sha512.Sum512(msg)
		ok = rsa.VerifyPSS(k.RSA, crypto.SHA512, h[:], sig, &rsa.PSSOptions{SaltLength: sha512.Size}) == nil
	case AlgECDSAP256SHA256:
		if len(sig) == 64 {
			h := sha256.Sum256(msg)
			r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
			ok = ecdsa.Verify(k.ECDSA, h[:], r, s)
		}
	}
	if !ok {
		return ErrBadSignature
	}
	return nil
}

// ParseKeySetJWK parses one public key of a key set (a directory, a JWKS
// or a Signature Agent Card): an Ed25519 OKP key, an RSA key of MinRSABits
// to LimitRSABits bits with exponent RSAExponent, or a P-256 EC key. A
// private member (d, p, q, …) is
// refused. The kid, if any, is kept as published (JWK.Kid; the thumbprint
// when absent) and the RFC 7638 thumbprint is computed (Thumbprint). An
// "alg" member, when present, must name the key's own algorithm
// ("Ed25519" or "EdDSA" for OKP, "PS512" for RSA, "ES256" for EC): a key
// marked for another algorithm is refused, so it is never used for this one.
func ParseKeySetJWK(data []byte) (PublicKey, error) {
	m, err := decodeJWKObject(data)
	if err != nil {
		return PublicKey{}, err
	}
	kty, err := stringMember(m, "kty", true)
	if err != nil {
		return PublicKey{}, err
	}
	for _, private := range []string{"d", "p", "q", "dp", "dq", "qi", "oth", "k"} {
		if _, ok := m[private]; ok {
			return PublicKey{}, &JWKError{Member: private, Reason: "a public JWK must not carry private key material"}
		}
	}
	kid, err := stringMember(m, "kid", false)
	if err != nil {
		return PublicKey{}, err
	}
	alg, err := stringMember(m, "alg", false)
	if err != nil {
		return PublicKey{}, err
	}
	var pk PublicKey
	switch kty {
	case "OKP":
		if alg != "" && alg != "Ed25519" && alg != "EdDSA" {
			return PublicKey{}, &JWKError{Member: "alg", Reason: fmt.Sprintf("%q is not an Ed25519 algorithm", Truncate(alg))}
		}
		if pk, err = parseOKP(m); err != nil {
			return PublicKey{}, err
		}
	case "RSA":
		if alg != "" && alg != "PS512" {
			return PublicKey{}, &JWKError{Member: "alg", Reason: fmt.Sprintf("%q is not supported for RSA, want \"PS512\"", Truncate(alg))}
		}
		if pk, err = parseRSA(m); err != nil {
			return PublicKey{}, err
		}
	case "EC":
		if alg != "" && alg != "ES256" {
			return PublicKey{}, &JWKError{Member: "alg", Reason: fmt.Sprintf("%q is not supported for EC, want \"ES256\"", Truncate(alg))}
		}
		if pk, err = parseEC(m); err != nil {
			return PublicKey{}, err
		}
	default:
		return PublicKey{}, &JWKError{Member: "kty", Reason: fmt.Sprintf("%q is not supported, want \"OKP\", \"RSA\" or \"EC\"", Truncate(kty))}
	}
	pk.JWK.Alg = alg
	if kid != "" {
		pk.JWK.Kid = kid
	}
	return pk, nil
}

// bigMember decodes a base64url unsigned integer member without leading
// zero bytes (RFC 7518 §2).
func bigMember(m map[string]json.RawMessage, name string) (*big.Int, string, error) {
	s, err := stringMember(m, name, true)
	if err != nil {
		return nil, "", err
	}
	b, err := b64url.DecodeString(s)
	if err != nil || len(b) == 0 {
		return nil, "", &JWKError{Member: name, Reason: "not unpadded base64url"}
	}
	if b[0] == 0 {
		return nil, "", &JWKError{Member: name, Reason: "has a leading zero byte"}
	}
	return new(big.Int).SetBytes(b), s, nil
}

func parseRSA(m map[string]json.RawMessage) (PublicKey, error) {
	// The exponent and the modulus's length are checked on the encoded
	// members, before the modulus is unquoted, decoded or turned into a
	// number: a huge modulus costs no more than reading the JSON.
	maxBits := LimitRSABits
	es, err := stringMember(m, "e", true)
	if err != nil {
		return PublicKey{}, err
	}
	if es != "AQAB" { // 65537, the only encoding without a leading zero byte
		return PublicKey{}, &JWKError{Member: "e", Reason: fmt.Sprintf("the exponent must be %d (\"AQAB\")", RSAExponent)}
	}
	raw, ok := m["n"]
	if !ok {
		return PublicKey{}, &JWKError{Member: "n", Reason: "missing"}
	}
	// Base64url needs no JSON escapes, so the raw member is the encoding
	// in quotes (6 bits a character); escapes would only lengthen it. The
	// exact bit length is checked once it is decoded.
	if bits := (len(raw) - 2) * 6; bits > maxBits+8 || bits < MinRSABits-8 {
		return PublicKey{}, &JWKError{Member: "n", Reason: fmt.Sprintf("a modulus of about %d bits is refused (%d to %d bits)", bits, MinRSABits, maxBits)}
	}
	n, ns, err := bigMember(m, "n")
	if err != nil {
		return PublicKey{}, err
	}
	if n.BitLen() < MinRSABits || n.BitLen() > maxBits || n.Bit(0) == 0 {
		return PublicKey{}, &JWKError{Member: "n", Reason: fmt.Sprintf("a %d-bit modulus is refused (%d to %d bits, odd)", n.BitLen(), MinRSABits, maxBits)}
	}
	tp := thumbprintOf(`{"e":"` + es + `","kty":"RSA","n":"` + ns + `"}`)
	return PublicKey{
		RSA:        &rsa.PublicKey{N: n, E: RSAExponent},
		JWK:        JWK{Kty: "RSA", N: ns, E: es, Kid: tp},
		Thumbprint: tp,
	}, nil
}

func parseEC(m map[string]json.RawMessage) (PublicKey, error) {
	if err := checkCurve(m, "P-256"); err != nil {
		return PublicKey{}, err
	}
	xs, err := stringMember(m, "x", true)
	if err != nil {
		return PublicKey{}, err
	}
	ys, err := stringMember(m, "y", true)
	if err != nil {
		return PublicKey{}, err
	}
	x, err := decode32("x", xs)
	if err != nil {
		return PublicKey{}, err
	}
	y, err := decode32("y", ys)
	if err != nil {
		return PublicKey{}, err
	}
	// The uncompressed point; ecdsa.ParseUncompressedPublicKey checks that
	// it is on the curve.
	pt := append(append([]byte{4}, x...), y...)
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), pt)
	if err != nil {
		return PublicKey{}, &JWKError{Member: "x", Reason: "not a point on P-256"}
	}
	tp := thumbprintOf(`{"crv":"P-256","kty":"EC","x":"` + xs + `","y":"` + ys + `"}`)
	return PublicKey{
		ECDSA:      pub,
		JWK:        JWK{Kty: "EC", Crv: "P-256", X: xs, Y: ys, Kid: tp},
		Thumbprint: tp,
	}, nil
}

func thumbprintOf(canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return b64url.EncodeToString(sum[:])
}
