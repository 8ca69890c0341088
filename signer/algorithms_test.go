package signer_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// rsaModulus returns the base64url encoding of an odd number of exactly
// bits bits (bits a multiple of 8): enough for ParseKeySetJWK, which never
// does arithmetic on it.
func rsaModulus(bits int) string {
	n := bytes.Repeat([]byte{0xa5}, bits/8)
	n[0] |= 0x80
	n[len(n)-1] |= 1
	return base64.RawURLEncoding.EncodeToString(n)
}

// TestRSABitsParsed: ParseKeySetJWK accepts moduli up to LimitRSABits and
// refuses longer ones; which of them a verifier uses is its
// Limits.MaxRSABits (DefaultMaxRSABits unless raised), tested in
// middleware's TestVerifiersKeepTheirOwn.
func TestRSABitsParsed(t *testing.T) {
	for _, bits := range []int{2048, 3072, 4096, 8192} {
		if pk, err := signer.ParseKeySetJWK([]byte(`{"kty":"RSA","e":"AQAB","n":"` + rsaModulus(bits) + `"}`)); err != nil || pk.RSA.N.BitLen() != bits {
			t.Errorf("a %d-bit key: %v", bits, err)
		}
	}
	for _, bits := range []int{2040, 8200, 48000} {
		if _, err := signer.ParseKeySetJWK([]byte(`{"kty":"RSA","e":"AQAB","n":"` + rsaModulus(bits) + `"}`)); err == nil {
			t.Errorf("a %d-bit key was accepted", bits)
		}
	}
}

// rsaECDSAVectors are RFC 9421's B.1.2 and B.1.3 public keys and the B.2.1–
// B.2.4 examples signed with them (testdata/rfc9421_rsa_ecdsa.json).
type rsaECDSAVectors struct {
	Keys map[string]struct {
		JWK        json.RawMessage `json:"jwk"`
		Thumbprint string          `json:"thumbprint"`
	} `json:"keys"`
	Examples []struct {
		ID             string         `json:"id"`
		Alg            string         `json:"alg"`
		KeyID          string         `json:"keyid"`
		Message        vectorMessage  `json:"message"`
		Request        *vectorMessage `json:"request"`
		SignatureInput string         `json:"signature_input"`
		Signature      string         `json:"signature"`
		SignatureBase  string         `json:"signature_base"`
	} `json:"examples"`
}

type vectorMessage struct {
	Kind    string `json:"kind"`
	Method  string `json:"method"`
	URL     string `json:"url"`
	Status  int    `json:"status"`
	Headers []struct {
		Name, Value string
	} `json:"headers"`
	Body string `json:"body"`
}

func (m vectorMessage) request(t testing.TB) *http.Request {
	r, err := http.NewRequest(m.Method, m.URL, strings.NewReader(m.Body))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range m.Headers {
		if h.Name == "Host" {
			r.Host = h.Value
			continue
		}
		r.Header.Add(h.Name, h.Value)
	}
	return r
}

func (m vectorMessage) response(req *http.Request) *http.Response {
	resp := &http.Response{StatusCode: m.Status, Header: http.Header{}, Request: req, Body: io.NopCloser(strings.NewReader(m.Body))}
	for _, h := range m.Headers {
		resp.Header.Add(h.Name, h.Value)
	}
	return resp
}

func loadRSAECDSA(t testing.TB) rsaECDSAVectors {
	b, err := os.ReadFile("testdata/rfc9421_rsa_ecdsa.json")
	if err != nil {
		t.Fatal(err)
	}
	var v rsaECDSAVectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRFC9421RSAAndECDSA rebuilds each signature base of RFC 9421 B.2.1–
// B.2.4 byte for byte (three requests signed with rsa-pss-sha512, one
// response with ecdsa-p256-sha256) and verifies the published signature
// with the B.1.2 / B.1.3 key; one changed byte fails.
func TestRFC9421RSAAndECDSA(t *testing.T) {
	t.Parallel()
	v := loadRSAECDSA(t)
	if len(v.Examples) != 4 {
		t.Fatalf("%d examples, want 4", len(v.Examples))
	}
	for _, ex := range v.Examples {
		t.Run(ex.ID, func(t *testing.T) {
			kv := v.Keys[ex.KeyID]
			pk, err := signer.ParseKeySetJWK(kv.JWK)
			if err != nil {
				t.Fatal(err)
			}
			if pk.Thumbprint != kv.Thumbprint || pk.Algorithm() != ex.Alg {
				t.Fatalf("thumbprint, algorithm = %s, %s; want %s, %s", pk.Thumbprint, pk.Algorithm(), kv.Thumbprint, ex.Alg)
			}
			sigs, err := signer.ParseSignatures([]string{ex.SignatureInput}, []string{ex.Signature})
			if err != nil || len(sigs) != 1 {
				t.Fatalf("ParseSignatures: %v", err)
			}
			var base []byte
			if ex.Message.Kind == "response" {
				base, err = sigs[0].AppendResponseBase(nil, ex.Message.response(ex.Request.request(t)))
			} else {
				base, err = sigs[0].Base(ex.Message.request(t))
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(base) != ex.SignatureBase {
				t.Fatalf("base:\n%s\nwant:\n%s", base, ex.SignatureBase)
			}
			if err := pk.Verify(ex.Alg, base, sigs[0].Value); err != nil {
				t.Errorf("Verify: %v", err)
			}
			if err := pk.Verify("", base, sigs[0].Value); err != nil {
				t.Errorf("Verify with alg from the key: %v", err)
			}
			bad := bytes.Clone(base)
			bad[len(bad)-1] ^= 1
			if err := pk.Verify(ex.Alg, bad, sigs[0].Value); !errors.Is(err, signer.ErrBadSignature) {
				t.Errorf("Verify of a changed base = %v, want ErrBadSignature", err)
			}
			if err := pk.Verify(signer.AlgEd25519, base, sigs[0].Value); !errors.Is(err, signer.ErrAlgorithmMismatch) {
				t.Errorf("Verify as ed25519 = %v, want ErrAlgorithmMismatch", err)
			}
		})
	}
}

func TestParseKeySetJWK(t *testing.T) {
	t.Parallel()
	v := loadRSAECDSA(t)
	rsaJWK := string(v.Keys["test-key-rsa-pss"].JWK)
	ecJWK := string(v.Keys["test-key-ecc-p256"].JWK)
	ed := signertest.Key(9).Public
	edJWK := `{"kty":"OKP","crv":"Ed25519","x":"` + ed.JWK.X + `"`
	with := func(jwk, members string) string { return strings.TrimSuffix(jwk, "}") + "," + members + "}" }
	tests := []struct {
		name, jwk, wantAlg, wantKid, wantErr string
	}{
		{name: "ed25519 without kid", jwk: edJWK + "}", wantAlg: "ed25519", wantKid: ed.Thumbprint},
		{name: "ed25519 alg EdDSA", jwk: edJWK + `,"alg":"EdDSA","kid":"k-1"}`, wantAlg: "ed25519", wantKid: "k-1"},
		{name: "ed25519 alg Ed25519", jwk: edJWK + `,"alg":"Ed25519"}`, wantAlg: "ed25519", wantKid: ed.Thumbprint},
		{name: "ed25519 marked for another algorithm", jwk: edJWK + `,"alg":"ES256"}`, wantErr: "alg"},
		{name: "rsa", jwk: rsaJWK, wantAlg: "rsa-pss-sha512", wantKid: v.Keys["test-key-rsa-pss"].Thumbprint},
		{name: "rsa PS512 with kid", jwk: with(rsaJWK, `"alg":"PS512","kid":"r"`), wantAlg: "rsa-pss-sha512", wantKid: "r"},
		{name: "rsa RS256 refused", jwk: with(rsaJWK, `"alg":"RS256"`), wantErr: "alg"},
		{name: "rsa private refused", jwk: with(rsaJWK, `"d":"AQAB"`), wantErr: `"d"`},
		{name: "rsa 1024 bits refused", jwk: `{"kty":"RSA","e":"AQAB","n":"w` + strings.Repeat("A", 169) + `B"}`, wantErr: "modulus"},
		{name: "rsa even exponent", jwk: `{"kty":"RSA","e":"AQAC","n":"` + strings.Repeat("_", 341) + `w"}`, wantErr: "exponent"},
		{name: "rsa exponent 3 refused", jwk: `{"kty":"RSA","e":"Aw","n":"` + rsaModulus(2048) + `"}`, wantErr: "exponent"},
		{name: "rsa exponent 2^31-1 refused", jwk: `{"kty":"RSA","e":"f____w","n":"` + rsaModulus(2048) + `"}`, wantErr: "exponent"},
		{name: "rsa 48,000-bit modulus, exponent 2^31-1 refused", jwk: `{"kty":"RSA","e":"f____w","n":"` + rsaModulus(48000) + `"}`, wantErr: "exponent"},
		{name: "rsa 48,000-bit modulus refused", jwk: `{"kty":"RSA","e":"AQAB","n":"` + rsaModulus(48000) + `"}`, wantErr: "modulus"},
		{name: "rsa 8200 bits refused", jwk: `{"kty":"RSA","e":"AQAB","n":"` + rsaModulus(8200) + `"}`, wantErr: "modulus"}, // 4104 bits: a verifier refuses it by default (middleware)
		{name: "ec", jwk: ecJWK, wantAlg: "ecdsa-p256-sha256", wantKid: v.Keys["test-key-ecc-p256"].Thumbprint},
		{name: "ec point off the curve", jwk: `{"kty":"EC","crv":"P-256","x":"` + ed.JWK.X + `","y":"` + ed.JWK.X + `"}`, wantErr: "P-256"},
		{name: "ec P-384 refused", jwk: strings.Replace(ecJWK, "P-256", "P-384", 1), wantErr: "crv"},
		{name: "oct refused", jwk: `{"kty":"oct","k":"AQAB"}`, wantErr: `"k"`},
		{name: "unknown kty", jwk: `{"kty":"XYZ"}`, wantErr: "kty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pk, err := signer.ParseKeySetJWK([]byte(tt.jwk))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, signer.ErrInvalidJWK) {
					t.Fatalf("ParseKeySetJWK = %+v, %v; want an error about %s", pk.JWK, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pk.Algorithm() != tt.wantAlg || pk.JWK.Kid != tt.wantKid || pk.Thumbprint == "" {
				t.Errorf("alg, kid, thumbprint = %s, %s, %s; want %s, %s", pk.Algorithm(), pk.JWK.Kid, pk.Thumbprint, tt.wantAlg, tt.wantKid)
			}
			if strings.Contains(string(pk.JWK.MarshalPublic()), `"d"`) {
				t.Error("public JWK carries d")
			}
		})
	}
}
