package middleware_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

// TestVerifiersKeepTheirOwn: two verifiers in one process, on one key
// fetcher, with different caches of expanded keys and RSA bounds, each
// keep their own: building or using one changes nothing in the other.
func TestVerifiersKeepTheirOwn(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ed := ksEd25519(t, 0x51, "")
	// A 4104-bit modulus (no private key: its signatures never verify):
	// parsed by the fetcher, used only by a verifier whose bound allows it.
	n := bytes.Repeat([]byte{0xa5}, 4104/8)
	n[0] |= 0x80
	n[len(n)-1] |= 1
	bigJWK := `{"kty":"RSA","e":"AQAB","n":"` + b64(n) + `"}`
	big := ksSigner{name: "rsa-4104", alg: signer.AlgRSAPSSSHA512, pub: ksParse(t, bigJWK), jwk: bigJWK,
		sign: func([]byte) []byte { return bytes.Repeat([]byte{0x11}, 4104/8) }}
	srv := ksServer(t, false, map[string][2]string{
		signer.DirectoryPath: {signer.DirectoryMediaType, `{"keys":[` + ed.jwk + `,` + bigJWK + `]}`},
	})
	keys := ksFetcher(srv, func() time.Time { return now })

	small, none := signer.NewExpandedKeys(1), signer.NewExpandedKeys(0)
	a, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{"api.example"}, ExpandedKeys: small})
	if err != nil {
		t.Fatal(err)
	}
	b, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{"api.example"}, ExpandedKeys: none,
		Limits: signer.Limits{MaxRSABits: signer.LimitRSABits, MaxVerifyCost: 100}})
	if err != nil {
		t.Fatal(err)
	}
	check := func(v *middleware.Verifier, s ksSigner, want middleware.Code) {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, "http://api.example/x", nil)
		r.Header.Set("Signature-Agent", `sig1="`+srv.URL+`"`)
		ksSign(t, r, s, "sig1", `"@authority" "signature-agent";key="sig1"`, s.pub.Thumbprint, now)
		var got middleware.Code
		if _, err := v.Verify(r); err != nil {
			got = middleware.AsError(err).Code
		}
		if got != want {
			t.Errorf("%s: code %q, want %q", s.name, got, want)
		}
	}
	for range 3 {
		check(a, ed, "")
		check(b, ed, "")
	}
	wantSmall := 1
	if !expandedKeysCached {
		wantSmall = 0
	}
	if small.Len() != wantSmall || none.Len() != 0 {
		t.Errorf("after three verifications each: a's cache holds %d keys (want %d), b's %d (want 0)", small.Len(), wantSmall, none.Len())
	}
	// A third verifier with a cache of its own does not touch a's.
	if _, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{"api.example"}}); err != nil {
		t.Fatal(err)
	}
	if small.Len() != wantSmall {
		t.Errorf("a's cache holds %d keys after another verifier was built, want %d", small.Len(), wantSmall)
	}

	// The RSA bound: a's default refuses the 4104-bit key as it would a key
	// not published; b, raised, uses it (and the forged signature fails).
	check(a, big, middleware.CodeUnknownKey)
	check(b, big, middleware.CodeInvalidSignature)
	check(a, big, middleware.CodeUnknownKey)
	if err := (middleware.Config{Keys: keys, Limits: signer.Limits{MaxRSABits: signer.LimitRSABits + 1}}).Validate(); err == nil {
		t.Error("MaxRSABits above signer.LimitRSABits was accepted")
	}
}
