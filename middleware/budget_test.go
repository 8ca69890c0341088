package middleware_test

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/base64"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// checkCounter is a slog.Handler that counts the signature checks that
// failed: the verifier logs "signature base mismatch" at debug level once
// after each check whose signature does not verify, and nowhere else.
type checkCounter struct{ failed atomic.Int32 }

func (c *checkCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *checkCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *checkCounter) WithGroup(string) slog.Handler            { return c }
func (c *checkCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "signature base mismatch" {
		c.failed.Add(1)
	}
	return nil
}

// ksRSA4096 loads the 4096-bit RSA test key of testdata, published under
// kid.
func ksRSA4096(t testing.TB, kid string) ksSigner {
	t.Helper()
	priv := signertest.RSAKey(t, "testdata/rsa4096_test_key.pem")
	jwk := fmt.Sprintf(`{"kty":"RSA","alg":"PS512","n":%q,"e":"AQAB","kid":%q}`, b64(priv.N.Bytes()), kid)
	return ksSigner{name: "rsa-4096", alg: signer.AlgRSAPSSSHA512, pub: ksParse(t, jwk), jwk: jwk,
		sign: func(b []byte) []byte { return signertest.SignRSAPSS(priv, b) }}
}

// ksRSAPublic is an RSA key of bits bits that has no private key (its
// modulus is no product of two primes; nothing but its length matters to
// a check that fails), published under kid.
func ksRSAPublic(t testing.TB, bits int, kid string) ksSigner {
	t.Helper()
	n := bytes.Repeat([]byte{0xa5}, bits/8)
	n[0] |= 0x80
	n[len(n)-1] |= 1
	jwk := fmt.Sprintf(`{"kty":"RSA","alg":"PS512","n":%q,"e":"AQAB","kid":%q}`, b64(n), kid)
	return ksSigner{name: fmt.Sprintf("rsa-%d", bits), alg: signer.AlgRSAPSSSHA512, pub: ksParse(t, jwk), jwk: jwk}
}

// forge replaces s's signing with bytes that never verify but cost a whole
// check: for RSA a value below the modulus, for the others the right
// length.
func forge(s ksSigner) ksSigner {
	size := 64
	if s.pub.RSA != nil {
		size = s.pub.RSA.Size()
	}
	s.sign = func([]byte) []byte { return bytes.Repeat([]byte{0x01}, size) }
	s.name = "forged " + s.name
	return s
}

// ksSignAll signs r once per signer, labels sig1, sig2, …, each naming its
// key by kid at the key-set URL set, and sets the three fields.
func ksSignAll(t testing.TB, r *http.Request, set string, kids []string, signers ...ksSigner) {
	t.Helper()
	var in, sv, sa []string
	for i, s := range signers {
		label := fmt.Sprintf("sig%d", i+1)
		one := r.Clone(r.Context())
		ksSign(t, one, s, label, `"@authority"`, kids[i], testNow)
		in = append(in, one.Header.Get("Signature-Input"))
		sv = append(sv, one.Header.Get("Signature"))
		sa = append(sa, label+`="`+set+`"`)
	}
	r.Header.Set("Signature-Input", strings.Join(in, ", "))
	r.Header.Set("Signature", strings.Join(sv, ", "))
	r.Header.Set("Signature-Agent", strings.Join(sa, ", "))
}

// TestVerifyCostBudget: the signature checks of one request are bounded by
// their price (Config.MaxVerifyCost, in Ed25519 verifications), not only
// by their number. Keys come from a trusted key set fetched by a real
// keyfetch.Fetcher over loopback; the failed checks are counted from the
// verifier's debug log. Two forged RSA-4096 signatures get one check; one
// valid RSA-4096 signature still verifies; cheap algorithms still get two
// checks.
func TestVerifyCostBudget(t *testing.T) {
	t.Parallel()
	var (
		rsaA = ksRSA4096(t, "rsa-a")
		rsaB = ksRSAPublic(t, 4096, "rsa-b")
		rsaC = ksRSAPublic(t, 3072, "rsa-c")
		ed   = ksEd25519(t, 0x33, `,"kid":"ed"`)
		ec   = ksECDSA(t, `,"kid":"ec"`)
	)
	set := `{"keys":[` + strings.Join([]string{rsaA.jwk, rsaB.jwk, rsaC.jwk, ed.jwk, ec.jwk}, ",") + `]}`
	srv := ksServer(t, false, map[string][2]string{"/keys/jwks.json": {"application/json", set}})
	tests := []struct {
		name    string
		kids    []string
		signers []ksSigner
		code    middleware.Code // "" means verified
		failed  int32           // checks that ran and failed
	}{
		{"two forged RSA-4096", []string{"rsa-a", "rsa-b"}, []ksSigner{forge(rsaA), forge(rsaB)}, middleware.CodeInvalidSignature, 1},
		{"two forged RSA-4096 by one key", []string{"rsa-a", "rsa-a"}, []ksSigner{forge(rsaA), forge(rsaA)}, middleware.CodeInvalidSignature, 1},
		{"forged RSA-4096, then a valid one: not tried", []string{"rsa-b", "rsa-a"}, []ksSigner{forge(rsaB), rsaA}, middleware.CodeInvalidSignature, 1},
		{"one valid RSA-4096", []string{"rsa-a"}, []ksSigner{rsaA}, "", 0},
		{"forged RSA-3072, then a valid RSA-4096: not tried", []string{"rsa-c", "rsa-a"}, []ksSigner{forge(rsaC), rsaA}, middleware.CodeInvalidSignature, 1},
		{"forged Ed25519, then a valid RSA-4096: not tried", []string{"ed", "rsa-a"}, []ksSigner{forge(ed), rsaA}, middleware.CodeInvalidSignature, 1},
		{"forged Ed25519, then a valid Ed25519", []string{"ed", "ed"}, []ksSigner{forge(ed), ed}, "", 1},
		{"two forged Ed25519", []string{"ed", "ed"}, []ksSigner{forge(ed), forge(ed)}, middleware.CodeInvalidSignature, 2},
		{"three forged Ed25519: two checks", []string{"ed", "ed", "ed"}, []ksSigner{forge(ed), forge(ed), forge(ed)}, middleware.CodeInvalidSignature, 2},
		{"two forged ECDSA P-256", []string{"ec", "ec"}, []ksSigner{forge(ec), forge(ec)}, middleware.CodeInvalidSignature, 2},
		{"forged ECDSA P-256, then forged RSA-4096", []string{"ec", "rsa-b"}, []ksSigner{forge(ec), forge(rsaB)}, middleware.CodeInvalidSignature, 1},
	}
	// One Fetcher for all: the key set is fetched once, then every lookup
	// is cached, so the single-fetch bound plays no part.
	keys := ksFetcher(srv, clock)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			counter := &checkCounter{}
			v, err := middleware.New(middleware.Config{Keys: keys, Now: clock, Authorities: testAuthorities, Logger: slog.New(counter)})
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodGet, testURL, nil)
			ksSignAll(t, r, srv.URL+"/keys/jwks.json", tt.kids, tt.signers...)
			_, err = v.Verify(r)
			if got := middleware.Code(codeOf(err)); got != tt.code {
				t.Errorf("code = %q (%v), want %q", got, err, tt.code)
			}
			if got := counter.failed.Load(); got != tt.failed {
				t.Errorf("failed checks = %d, want %d", got, tt.failed)
			}
		})
	}
}

// TestVerifyCostTooLargeKey: a key whose one check costs more than the
// whole budget (an 8192-bit RSA key, which Limits.MaxRSABits raised lets a
// key set publish) is refused as unsupported_algorithm without being used, and
// the next signature is still tried; with MaxVerifyCost raised to its
// price it is checked.
func TestVerifyCostTooLargeKey(t *testing.T) {
	t.Parallel()
	n := bytes.Repeat([]byte{0xa5}, 8192/8)
	n[0] |= 0x80
	n[len(n)-1] |= 1
	big8192 := signer.PublicKey{RSA: &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: signer.RSAExponent}, Thumbprint: "rsa-8192"}
	big8192.JWK.Kid = "rsa-8192"
	keys := middleware.NewStaticKeys()
	keys.Add(testOrigin, big8192)
	keys.Add(testOrigin, keyA.Public)
	forged8192 := func(label string) (in, sv string) {
		one := httptest.NewRequest(http.MethodGet, testURL, nil)
		if err := signer.Sign(one, keyA, signOpts(func(o *signer.Options) { o.Label = label })); err != nil {
			t.Fatal(err)
		}
		in = strings.Replace(one.Header.Get("Signature-Input"), `keyid="`+keyA.KeyID()+`";alg="ed25519"`, `keyid="rsa-8192";alg="rsa-pss-sha512"`, 1)
		if in == one.Header.Get("Signature-Input") {
			t.Fatalf("no keyid and alg to replace in %s", in)
		}
		return in, label + "=:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x11}, 8192/8)) + ":"
	}
	if err := (middleware.Config{Keys: keys, Limits: signer.Limits{MaxVerifyCost: -1}}).Validate(); err == nil {
		t.Error("a negative MaxVerifyCost was accepted")
	}
	price := big8192.VerifyCost()
	if price <= middleware.DefaultMaxVerifyCost {
		t.Fatalf("an 8192-bit key is priced %d, within the default budget %d", price, middleware.DefaultMaxVerifyCost)
	}
	for _, tt := range []struct {
		name     string
		budget   int
		thenGood bool // a valid Ed25519 signature follows
		code     middleware.Code
		failed   int32
	}{
		{"default budget", 0, false, middleware.CodeUnsupportedAlgorithm, 0},
		{"default budget, then a valid Ed25519 signature", 0, true, "", 0},
		{"budget raised to its price", price, false, middleware.CodeInvalidSignature, 1},
		{"budget one below its price", price - 1, false, middleware.CodeUnsupportedAlgorithm, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			counter := &checkCounter{}
			v, err := middleware.New(middleware.Config{Keys: keys, Now: clock, Authorities: testAuthorities, Limits: signer.Limits{MaxVerifyCost: tt.budget, MaxRSABits: signer.LimitRSABits}, Logger: slog.New(counter)})
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodGet, testURL, nil)
			in, sv := forged8192("sig1")
			if tt.thenGood {
				good := httptest.NewRequest(http.MethodGet, testURL, nil)
				if err := signer.Sign(good, keyA, signOpts(func(o *signer.Options) { o.Label = "sig2" })); err != nil {
					t.Fatal(err)
				}
				in += ", " + good.Header.Get("Signature-Input")
				sv += ", " + good.Header.Get("Signature")
			}
			r.Header.Set("Signature-Input", in)
			r.Header.Set("Signature", sv)
			r.Header.Set("Signature-Agent", `sig1="`+testOrigin+`", sig2="`+testOrigin+`"`)
			_, err = v.Verify(r)
			if got := middleware.Code(codeOf(err)); got != tt.code {
				t.Errorf("code = %q (%v), want %q", got, err, tt.code)
			}
			if got := counter.failed.Load(); got != tt.failed {
				t.Errorf("failed checks = %d, want %d", got, tt.failed)
			}
		})
	}
}
