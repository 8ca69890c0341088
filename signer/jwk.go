package signer

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
)

// JWK is a key in JSON Web Key form. An Ed25519 key (RFC 8037) has Kty
// "OKP", Crv and X; a private one adds D, the 32-byte seed. Keys read from
// key sets may also be RSA (N, E) or P-256 EC (Crv, X, Y) public keys, with
// the Alg they were published with. D is never printed by String and never
// marshalled by MarshalPublic.
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv,omitempty"`
	X   string `json:"x,omitempty"`
	Y   string `json:"y,omitempty"`
	N   string `json:"n,omitempty"`
	E   string `json:"e,omitempty"`
	Kid string `json:"kid,omitempty"`
	Alg string `json:"alg,omitempty"`
	D   string `json:"d,omitempty"`
}

// PublicKey is a validated public key with its public JWK. Key holds an
// Ed25519 key; RSA or ECDSA hold the others (ParseKeySetJWK). Thumbprint is
// the key's RFC 7638 thumbprint, which is also JWK.Kid unless a key set
// published another kid.
type PublicKey struct {
	Key        ed25519.PublicKey
	JWK        JWK
	Thumbprint string
	RSA        *rsa.PublicKey
	ECDSA      *ecdsa.PublicKey
	// ed is the verification backend's precomputed form of Key (nil when
	// it could not be computed; Verify then falls back).
	ed *edPublicKey
}

// Unexpanded returns k without the Ed25519 backend's precomputed form of
// Key (curve25519-voi's table, most of a key's memory; nothing with the
// standard library backend): what a cache holding many agents' keys keeps. It verifies as k
// does, without precomputation unless verified through an ExpandedKeys
// cache (ExpandedKeys.Verify), as a verifier does.
func (k PublicKey) Unexpanded() PublicKey {
	k.ed = nil
	return k
}

// PrivateKey is a validated Ed25519 private key with its public half. It
// signs with Key when set; otherwise with Signer, a crypto.Signer holding
// the key elsewhere (an HSM, a KMS; see NewSignerKey).
type PrivateKey struct {
	Key    ed25519.PrivateKey
	Public PublicKey
	// Signer signs when Key is nil. Its public key must be Public.Key.
	Signer crypto.Signer
}

// JWKError reports which JWK member is wrong and why.
type JWKError struct {
	Member string // the JWK member at fault ("kty", "crv", "x", "d", "kid", "alg", "n", "e", …) or "" for the whole object
	Reason string
}

func (e *JWKError) Error() string {
	if e.Member == "" {
		return "signer: invalid jwk: " + e.Reason
	}
	return fmt.Sprintf("signer: invalid jwk member %q: %s", e.Member, e.Reason)
}

// Unwrap returns the error every JWKError wraps ("signer: invalid jwk").
func (e *JWKError) Unwrap() error { return errInvalidJWK }

var b64url = base64.RawURLEncoding

// Thumbprint returns the RFC 7638 JWK thumbprint (SHA-256, base64url without
// padding) of an Ed25519 public key: the hash of
// {"crv":"Ed25519","kty":"OKP","x":"…"} (RFC 8037 §A.3).
func Thumbprint(pub ed25519.PublicKey) string {
	return thumbprintX(b64url.EncodeToString(pub))
}

// thumbprintX is Thumbprint for an already encoded x member.
func thumbprintX(x string) string {
	return thumbprintOf(`{"crv":"Ed25519","kty":"OKP","x":"` + x + `"}`)
}

// newPublicKey wraps an Ed25519 public key; its JWK carries the thumbprint
// as kid. The verification backend's precomputation is done here, once per
// key, so that keys kept by key sources verify faster.
func newPublicKey(pub ed25519.PublicKey) PublicKey {
	x := b64url.EncodeToString(pub)
	tp := thumbprintX(x)
	return PublicKey{Key: pub, JWK: JWK{Kty: "OKP", Crv: "Ed25519", X: x, Kid: tp}, Thumbprint: tp, ed: newEdPublicKey(pub)}
}

// NewPrivateKey wraps an Ed25519 private key.
func NewPrivateKey(priv ed25519.PrivateKey) PrivateKey {
	return PrivateKey{Key: priv, Public: newPublicKey(priv.Public().(ed25519.PublicKey))}
}

// GenerateKey creates a new Ed25519 key from r (crypto/rand.Reader if nil).
func GenerateKey(r io.Reader) (PrivateKey, error) {
	if r == nil {
		r = rand.Reader
	}
	_, priv, err := ed25519.GenerateKey(r)
	if err != nil {
		return PrivateKey{}, fmt.Errorf("signer: generate key: %w", err)
	}
	return NewPrivateKey(priv), nil
}

// KeyID returns the key's kid (its thumbprint).
func (k PrivateKey) KeyID() string { return k.Public.JWK.Kid }

// JWK returns the private JWK (with d). Handle with care: it is the secret.
// A key that is not Exportable (held by a Signer) gives its public JWK.
func (k PrivateKey) JWK() JWK {
	j := k.Public.JWK
	if k.Exportable() {
		j.D = b64url.EncodeToString(k.Key.Seed())
	}
	return j
}

// MarshalPrivateJWK returns the JSON of the private JWK in the member order
// kty, crv, x, kid, d.
func (k PrivateKey) MarshalPrivateJWK() []byte {
	b, _ := json.Marshal(k.JWK())
	return b
}

// String never reveals the private key.
func (k PrivateKey) String() string { return "signer.PrivateKey{kid=" + k.KeyID() + "}" }

// Format prints String for every verb, so no fmt verb (%d, %x, %+v, %#v…)
// can print the key bytes.
func (k PrivateKey) Format(f fmt.State, _ rune) { io.WriteString(f, k.String()) }

// String prints a JWK without its d member.
func (j JWK) String() string {
	j.D = ""
	b, _ := json.Marshal(j)
	return string(b)
}

// Format prints String for every verb (%#v included), so no fmt verb can
// print d.
func (j JWK) Format(f fmt.State, _ rune) { io.WriteString(f, j.String()) }

// Public returns j without its private member d.
func (j JWK) Public() JWK { j.D = ""; return j }

// MarshalPublic returns the JSON of the public members only (for an
// Ed25519 key: kty, crv, x, kid).
func (j JWK) MarshalPublic() []byte {
	b, _ := json.Marshal(j.Public())
	return b
}

func decodeJWKObject(data []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, &JWKError{Reason: "not a JSON object"}
	}
	// Only white space may follow (the decoder's More lets a stray "]"
	// or "}" through).
	if len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")) > 0 {
		return nil, &JWKError{Reason: "trailing data after the JSON object"}
	}
	return m, nil
}

func stringMember(m map[string]json.RawMessage, name string, required bool) (string, error) {
	raw, ok := m[name]
	if !ok {
		if required {
			return "", &JWKError{Member: name, Reason: "missing"}
		}
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", &JWKError{Member: name, Reason: "not a string"}
	}
	return s, nil
}

// checkCurve checks that m's crv member is want: the one curve its key
// type supports here.
func checkCurve(m map[string]json.RawMessage, want string) error {
	crv, err := stringMember(m, "crv", true)
	if err != nil {
		return err
	}
	if crv != want {
		return &JWKError{Member: "crv", Reason: fmt.Sprintf("%q is not supported, want %q", Truncate(crv), want)}
	}
	return nil
}

func decode32(member, s string) ([]byte, error) {
	b, err := b64url.DecodeString(s)
	if err != nil {
		return nil, &JWKError{Member: member, Reason: "not unpadded base64url"}
	}
	if len(b) != 32 {
		return nil, &JWKError{Member: member, Reason: fmt.Sprintf("decodes to %d bytes, want 32", len(b))}
	}
	return b, nil
}

// parseJWK validates the common members and returns the map, the public key and d (may be empty).
func parseJWK(data []byte) (m map[string]json.RawMessage, pk PublicKey, d string, claimedKid string, err error) {
	m, err = decodeJWKObject(data)
	if err != nil {
		return nil, PublicKey{}, "", "", err
	}
	kty, err := stringMember(m, "kty", true)
	if err != nil {
		return nil, PublicKey{}, "", "", err
	}
	if kty != "OKP" {
		return nil, PublicKey{}, "", "", &JWKError{Member: "kty", Reason: fmt.Sprintf("%q is not supported, want \"OKP\"", Truncate(kty))}
	}
	if pk, err = parseOKP(m); err != nil {
		return nil, PublicKey{}, "", "", err
	}
	if claimedKid, err = stringMember(m, "kid", false); err != nil {
		return nil, PublicKey{}, "", "", err
	}
	if d, err = stringMember(m, "d", false); err != nil {
		return nil, PublicKey{}, "", "", err
	}
	return m, pk, d, claimedKid, nil
}

// parseOKP reads the crv and x members of an OKP JWK: an Ed25519 key.
func parseOKP(m map[string]json.RawMessage) (PublicKey, error) {
	if err := checkCurve(m, "Ed25519"); err != nil {
		return PublicKey{}, err
	}
	x, err := stringMember(m, "x", true)
	if err != nil {
		return PublicKey{}, err
	}
	xb, err := decode32("x", x)
	if err != nil {
		return PublicKey{}, err
	}
	return newPublicKey(ed25519.PublicKey(xb)), nil
}

// ParsePublicJWK parses and validates a public Ed25519 JWK: kty "OKP", crv
// "Ed25519", x exactly 32 bytes of unpadded base64url. A JWK carrying d is
// rejected (a private key must never be sent where a public one is expected).
// A kid, if present, must equal the thumbprint. Other members are permitted
// and dropped: the result is canonical (kty, crv, x, kid=thumbprint).
func ParsePublicJWK(data []byte) (PublicKey, error) {
	m, pk, d, kid, err := parseJWK(data)
	if err != nil {
		return PublicKey{}, err
	}
	if _, hasD := m["d"]; hasD || d != "" {
		return PublicKey{}, &JWKError{Member: "d", Reason: "a public JWK must not carry the private key"}
	}
	if kid != "" && kid != pk.JWK.Kid {
		return PublicKey{}, &JWKError{Member: "kid", Reason: "is not the RFC 7638 thumbprint of the key"}
	}
	return pk, nil
}

// ParsePrivateJWK parses and validates a private Ed25519 JWK: the public
// members as for ParsePublicJWK plus d, the 32-byte seed, which must produce x.
// A kid that is not the thumbprint is accepted (keys imported from elsewhere)
// but the returned key's kid is always the thumbprint. Error messages never
// contain the value of d.
func ParsePrivateJWK(data []byte) (PrivateKey, error) {
	_, pk, d, _, err := parseJWK(data)
	if err != nil {
		return PrivateKey{}, err
	}
	if d == "" {
		return PrivateKey{}, &JWKError{Member: "d", Reason: "missing"}
	}
	seed, err := decode32("d", d)
	if err != nil {
		return PrivateKey{}, err
	}
	priv := ed25519.NewKeyFromSeed(seed)
	if !bytes.Equal(priv.Public().(ed25519.PublicKey), pk.Key) {
		return PrivateKey{}, &JWKError{Member: "d", Reason: "does not match x"}
	}
	return PrivateKey{Key: priv, Public: pk}, nil
}
