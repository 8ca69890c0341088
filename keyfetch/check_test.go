package keyfetch_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
)

// rfcKey is one of RFC 9421's published test keys (B.1.2, B.1.3).
type rfcKey struct {
	JWK        json.RawMessage `json:"jwk"`
	Thumbprint string          `json:"thumbprint"`
}

func loadRFCKeys(t testing.TB) map[string]rfcKey {
	t.Helper()
	data, err := os.ReadFile("testdata/rfc9421_keys.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Keys map[string]rfcKey `json:"keys"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	return f.Keys
}

// withKid returns the JWK object raw with "kid" (and more members) added.
func withKid(raw json.RawMessage, members string) string {
	return strings.TrimSuffix(strings.TrimSpace(string(raw)), "}") + "," + members + "}"
}

// TestRFC9421KeysInKeySets publishes RFC 9421's RSA-PSS and ECDSA P-256
// test keys under their RFC names, as the RFC's examples use them: at a
// direct key-set URL the names find them, at the well-known directory only
// their thumbprints do.
func TestRFC9421KeysInKeySets(t *testing.T) {
	t.Parallel()
	rk := loadRFCKeys(t)
	rsa, ec := rk["test-key-rsa-pss"], rk["test-key-ecc-p256"]
	body := keysJSON(withKid(rsa.JWK, `"kid":"test-key-rsa-pss","alg":"PS512"`), withKid(ec.JWK, `"kid":"test-key-ecc-p256"`))
	srv := newDirServer(t, serveBody(signer.DirectoryMediaType, "", "", body))
	srv.handle("/keys.json", serveBody(keyfetch.JWKSetMediaType, "", "", body))
	f := keyfetch.New(testConfig(newClock()))
	ctx := context.Background()
	tests := []struct {
		set     signer.KeySet
		keyID   string
		want    string
		wantAlg string
	}{
		{keySet(t, srv.URL+"/keys.json", "jwks_uri"), "test-key-rsa-pss", "ok", signer.AlgRSAPSSSHA512},
		{keySet(t, srv.URL+"/keys.json", "jwks_uri"), "test-key-ecc-p256", "ok", signer.AlgECDSAP256SHA256},
		{keySet(t, srv.URL+"/keys.json", "jwks_uri"), rsa.Thumbprint, "ok", signer.AlgRSAPSSSHA512},
		{keySet(t, srv.URL, ""), "test-key-rsa-pss", "unknown", ""},
		{keySet(t, srv.URL, ""), rsa.Thumbprint, "ok", signer.AlgRSAPSSSHA512},
		{keySet(t, srv.URL, ""), ec.Thumbprint, "ok", signer.AlgECDSAP256SHA256},
	}
	for _, tt := range tests {
		pk, err := f.Key(ctx, tt.set, tt.keyID)
		if got := errKind(err); got != tt.want {
			t.Errorf("Key(%s, %s) error kind = %s (%v), want %s", tt.set.URL, tt.keyID, got, err, tt.want)
			continue
		}
		if got := pk.Algorithm(); err == nil && got != tt.wantAlg {
			t.Errorf("Key(%s, %s) algorithm = %s, want %s", tt.set.URL, tt.keyID, got, tt.wantAlg)
		}
	}
}

// TestCheckKeySet reports each kind of key set the way idcli directory
// check shows it: what was fetched, each key, what to fix.
func TestCheckKeySet(t *testing.T) {
	t.Parallel()
	k1, k2 := testKey(1), testKey(2)
	tests := []struct {
		name         string
		routes       map[string]http.HandlerFunc
		path, typ    string
		wantKind     signer.KeySetKind
		wantJWKS     string // the jwks_uri reported; {origin} is the server's
		wantKeys     int
		wantOK       bool
		wantWarnings []string
		wantNot      []string // warnings that must not appear
	}{
		{
			name:   "JWKS with its registered media type",
			routes: map[string]http.HandlerFunc{"/jwks.json": serveBody(keyfetch.JWKSetMediaType, "max-age=300", `"v1"`, keysJSON(jwkJSON(k1, `,"kid":"a"`)))},
			path:   "/jwks.json", typ: "jwks_uri", wantKind: signer.KindJWKS, wantKeys: 1, wantOK: true,
			wantNot: []string{"media type", "thumbprint"},
		},
		{
			name: "card naming a jwks_uri without cache headers",
			routes: map[string]http.HandlerFunc{
				"/card.json": serveBody("application/json", "max-age=300", `"c1"`, `{"jwks_uri":"{origin}/jwks.json"}`),
				"/jwks.json": serveBody(keyfetch.JWKSetMediaType, "", "", keysJSON(jwkJSON(k1, ""), jwkJSON(k2, ""))),
			},
			path: "/card.json", typ: "cimd", wantKind: signer.KindCard, wantJWKS: "{origin}/jwks.json", wantKeys: 2, wantOK: true,
			wantWarnings: []string{"jwks_uri http://", "no ETag", "no max-age"},
		},
		{
			name:   "card with both jwks and jwks_uri",
			routes: map[string]http.HandlerFunc{"/card.json": serveBody("application/json", "max-age=300", `"c1"`, `{"jwks":`+keysJSON(jwkJSON(k1, ""))+`,"jwks_uri":"{origin}/jwks.json"}`)},
			path:   "/card.json", typ: "cimd", wantKind: signer.KindCard, wantOK: false,
		},
		{
			name:     "well-known directory with a kid that is not the thumbprint",
			routes:   map[string]http.HandlerFunc{signer.DirectoryPath: serveBody(signer.DirectoryMediaType, "max-age=300", `"v1"`, keysJSON(jwkJSON(k1, `,"kid":"2024"`)))},
			wantKind: signer.KindDirectory, wantKeys: 1, wantOK: true,
			wantWarnings: []string{`kid "2024" is not the RFC 7638 thumbprint`},
		},
		{
			name:   "direct key-set URL with a kid that is not the thumbprint",
			routes: map[string]http.HandlerFunc{"/k": serveBody(signer.DirectoryMediaType, "max-age=300", `"v1"`, keysJSON(jwkJSON(k1, `,"kid":"2024"`)))},
			path:   "/k", wantKind: signer.KindDirectory, wantKeys: 1, wantOK: true,
			wantNot: []string{"thumbprint"},
		},
		{
			name:   "card whose jwks_uri is refused",
			routes: map[string]http.HandlerFunc{"/card.json": serveBody("application/json", "", "", `{"jwks_uri":"https://keys.elsewhere.example/jwks.json"}`)},
			path:   "/card.json", typ: "cimd", wantKind: signer.KindCard, wantJWKS: "https://keys.elsewhere.example/jwks.json", wantOK: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newDirServer(t, serveStatus(http.StatusNotFound))
			for path, h := range tt.routes {
				srv.handle(path, func(w http.ResponseWriter, r *http.Request) { h(withOrigin(w, srv.URL), r) })
			}
			set := keySet(t, srv.URL+tt.path, tt.typ)
			r, err := keyfetch.New(testConfig(newClock())).CheckKeySet(context.Background(), set)
			if r == nil {
				t.Fatalf("CheckKeySet = nil, %v; want a report", err)
			}
			if (err == nil) != tt.wantOK || r.OK() != tt.wantOK {
				t.Fatalf("CheckKeySet OK = %v, error %v (problems %q), want OK %v", r.OK(), err, r.Problems, tt.wantOK)
			}
			if r.URL != set.URL || r.Kind != tt.wantKind || r.WellKnown != set.WellKnown {
				t.Errorf("report URL %q kind %v well-known %v, want %q %v %v", r.URL, r.Kind, r.WellKnown, set.URL, tt.wantKind, set.WellKnown)
			}
			if want := strings.ReplaceAll(tt.wantJWKS, "{origin}", srv.URL); r.JWKSURI != want {
				t.Errorf("JWKSURI = %q, want %q", r.JWKSURI, want)
			}
			if len(r.Keys) != tt.wantKeys {
				t.Errorf("len(Keys) = %d, want %d", len(r.Keys), tt.wantKeys)
			}
			for _, k := range r.Keys {
				if k.Algorithm() != signer.AlgEd25519 || k.Thumbprint == "" || k.JWK.Kid == "" {
					t.Errorf("key %+v: want its algorithm, kid and thumbprint", k.JWK)
				}
			}
			for _, w := range tt.wantWarnings {
				if !containsSub(r.Warnings, w) {
					t.Errorf("Warnings = %q, want one mentioning %q", r.Warnings, w)
				}
			}
			for _, w := range tt.wantNot {
				if containsSub(r.Warnings, w) {
					t.Errorf("Warnings = %q, want none mentioning %q", r.Warnings, w)
				}
			}
		})
	}
}
