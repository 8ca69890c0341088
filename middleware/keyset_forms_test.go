package middleware_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// End-to-end tests of every key-set form deployed signers use: a key
// server on loopback publishes the keys, requests are signed the way each
// signer does (signer.Sign for Ed25519; Go's crypto for RSA-PSS and ECDSA,
// with Signature-Input built by hand), and a middleware.Verifier resolves
// keys through a real keyfetch.Fetcher.

var b64 = base64.RawURLEncoding.EncodeToString

// ksSigner signs a signature base with one key: keyid is what the
// Signature-Input names, alg the RFC 9421 algorithm.
type ksSigner struct {
	name string
	alg  string
	pub  signer.PublicKey
	jwk  string // the public JWK as a key set publishes it
	sign func(base []byte) []byte
	priv signer.PrivateKey // Ed25519 only, for signer.Sign
}

func ksEd25519(t testing.TB, seed byte, jwkExtra string) ksSigner {
	t.Helper()
	k := signer.NewPrivateKey(ed25519.NewKeyFromSeed(bytesOf(seed, ed25519.SeedSize)))
	jwk := fmt.Sprintf(`{"kty":"OKP","crv":"Ed25519","x":%q%s}`, k.Public.JWK.X, jwkExtra)
	return ksSigner{name: "ed25519", alg: signer.AlgEd25519, pub: ksParse(t, jwk), jwk: jwk, priv: k,
		sign: func(b []byte) []byte { return ed25519.Sign(k.Key, b) }}
}

// ksRSA loads the RSA test key of testdata: rsa-pss-sha512 (RSASSA-PSS,
// SHA-512, 64-byte salt), published with "alg":"PS512" as web-bot-auth
// 0.1.3 publishes its RSA keys.
func ksRSA(t testing.TB, jwkExtra string) ksSigner {
	t.Helper()
	priv := signertest.RSAKey(t, "testdata/rsa_test_key.pem")
	e := []byte{byte(priv.E >> 16), byte(priv.E >> 8), byte(priv.E)}
	jwk := fmt.Sprintf(`{"kty":"RSA","alg":"PS512","n":%q,"e":%q%s}`, b64(priv.N.Bytes()), b64(trimZeros(e)), jwkExtra)
	return ksSigner{name: "rsa-pss", alg: signer.AlgRSAPSSSHA512, pub: ksParse(t, jwk), jwk: jwk,
		sign: func(b []byte) []byte { return signertest.SignRSAPSS(priv, b) }}
}

// ksECDSA is a fixed P-256 key: ecdsa-p256-sha256, r‖s over SHA-256.
func ksECDSA(t testing.TB, jwkExtra string) ksSigner {
	t.Helper()
	d := sha256.Sum256([]byte("middleware keyset forms P-256 key"))
	priv, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d[:])
	if err != nil {
		t.Fatal(err)
	}
	pt, err := priv.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	jwk := fmt.Sprintf(`{"kty":"EC","crv":"P-256","x":%q,"y":%q%s}`, b64(pt[1:33]), b64(pt[33:]), jwkExtra)
	return ksSigner{name: "ecdsa-p256", alg: signer.AlgECDSAP256SHA256, pub: ksParse(t, jwk), jwk: jwk,
		sign: func(b []byte) []byte { return signertest.SignECDSA(priv, b) }}
}

func ksParse(t testing.TB, jwk string) signer.PublicKey {
	t.Helper()
	pk, err := signer.ParseKeySetJWK([]byte(jwk))
	if err != nil {
		t.Fatalf("ParseKeySetJWK(%s): %v", jwk, err)
	}
	return pk
}

func bytesOf(b byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

func trimZeros(b []byte) []byte {
	for len(b) > 1 && b[0] == 0 {
		b = b[1:]
	}
	return b
}

// ksSign signs r with s over the covered components, the parameters in
// web-bot-auth's order (created, keyid, alg, expires, nonce, tag), and
// sets Signature-Input and Signature for label.
func ksSign(t testing.TB, r *http.Request, s ksSigner, label, components, keyid string, now time.Time) {
	t.Helper()
	nonce := make([]byte, 64)
	_, _ = rand.Read(nonce)
	params := fmt.Sprintf(`(%s);created=%d;keyid=%q;alg=%q;expires=%d;nonce=%q;tag="web-bot-auth"`,
		components, now.Unix(), keyid, s.alg, now.Add(5*time.Minute).Unix(), base64.StdEncoding.EncodeToString(nonce))
	base, err := signer.SignatureBase(r, params)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Signature-Input", label+"="+params)
	r.Header.Set("Signature", label+"=:"+base64.StdEncoding.EncodeToString(s.sign(base))+":")
}

// ksServer publishes key sets at fixed paths; "{origin}" in a body is the
// server's origin.
func ksServer(t testing.TB, tls bool, docs map[string][2]string) *httptest.Server {
	t.Helper()
	var srv *httptest.Server
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := docs[r.URL.RequestURI()]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", d[0])
		w.Header().Set("Cache-Control", "max-age=300")
		_, _ = w.Write([]byte(strings.ReplaceAll(d[1], "{origin}", srv.URL)))
	})
	if tls {
		srv = httptest.NewTLSServer(h)
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	return srv
}

// ksFetcher is a real Fetcher trusting the key server's host.
func ksFetcher(srv *httptest.Server, now func() time.Time) *keyfetch.Fetcher {
	cfg := keyfetch.Config{TrustedHosts: []string{"127.0.0.1:*"}, AllowHTTP: true, AllowPrivateNetworks: true, Now: now}
	if srv.TLS != nil {
		cfg.HTTPClient = srv.Client()
	}
	return keyfetch.New(cfg)
}

// TestKeySetForms signs requests with each Signature-Agent shape deployed
// signers send and each algorithm, against key sets in each published
// form, and verifies them through the middleware and a real Fetcher.
func TestKeySetForms(t *testing.T) {
	t.Parallel()
	var (
		edThumb = ksEd25519(t, 0x11, "")                           // kid absent: the thumbprint
		edKid   = ksEd25519(t, 0x22, `,"kid":"2026-01-ed25519"`)   // a kid that is not the thumbprint
		edDSA   = ksEd25519(t, 0x33, `,"alg":"EdDSA","use":"sig"`) // "alg":"EdDSA", no kid
		edSolo  = ksEd25519(t, 0x44, `,"kid":"solo"`)              // served as one bare JWK
		rsaKey  = ksRSA(t, `,"kid":"rsa-2026"`)                    // web-bot-auth 0.1.3's RSA shape
		ecKey   = ksECDSA(t, `,"kid":"ec-2026"`)                   // P-256
		keys    = `{"keys":[` + strings.Join([]string{edThumb.jwk, edKid.jwk, edDSA.jwk, rsaKey.jwk, ecKey.jwk}, ",") + `]}`
		jwks    = `{"keys":[` + strings.Join([]string{rsaKey.jwk, ecKey.jwk, edKid.jwk}, ",") + `]}`
		docs    = map[string][2]string{
			signer.DirectoryPath:    {signer.DirectoryMediaType, keys},
			"/keys/directory.json":  {signer.DirectoryMediaType, keys},
			"/keys/jwks.json":       {keyfetch.JWKSetMediaType, jwks},
			"/agent/card.json":      {"application/json", `{"client_name":"Example Agent","jwks_uri":"{origin}/keys/jwks.json"}`},
			"/agent/card-keys.json": {"application/json", `{"client_name":"Example Agent","jwks":` + jwks + `}`},
			"/keys/solo.json":       {"application/json", edSolo.jwk},
		}
	)
	const wellKnown = signer.DirectoryPath
	tests := []struct {
		name      string
		tls       bool
		field     string // Signature-Agent; {origin} is the key server's
		signer    ksSigner
		keyid     string // "" means the key's thumbprint
		covered   string // "" means ("@authority")
		label     string // "" means sig1
		wantCode  middleware.Code
		wantID    string // Agent.ID; {origin} replaced
		wantURL   string // Agent.DirectoryURL; {origin} replaced
		useSigner bool   // sign with signer.Sign (Ed25519, keyid = thumbprint)
	}{
		// The string origin (chatgpt.com's shape), over TLS and plain HTTP.
		{name: "string origin over https", tls: true, field: `"{origin}"`, signer: edThumb, useSigner: true, wantID: "{origin}", wantURL: "{origin}" + wellKnown},
		{name: "string origin", field: `"{origin}"`, signer: edThumb, useSigner: true, wantID: "{origin}", wantURL: "{origin}" + wellKnown},
		// A dictionary whose key is not the label (agent.bot.goog's shape).
		{name: "dictionary g=", field: `g="{origin}"`, signer: edThumb, useSigner: true, wantID: "{origin}", wantURL: "{origin}" + wellKnown},
		{name: "dictionary g= covered by key", field: `g="{origin}"`, signer: edThumb, covered: `"@authority" "signature-agent";key="g"`, wantID: "{origin}", wantURL: "{origin}" + wellKnown},
		// An unquoted URL: a structured-field token (duckduckgo.com's shape).
		{name: "token URL", field: `{origin}`, signer: edThumb, useSigner: true, wantID: "{origin}", wantURL: "{origin}" + wellKnown},
		{name: "token URL, whole field covered (web-bot-auth 0.1.3)", field: `{origin}`, signer: rsaKey, covered: `"@authority" "signature-agent"`, wantID: "{origin}", wantURL: "{origin}" + wellKnown},
		// Algorithms at the well-known directory, keyid = thumbprint.
		{name: "rsa-pss-sha512 at the well-known directory", field: `sig1="{origin}"`, signer: rsaKey, wantID: "{origin}", wantURL: "{origin}" + wellKnown},
		{name: "ecdsa-p256-sha256 at the well-known directory", field: `sig1="{origin}"`, signer: ecKey, wantID: "{origin}", wantURL: "{origin}" + wellKnown},
		{name: `"alg":"EdDSA" key without kid`, field: `sig1="{origin}"`, signer: edDSA, wantID: "{origin}", wantURL: "{origin}" + wellKnown},
		// A kid that is not the thumbprint: only its thumbprint works at the
		// well-known path; at a direct key-set URL the kid works too.
		{name: "well-known directory: kid that is not the thumbprint refused", field: `sig1="{origin}"`, signer: edKid, keyid: "2026-01-ed25519", wantCode: middleware.CodeUnknownKey},
		{name: "well-known directory: same key by thumbprint", field: `sig1="{origin}"`, signer: edKid, wantID: "{origin}", wantURL: "{origin}" + wellKnown},
		{name: "well-known path given in full: kid refused", field: `sig1="{origin}` + wellKnown + `";type=directory`, signer: edKid, keyid: "2026-01-ed25519", wantCode: middleware.CodeUnknownKey},
		{name: ";type=directory at a path: by kid", field: `sig1="{origin}/keys/directory.json";type=directory`, signer: edKid, keyid: "2026-01-ed25519", wantID: "{origin}/keys/directory.json", wantURL: "{origin}/keys/directory.json"},
		{name: ";type=directory at a path: by thumbprint", field: `sig1="{origin}/keys/directory.json";type=directory`, signer: edKid, wantID: "{origin}/keys/directory.json", wantURL: "{origin}/keys/directory.json"},
		{name: "direct key-set URL, no type, key without kid", field: `sig1="{origin}/keys/directory.json"`, signer: edThumb, wantID: "{origin}/keys/directory.json", wantURL: "{origin}/keys/directory.json"},
		{name: "direct key-set URL, rsa by kid", field: `sig1="{origin}/keys/directory.json"`, signer: rsaKey, keyid: "rsa-2026", covered: `"@authority" "signature-agent";key="sig1"`, wantID: "{origin}/keys/directory.json", wantURL: "{origin}/keys/directory.json"},
		// ;type=jwks_uri and ;type=cimd members.
		{name: ";type=jwks_uri, rsa-pss by kid", field: `sig1="{origin}/keys/jwks.json";type=jwks_uri`, signer: rsaKey, keyid: "rsa-2026", wantID: "{origin}/keys/jwks.json", wantURL: "{origin}/keys/jwks.json"},
		{name: ";type=jwks_uri, ecdsa by kid", field: `sig1="{origin}/keys/jwks.json";type=jwks_uri`, signer: ecKey, keyid: "ec-2026", wantID: "{origin}/keys/jwks.json", wantURL: "{origin}/keys/jwks.json"},
		{name: ";type=jwks_uri, ed25519 by kid, member covered", field: `sig1="{origin}/keys/jwks.json";type=jwks_uri`, signer: edKid, keyid: "2026-01-ed25519", covered: `"@authority" "signature-agent";key="sig1"`, wantID: "{origin}/keys/jwks.json", wantURL: "{origin}/keys/jwks.json"},
		{name: ";type=jwks_uri, key not in that set", field: `sig1="{origin}/keys/jwks.json";type=jwks_uri`, signer: edThumb, wantCode: middleware.CodeUnknownKey},
		{name: ";type=cimd card naming a jwks_uri, ecdsa", field: `sig1="{origin}/agent/card.json";type=cimd`, signer: ecKey, keyid: "ec-2026", wantID: "{origin}/agent/card.json", wantURL: "{origin}/agent/card.json"},
		{name: ";type=cimd card with inline jwks, rsa-pss", field: `sig1="{origin}/agent/card-keys.json";type=cimd`, signer: rsaKey, keyid: "rsa-2026", wantID: "{origin}/agent/card-keys.json", wantURL: "{origin}/agent/card-keys.json"},
		{name: "member by label among several typed members", field: `agent="{origin}/agent/card.json";type=cimd, sig2="{origin}/keys/jwks.json";type=jwks_uri`, label: "sig2", signer: rsaKey, keyid: "rsa-2026", wantID: "{origin}/keys/jwks.json", wantURL: "{origin}/keys/jwks.json"},
		// A document that is one bare JWK.
		{name: "single bare JWK, by kid", field: `sig1="{origin}/keys/solo.json"`, signer: edSolo, keyid: "solo", wantID: "{origin}/keys/solo.json", wantURL: "{origin}/keys/solo.json"},
		{name: "single bare JWK, by thumbprint", field: `sig1="{origin}/keys/solo.json"`, signer: edSolo, wantID: "{origin}/keys/solo.json", wantURL: "{origin}/keys/solo.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := ksServer(t, tt.tls, docs)
			sub := strings.NewReplacer("{origin}", srv.URL)
			v, err := middleware.New(middleware.Config{Authorities: testAuthorities, Keys: ksFetcher(srv, clock), Now: clock})
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodGet, "https://api.example.com/v1/things", nil)
			r.Header.Set("Signature-Agent", sub.Replace(tt.field))
			label := tt.label
			if label == "" {
				label = "sig1"
			}
			keyid := tt.keyid
			if keyid == "" {
				keyid = tt.signer.pub.Thumbprint
			}
			switch {
			case tt.useSigner:
				if err := signer.Sign(r, tt.signer.priv, signer.Options{Label: label, Now: clock}); err != nil {
					t.Fatal(err)
				}
			default:
				covered := tt.covered
				if covered == "" {
					covered = `"@authority"`
				}
				ksSign(t, r, tt.signer, label, covered, keyid, clock())
			}
			res := v.Check(r)
			if tt.wantCode != "" {
				if res.Outcome == middleware.OutcomeVerified || res.Err == nil || res.Err.Code != tt.wantCode {
					t.Fatalf("verdict %s, error %v; want invalid with %s", res.Outcome, res.Err, tt.wantCode)
				}
				return
			}
			if res.Outcome != middleware.OutcomeVerified {
				t.Fatalf("verdict %s, error %v (%v); want verified", res.Outcome, res.Err, errOf(res.Err))
			}
			a := res.Agent
			if a.ID != sub.Replace(tt.wantID) || a.DirectoryURL != sub.Replace(tt.wantURL) {
				t.Errorf("agent ID %q, DirectoryURL %q; want %q, %q", a.ID, a.DirectoryURL, sub.Replace(tt.wantID), sub.Replace(tt.wantURL))
			}
			if a.Alg != tt.signer.alg || a.KeyID != keyid || a.JWK.Kty != tt.signer.pub.JWK.Kty {
				t.Errorf("agent alg %q, keyid %q, kty %q; want %q, %q, %q", a.Alg, a.KeyID, a.JWK.Kty, tt.signer.alg, keyid, tt.signer.pub.JWK.Kty)
			}
		})
	}
}

func errOf(e *middleware.Error) error {
	if e == nil {
		return nil
	}
	return e.Err
}

// TestRFC9421VectorsThroughKeySet verifies RFC 9421's own RSA-PSS request
// signatures (B.2.2, B.2.3, made with the B.1.2 key) with the key published
// under its RFC name in a JWKS that a Signature-Agent member names, and
// refuses the same name at a well-known directory, where only the
// thumbprint finds a key.
func TestRFC9421VectorsThroughKeySet(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/rfc9421_rsa_pss.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Key struct {
			JWK        json.RawMessage `json:"jwk"`
			Thumbprint string          `json:"thumbprint"`
		} `json:"key"`
		Examples []struct {
			ID             string `json:"id"`
			Label          string `json:"label"`
			SignatureInput string `json:"signature_input"`
			Signature      string `json:"signature"`
			Message        struct {
				Raw string `json:"raw_http1"`
			} `json:"message"`
		} `json:"examples"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	named := strings.TrimSuffix(string(f.Key.JWK), "}") + `,"kid":"test-key-rsa-pss"}`
	srv := ksServer(t, false, map[string][2]string{
		"/rfc9421/jwks.json": {keyfetch.JWKSetMediaType, `{"keys":[` + named + `]}`},
		signer.DirectoryPath: {signer.DirectoryMediaType, `{"keys":[` + named + `]}`},
	})
	created := fixedClockKS(1618884473)
	for _, ex := range f.Examples {
		for _, tc := range []struct {
			field    string
			wantCode middleware.Code
		}{
			{ex.Label + `="` + srv.URL + `/rfc9421/jwks.json";type=jwks_uri`, ""},
			{ex.Label + `="` + srv.URL + `"`, middleware.CodeUnknownKey},
		} {
			t.Run(ex.ID+" "+tc.field, func(t *testing.T) {
				r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(ex.Message.Raw)))
				if err != nil {
					t.Fatal(err)
				}
				r.Header.Set("Signature-Input", ex.SignatureInput)
				r.Header.Set("Signature", ex.Signature)
				r.Header.Set("Signature-Agent", tc.field) // not covered: adding it keeps the signature valid
				v, err := middleware.New(middleware.Config{
					Keys: ksFetcher(srv, created), Now: created, AnyAuthority: true, // RFC 9421's example.com
					Tag: "header-example", AnyTag: true, // B.2.2 is tagged header-example, B.2.3 has no tag
					AllowMissingExpires: true, AllowMissingNonce: true,
				})
				if err != nil {
					t.Fatal(err)
				}
				res := v.Check(r)
				if tc.wantCode != "" {
					if res.Err == nil || res.Err.Code != tc.wantCode {
						t.Fatalf("verdict %s, error %v; want %s", res.Outcome, res.Err, tc.wantCode)
					}
					return
				}
				if res.Outcome != middleware.OutcomeVerified {
					t.Fatalf("verdict %s, error %v (%v); want verified", res.Outcome, res.Err, errOf(res.Err))
				}
				if res.Agent.KeyID != "test-key-rsa-pss" || res.Agent.Alg != signer.AlgRSAPSSSHA512 || res.Agent.ID != srv.URL+"/rfc9421/jwks.json" {
					t.Errorf("agent keyid %q alg %q id %q", res.Agent.KeyID, res.Agent.Alg, res.Agent.ID)
				}
			})
		}
	}
}

func fixedClockKS(unix int64) func() time.Time {
	return func() time.Time { return time.Unix(unix, 0) }
}

// TestSignedDirectoryThroughMiddleware: a key directory that signs its
// responses (tag http-message-signatures-directory, covering
// "@authority";req) serves a Fetcher that requires signed directories; a
// directory whose signature fails is a key fetch failure (503), not a
// refusal of the agent.
func TestSignedDirectoryThroughMiddleware(t *testing.T) {
	t.Parallel()
	agentKey := ksEd25519(t, 0x55, "")
	for _, tc := range []struct {
		name     string
		corrupt  bool
		unsigned bool
		wantCode middleware.Code
	}{
		{name: "signed directory"},
		{name: "directory signature fails", corrupt: true, wantCode: middleware.CodeKeyFetchFailed},
		{name: "unsigned directory, signatures required", unsigned: true, wantCode: middleware.CodeKeyFetchFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body := `{"keys":[` + agentKey.jwk + `]}`
				if !tc.unsigned {
					// The signature covers the body through Content-Digest, as
					// RequireSignedDirectories needs.
					digest, _ := signer.ContentDigest([]byte(body), "sha-256")
					w.Header().Set("Content-Digest", digest)
					params := fmt.Sprintf(`("@authority";req "content-digest");created=%d;keyid=%q;alg="ed25519";expires=%d;tag="http-message-signatures-directory"`,
						clock().Unix(), agentKey.pub.Thumbprint, clock().Add(5*time.Minute).Unix())
					sig := agentKey.sign([]byte(`"@authority";req: ` + r.Host + "\n\"content-digest\": " + digest + "\n\"@signature-params\": " + params))
					if tc.corrupt {
						sig[0] ^= 1
					}
					w.Header().Set("Signature-Input", "binding0="+params)
					w.Header().Set("Signature", "binding0=:"+base64.StdEncoding.EncodeToString(sig)+":")
				}
				w.Header().Set("Content-Type", signer.DirectoryMediaType)
				_, _ = w.Write([]byte(body))
			}))
			defer srv.Close()
			keys := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"127.0.0.1:*"}, AllowHTTP: true, AllowPrivateNetworks: true, Now: clock, RequireSignedDirectories: true})
			v, err := middleware.New(middleware.Config{Authorities: testAuthorities, Keys: keys, Now: clock})
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodGet, "https://api.example.com/v1/things", nil)
			if err := signer.Sign(r, agentKey.priv, signer.Options{SignatureAgent: srv.URL, Standards: true, Now: clock}); err != nil {
				t.Fatal(err)
			}
			res := v.Check(r)
			switch {
			case tc.wantCode == "" && res.Outcome != middleware.OutcomeVerified:
				t.Fatalf("verdict %s, error %v (%v); want verified", res.Outcome, res.Err, errOf(res.Err))
			case tc.wantCode != "" && (res.Err == nil || res.Err.Code != tc.wantCode || res.Err.Status() != http.StatusServiceUnavailable):
				t.Fatalf("verdict %s, error %v; want %s (503)", res.Outcome, res.Err, tc.wantCode)
			}
		})
	}
}
