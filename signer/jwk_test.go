package signer_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// B.1.4 of RFC 9421 (also in testdata/vectors.json).
const (
	vecX          = "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"
	vecD          = "n4Ni-HpISpVObnQMW0wOhCKROaIKqKtW_2ZYb2p9KcU"
	vecThumbprint = "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U"
)

// seedKey returns a fixed key whose seed is n repeated 32 times.

// jwkJSON marshals members in a stable order; values may be any JSON value.
func jwkJSON(t testing.TB, members map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(members)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func b64(n int) string { return base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{7}, n)) }

func TestGenerateKey(t *testing.T) {
	t.Parallel()
	k, err := signer.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(k.Key); got != ed25519.PrivateKeySize {
		t.Fatalf("private key length = %d, want %d", got, ed25519.PrivateKeySize)
	}
	pub := k.Key.Public().(ed25519.PublicKey)
	if !pub.Equal(k.Public.Key) {
		t.Error("Public.Key is not the public half of Key")
	}
	j := k.Public.JWK
	if j.Kty != "OKP" || j.Crv != "Ed25519" || j.D != "" {
		t.Errorf("public JWK = %+v, want kty OKP, crv Ed25519 and no d", j)
	}
	if got, want := j.Kid, signer.Thumbprint(pub); got != want || k.KeyID() != want {
		t.Errorf("kid = %s (KeyID %s), want thumbprint %s", got, k.KeyID(), want)
	}
	// The JWKs it produces parse back to the same key.
	pk, err := signer.ParsePublicJWK(j.MarshalPublic())
	if err != nil {
		t.Fatalf("ParsePublicJWK(generated) = %v", err)
	}
	if pk.JWK != j {
		t.Errorf("public round trip = %+v, want %+v", pk.JWK, j)
	}
	sk, err := signer.ParsePrivateJWK(k.MarshalPrivateJWK())
	if err != nil {
		t.Fatalf("ParsePrivateJWK(generated) = %v", err)
	}
	if !sk.Key.Equal(k.Key) || sk.KeyID() != k.KeyID() {
		t.Error("private round trip changed the key")
	}

	k2, err := signer.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	if k2.KeyID() == k.KeyID() {
		t.Error("two generated keys share a kid")
	}
}

func TestGenerateKeyFromReader(t *testing.T) {
	t.Parallel()
	seed := bytes.Repeat([]byte{42}, ed25519.SeedSize)
	k, err := signer.GenerateKey(bytes.NewReader(seed))
	if err != nil {
		t.Fatal(err)
	}
	if want := ed25519.NewKeyFromSeed(seed); !k.Key.Equal(want) {
		t.Error("GenerateKey(reader) did not use the reader's bytes as the seed")
	}
	if _, err := signer.GenerateKey(bytes.NewReader(seed[:10])); err == nil {
		t.Error("GenerateKey(short reader) = nil error, want one")
	}
}

// jwkCase is one JWK parsing case: the input (in, or members marshalled)
// and the JWKError.Member wanted ("-" means success).
type jwkCase struct {
	name    string
	in      string
	members map[string]any // used when in is ""
	member  string
}

func (c jwkCase) json(t testing.TB) []byte {
	if c.members != nil {
		return jwkJSON(t, c.members)
	}
	return []byte(c.in)
}

func TestParsePublicJWK(t *testing.T) {
	t.Parallel()
	canonical := signer.JWK{Kty: "OKP", Crv: "Ed25519", X: vecX, Kid: vecThumbprint}
	tests := []jwkCase{
		{name: "minimal", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX}, member: "-"},
		{name: "thumbprint kid", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX, "kid": vecThumbprint}, member: "-"},
		{name: "extra members dropped", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX, "use": "sig", "alg": "EdDSA", "key_ops": []string{"verify"}, "x5c": []any{}}, member: "-"},
		{name: "not json", in: `nope`, member: ""},
		{name: "array", in: `[1,2]`, member: ""},
		{name: "null", in: `null`, member: ""},
		{name: "empty", in: ` `, member: ""},
		{name: "trailing data", in: `{"kty":"OKP","crv":"Ed25519","x":"` + vecX + `"} {}`, member: ""},
		{name: "stray }", in: `{"kty":"OKP","crv":"Ed25519","x":"` + vecX + `"}}`, member: ""},
		{name: "stray ] after white space", in: `{"kty":"OKP","crv":"Ed25519","x":"` + vecX + `"}` + " \n]", member: ""},
		{name: "missing kty", members: map[string]any{"crv": "Ed25519", "x": vecX}, member: "kty"},
		{name: "kty EC", members: map[string]any{"kty": "EC", "crv": "Ed25519", "x": vecX}, member: "kty"},
		{name: "kty lowercase", members: map[string]any{"kty": "okp", "crv": "Ed25519", "x": vecX}, member: "kty"},
		{name: "kty number", members: map[string]any{"kty": 1, "crv": "Ed25519", "x": vecX}, member: "kty"},
		{name: "missing crv", members: map[string]any{"kty": "OKP", "x": vecX}, member: "crv"},
		{name: "crv X25519", members: map[string]any{"kty": "OKP", "crv": "X25519", "x": vecX}, member: "crv"},
		{name: "crv Ed448", members: map[string]any{"kty": "OKP", "crv": "Ed448", "x": vecX}, member: "crv"},
		{name: "missing x", members: map[string]any{"kty": "OKP", "crv": "Ed25519"}, member: "x"},
		{name: "x not a string", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": 12}, member: "x"},
		{name: "x empty", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": ""}, member: "x"},
		{name: "x padded", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX + "="}, member: "x"},
		{name: "x standard alphabet", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": strings.NewReplacer("-", "+", "_", "/").Replace(vecX)}, member: "x"},
		{name: "x 31 bytes", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": b64(31)}, member: "x"},
		{name: "x 33 bytes", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": b64(33)}, member: "x"},
		{name: "x 64 bytes", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": b64(64)}, member: "x"},
		{name: "kid not the thumbprint", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX, "kid": "test-key-ed25519"}, member: "kid"},
		{name: "kid not a string", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX, "kid": 5}, member: "kid"},
		{name: "carries d", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX, "d": vecD}, member: "d"},
		{name: "carries empty d", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX, "d": ""}, member: "d"},
		{name: "duplicate d, last empty", in: `{"kty":"OKP","crv":"Ed25519","x":"` + vecX + `","d":"` + vecD + `","d":""}`, member: "d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := tt.json(t)
			pk, err := signer.ParsePublicJWK(in)
			if tt.member == "-" {
				if err != nil {
					t.Fatalf("ParsePublicJWK(%s) = %v, want success", in, err)
				}
				if pk.JWK != canonical {
					t.Errorf("JWK = %+v, want canonical %+v", pk.JWK, canonical)
				}
				if got, want := string(pk.JWK.MarshalPublic()), `{"kty":"OKP","crv":"Ed25519","x":"`+vecX+`","kid":"`+vecThumbprint+`"}`; got != want {
					t.Errorf("MarshalPublic = %s, want %s", got, want)
				}
				if x, _ := base64.RawURLEncoding.DecodeString(vecX); !bytes.Equal(pk.Key, x) {
					t.Errorf("Key = %x, want %x", pk.Key, x)
				}
				return
			}
			checkJWKError(t, err, tt.member)
			if strings.Contains(err.Error(), vecD) {
				t.Errorf("error %q contains d", err)
			}
		})
	}
}

func checkJWKError(t *testing.T, err error, member string) {
	t.Helper()
	if err == nil {
		t.Fatalf("error = nil, want a *JWKError for member %q", member)
	}
	if !errors.Is(err, signer.ErrInvalidJWK) {
		t.Errorf("errors.Is(%v, ErrInvalidJWK) = false", err)
	}
	var je *signer.JWKError
	if !errors.As(err, &je) {
		t.Fatalf("error %v (%T) is not a *JWKError", err, err)
	}
	if je.Member != member {
		t.Errorf("Member = %q (%v), want %q", je.Member, err, member)
	}
	if !strings.HasPrefix(err.Error(), "signer: invalid jwk") {
		t.Errorf("error %q does not start with the package prefix", err)
	}
	if member != "" && !strings.Contains(err.Error(), `"`+member+`"`) {
		t.Errorf("error %q does not name member %q", err, member)
	}
}

func TestParsePrivateJWK(t *testing.T) {
	t.Parallel()
	other := signertest.Key(9)
	otherD := other.JWK().D
	tests := []jwkCase{
		{name: "vector with foreign kid", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX, "d": vecD, "kid": "test-key-ed25519"}, member: "-"},
		{name: "no kid", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX, "d": vecD}, member: "-"},
		{name: "extra members", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX, "d": vecD, "use": "sig", "alg": "EdDSA"}, member: "-"},
		{name: "missing d", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX}, member: "d"},
		{name: "empty d", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX, "d": ""}, member: "d"},
		{name: "d not a string", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX, "d": []int{1}}, member: "d"},
		{name: "d padded", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX, "d": vecD + "="}, member: "d"},
		{name: "d standard alphabet", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX, "d": strings.NewReplacer("-", "+", "_", "/").Replace(vecD)}, member: "d"},
		{name: "d 31 bytes", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX, "d": vecD[:41]}, member: "d"},
		{name: "d 64 bytes", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX, "d": vecD + vecD + "AA"}, member: "d"},
		{name: "d of another key", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": vecX, "d": otherD}, member: "d"},
		{name: "x of another key", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": other.Public.JWK.X, "d": vecD}, member: "d"},
		{name: "bad kty with d", members: map[string]any{"kty": "RSA", "crv": "Ed25519", "x": vecX, "d": vecD}, member: "kty"},
		{name: "bad crv with d", members: map[string]any{"kty": "OKP", "crv": "P-256", "x": vecX, "d": vecD}, member: "crv"},
		{name: "bad x with d", members: map[string]any{"kty": "OKP", "crv": "Ed25519", "x": b64(31), "d": vecD}, member: "x"},
		{name: "not json", in: `{"d":"` + vecD + `"`, member: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k, err := signer.ParsePrivateJWK(tt.json(t))
			if tt.member == "-" {
				if err != nil {
					t.Fatalf("ParsePrivateJWK = %v, want success", err)
				}
				seed, _ := base64.RawURLEncoding.DecodeString(vecD)
				if !k.Key.Equal(ed25519.NewKeyFromSeed(seed)) {
					t.Error("Key is not the key of seed d")
				}
				if got := k.KeyID(); got != vecThumbprint {
					t.Errorf("KeyID = %s, want thumbprint %s", got, vecThumbprint)
				}
				want := signer.JWK{Kty: "OKP", Crv: "Ed25519", X: vecX, Kid: vecThumbprint, D: vecD}
				if got := k.JWK(); got != want {
					t.Errorf("JWK() = %#v (d hidden), want canonical members", got)
				}
				if got, want := string(k.MarshalPrivateJWK()), `{"kty":"OKP","crv":"Ed25519","x":"`+vecX+`","kid":"`+vecThumbprint+`","d":"`+vecD+`"}`; got != want {
					t.Errorf("MarshalPrivateJWK = %s, want %s", got, want)
				}
				return
			}
			checkJWKError(t, err, tt.member)
			for _, d := range []string{vecD, otherD} {
				if strings.Contains(err.Error(), d) || strings.Contains(err.Error(), d[:20]) {
					t.Errorf("error %q reveals d", err)
				}
			}
		})
	}
}

func TestPrivateKeyNeverPrinted(t *testing.T) {
	t.Parallel()
	k := signertest.Key(0xa5)
	seed := k.Key.Seed()
	secrets := []string{
		base64.RawURLEncoding.EncodeToString(seed),
		base64.StdEncoding.EncodeToString(seed),
		hex.EncodeToString(seed),
		strings.ToUpper(hex.EncodeToString(seed)),
		strings.Trim(fmt.Sprint(seed[:8]), "[]"),  // "165 165 …" as %v of the bytes
		fmt.Sprintf("%q", string(seed[:8]))[1:20], // escaped raw bytes
	}
	values := map[string]any{
		"PrivateKey":        k,
		"*PrivateKey":       &k,
		"[]PrivateKey":      []signer.PrivateKey{k},
		"struct field":      struct{ Key signer.PrivateKey }{k},
		"Transport":         signer.Transport{Key: k},
		"*Transport":        &signer.Transport{Key: k},
		"JWK()":             k.JWK(),
		"*JWK":              func() *signer.JWK { j := k.JWK(); return &j }(),
		"map of JWK":        map[string]signer.JWK{"k": k.JWK()},
		"JWK().String()":    k.JWK().String(),
		"%#v of JWK()":      fmt.Sprintf("%#v", k.JWK()),
		"PrivateKey.String": k.String(),
		"%#v":               fmt.Sprintf("%#v", k),
	}
	for name, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X"} {
			out := fmt.Sprintf(verb, v)
			for _, s := range secrets {
				if strings.Contains(out, s) {
					t.Errorf("Sprintf(%q, %s) = %s, reveals the private key (%s)", verb, name, out, s)
				}
			}
		}
	}
	if got := k.String(); !strings.Contains(got, k.KeyID()) {
		t.Errorf("String() = %q, want it to name the kid %s", got, k.KeyID())
	}
	if got := k.JWK().String(); strings.Contains(got, `"d"`) {
		t.Errorf("JWK.String() = %s, has a d member", got)
	}
	if got := string(k.JWK().MarshalPublic()); strings.Contains(got, `"d"`) {
		t.Errorf("MarshalPublic = %s, has a d member", got)
	}
	if got := k.JWK().Public(); got.D != "" || got != k.Public.JWK {
		t.Errorf("JWK().Public() = %v, want the public JWK", got)
	}
}

func TestThumbprintMatchesX(t *testing.T) {
	t.Parallel()
	for _, n := range []byte{0, 1, 200} {
		k := signertest.Key(n)
		// RFC 7638: the hash of the required members, sorted, no spaces
		// (encoding/json sorts map keys and writes compactly).
		canonical, err := json.Marshal(map[string]string{"kty": "OKP", "crv": "Ed25519", "x": k.Public.JWK.X})
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(canonical)
		if got, want := signer.Thumbprint(k.Public.Key), base64.RawURLEncoding.EncodeToString(sum[:]); got != want {
			t.Errorf("Thumbprint = %s, want %s (hash of %s)", got, want, canonical)
		}
		if len(k.KeyID()) != 43 {
			t.Errorf("kid %q has length %d, want 43 (32 bytes, base64url)", k.KeyID(), len(k.KeyID()))
		}
	}
}

// TestParsePublicJWKNonCanonicalX: an x that is not the canonical encoding
// of its 32 bytes (non-zero trailing bits, an embedded newline) is either
// rejected as member x or canonicalized, so the kid is always the thumbprint
// of the canonical encoding and two spellings never yield two kids.
func TestParsePublicJWKNonCanonicalX(t *testing.T) {
	t.Parallel()
	for name, x := range map[string]string{
		"trailing bits": vecX[:42] + "t",
		"newline":       vecX[:20] + "\n" + vecX[20:],
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pk, err := signer.ParsePublicJWK(jwkJSON(t, map[string]any{"kty": "OKP", "crv": "Ed25519", "x": x}))
			if err != nil {
				checkJWKError(t, err, "x")
				return
			}
			if pk.JWK.X != vecX || pk.JWK.Kid != vecThumbprint {
				t.Errorf("JWK = %+v, want x %s and kid %s", pk.JWK, vecX, vecThumbprint)
			}
		})
	}
}

func TestFormatVerbsNeverPrintSecret(t *testing.T) {
	k := signertest.Key(7)
	d := k.JWK().D
	seed := fmt.Sprint([]byte(k.Key.Seed()))
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%d", "%x", "%X", "%q", "%o", "%b"} {
		for name, v := range map[string]any{"key": k, "jwk": k.JWK(), "ptr": &k, "slice": []signer.PrivateKey{k}} {
			out := fmt.Sprintf(verb, v)
			if strings.Contains(out, d) || strings.Contains(out, seed[1:len(seed)-1]) {
				t.Errorf("%s of %s prints the private key: %s", verb, name, out)
			}
		}
	}
}
