package keyfetch_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// testPrivate returns the private key of testKey(n).
func testPrivate(n byte) signer.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = n
	}
	return signer.NewPrivateKey(ed25519.NewKeyFromSeed(seed))
}

// p256Key is a fixed P-256 key and its public key as a key set reads it.
func p256Key(t testing.TB) (*ecdsa.PrivateKey, signer.PublicKey) {
	t.Helper()
	d := sha256.Sum256([]byte("keyfetch directory signing key"))
	priv, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d[:])
	if err != nil {
		t.Fatal(err)
	}
	pt, err := priv.PublicKey.Bytes() // 0x04 ‖ x ‖ y
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	pk, err := signer.ParseKeySetJWK(fmt.Appendf(nil, `{"kty":"EC","crv":"P-256","x":%q,"y":%q}`, b64(pt[1:33]), b64(pt[33:])))
	if err != nil {
		t.Fatal(err)
	}
	return priv, pk
}

// dirSig describes one directory signature a test server puts on its
// response. Zero fields take the protocol's shape.
type dirSig struct {
	label      string        // "binding0"
	components string        // `"@authority";req "content-digest"`
	keyid      string        // the signing key's thumbprint
	alg        string        // "ed25519"
	tag        string        // keyfetch.DirectorySignatureTag
	created    time.Duration // offset from the clock
	expires    time.Duration // offset from the clock; 5 minutes
	noExpires  bool
	authority  string // the value signed for "@authority";req; the request's
	corrupt    bool   // flip a bit of the signature
	sign       func(base []byte) []byte
	pub        signer.PublicKey
}

// edSig signs with the Ed25519 key k.
func edSig(k signer.PrivateKey) dirSig {
	return dirSig{pub: k.Public, sign: func(b []byte) []byte { return ed25519.Sign(k.Key, b) }}
}

// ecSig signs with the P-256 key k (r‖s over SHA-256).
func ecSig(k *ecdsa.PrivateKey, pub signer.PublicKey) dirSig {
	return dirSig{pub: pub, alg: signer.AlgECDSAP256SHA256, sign: func(b []byte) []byte { return signertest.SignECDSA(k, b) }}
}

// signedDirectory serves body as a key directory whose response carries
// the signatures sigs, built by hand the way a directory signs: the base
// is `"@authority";req: <host>`, `"content-digest": <Content-Digest>`,
// then `"@signature-params": …`. The Content-Digest field is the body's
// SHA-256 digest.
func signedDirectory(clk *clock, body string, sigs ...dirSig) http.HandlerFunc {
	digest, _ := signer.ContentDigest([]byte(body), "sha-256")
	return signedDirectoryDigest(clk, body, digest, sigs...)
}

// signedDirectoryDigest is signedDirectory with the Content-Digest field
// given ("" for none): signatures cover that value, whatever the body.
func signedDirectoryDigest(clk *clock, body, digest string, sigs ...dirSig) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var inputs, values []string
		for i, s := range sigs {
			if s.label == "" {
				s.label = fmt.Sprintf("binding%d", i)
			}
			if s.components == "" {
				s.components = `"@authority";req "content-digest"`
			}
			if s.keyid == "" {
				s.keyid = s.pub.Thumbprint
			}
			if s.alg == "" {
				s.alg = signer.AlgEd25519
			}
			if s.tag == "" {
				s.tag = keyfetch.DirectorySignatureTag
			}
			if s.expires == 0 {
				s.expires = 5 * time.Minute
			}
			if s.authority == "" {
				s.authority = strings.ToLower(r.Host)
			}
			now := clk.Now()
			params := fmt.Sprintf("(%s);created=%d;keyid=%q;alg=%q", s.components, now.Add(s.created).Unix(), s.keyid, s.alg)
			if !s.noExpires {
				params += fmt.Sprintf(";expires=%d", now.Add(s.expires).Unix())
			}
			params += fmt.Sprintf(";tag=%q", s.tag)
			var base string
			for _, c := range strings.Fields(s.components) {
				v := s.authority
				if c == `"content-digest"` {
					v = digest
				}
				base += c + ": " + v + "\n"
			}
			base += `"@signature-params": ` + params
			sig := s.sign([]byte(base))
			if s.corrupt {
				sig[0] ^= 1
			}
			inputs = append(inputs, s.label+"="+params)
			values = append(values, s.label+"=:"+base64.StdEncoding.EncodeToString(sig)+":")
		}
		w.Header().Set("Signature-Input", strings.Join(inputs, ", "))
		w.Header().Set("Signature", strings.Join(values, ", "))
		if digest != "" {
			w.Header().Set("Content-Digest", digest)
		}
		w.Header().Set("Content-Type", signer.DirectoryMediaType)
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = w.Write([]byte(body))
	}
}

func jwksOf(keys ...signer.PublicKey) string {
	var parts []string
	for _, k := range keys {
		parts = append(parts, string(k.JWK.MarshalPublic()))
	}
	return keysJSON(parts...)
}

// TestSignedDirectory serves directories whose responses carry a signature
// tagged http-message-signatures-directory: a valid one is used, any
// failing one makes the response unusable, other tags are ignored. Only a
// signature that also covers content-digest, matching the body,
// authenticates the keys; RequireSignedDirectories requires one.
func TestSignedDirectory(t *testing.T) {
	t.Parallel()
	k1, k2, stranger := testPrivate(1), testPrivate(2), testPrivate(9)
	ecPriv, ecPub := p256Key(t)
	two := jwksOf(k1.Public, k2.Public)
	tests := []struct {
		name         string
		body         string
		sigs         []dirSig
		raw          [2]string // Signature-Input, Signature set as is instead of sigs
		require      bool
		want         string // ok, fetch
		wantErr      error
		wantSigned   bool
		wantAuth     bool // Report.Authenticated
		wantSignedBy int
		digest       string // Content-Digest sent instead of the body's ("-" for none)
	}{
		{name: "unsigned", body: two, want: "ok"},
		{name: "unsigned, signatures required", body: two, require: true, want: "fetch", wantErr: keyfetch.ErrUnsignedDirectory},
		{name: "signed by a key of the set", body: two, sigs: []dirSig{edSig(k1)}, want: "ok", wantSigned: true, wantAuth: true, wantSignedBy: 1},
		{name: "signed, signatures required", body: two, sigs: []dirSig{edSig(k1)}, require: true, want: "ok", wantSigned: true, wantAuth: true, wantSignedBy: 1},
		{name: "signed by every key of the set", body: two, sigs: []dirSig{edSig(k1), edSig(k2)}, want: "ok", wantSigned: true, wantAuth: true, wantSignedBy: 2},
		{name: "signed with ECDSA P-256", body: jwksOf(ecPub, k1.Public), sigs: []dirSig{ecSig(ecPriv, ecPub)}, want: "ok", wantSigned: true, wantAuth: true, wantSignedBy: 1},
		{name: "authority only: accepted, keys not authenticated", body: two, sigs: []dirSig{with(edSig(k1), func(s *dirSig) { s.components = `"@authority";req` })}, want: "ok", wantSigned: true, wantSignedBy: 1},
		{name: "authority only, signatures required", body: two, sigs: []dirSig{with(edSig(k1), func(s *dirSig) { s.components = `"@authority";req` })}, require: true, want: "fetch", wantErr: keyfetch.ErrUnsignedDirectory, wantSigned: true, wantSignedBy: 1},
		{name: "content-digest before the authority", body: two, sigs: []dirSig{with(edSig(k1), func(s *dirSig) { s.components = `"content-digest" "@authority";req` })}, require: true, want: "ok", wantSigned: true, wantAuth: true, wantSignedBy: 1},
		{name: "Content-Digest of another body", body: two, digest: mustDigest(jwksOf(k1.Public)), sigs: []dirSig{edSig(k1)}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true},
		{name: "Content-Digest missing", body: two, digest: "-", sigs: []dirSig{edSig(k1)}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true},
		{name: "Content-Digest with an unsupported algorithm only", body: two, digest: "md5=:AAAA:", sigs: []dirSig{edSig(k1)}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true},
		{name: "one good, one corrupt", body: two, sigs: []dirSig{edSig(k1), with(edSig(k2), func(s *dirSig) { s.corrupt = true })}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true, wantSignedBy: 1},
		{name: "corrupt", body: two, sigs: []dirSig{with(edSig(k1), func(s *dirSig) { s.corrupt = true })}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true},
		{name: "signed by a key outside the set", body: two, sigs: []dirSig{edSig(stranger)}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true},
		{name: "keyid is a kid, not the thumbprint", body: two, sigs: []dirSig{with(edSig(k1), func(s *dirSig) { s.keyid = "key-1" })}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true},
		{name: "signed for another authority", body: two, sigs: []dirSig{with(edSig(k1), func(s *dirSig) { s.authority = "agent.example" })}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true},
		{name: "@authority without ;req", body: two, sigs: []dirSig{with(edSig(k1), func(s *dirSig) { s.components = `"@authority"` })}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true},
		{name: "covers something else only", body: two, sigs: []dirSig{with(edSig(k1), func(s *dirSig) { s.components = `"content-type"` })}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true},
		{name: "expired", body: two, sigs: []dirSig{with(edSig(k1), func(s *dirSig) { s.created, s.expires = -10*time.Minute, -2*time.Minute })}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true},
		{name: "expired within the skew", body: two, sigs: []dirSig{with(edSig(k1), func(s *dirSig) { s.created, s.expires = -10*time.Minute, -30*time.Second })}, want: "ok", wantSigned: true, wantAuth: true, wantSignedBy: 1},
		{name: "created in the future", body: two, sigs: []dirSig{with(edSig(k1), func(s *dirSig) { s.created, s.expires = 5*time.Minute, 10*time.Minute })}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true},
		{name: "created just beyond the skew", body: two, sigs: []dirSig{with(edSig(k1), func(s *dirSig) { s.created, s.expires = 61*time.Second, 5*time.Minute })}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true},
		{name: "created within the skew", body: two, sigs: []dirSig{with(edSig(k1), func(s *dirSig) { s.created = 30 * time.Second })}, want: "ok", wantSigned: true, wantAuth: true, wantSignedBy: 1},
		{name: "no expires", body: two, sigs: []dirSig{with(edSig(k1), func(s *dirSig) { s.noExpires = true })}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true},
		{name: "alg does not match the key", body: two, sigs: []dirSig{with(edSig(k1), func(s *dirSig) { s.alg = signer.AlgRSAPSSSHA512 })}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true},
		{name: "another tag is not a directory signature", body: two, sigs: []dirSig{with(edSig(stranger), func(s *dirSig) { s.tag = "web-bot-auth" })}, want: "ok"},
		{name: "another tag, signatures required", body: two, sigs: []dirSig{with(edSig(k1), func(s *dirSig) { s.tag = "web-bot-auth" })}, require: true, want: "fetch", wantErr: keyfetch.ErrUnsignedDirectory},
		{name: "malformed fields naming the tag", body: two, raw: [2]string{`binding0=("@authority";req;tag="http-message-signatures-directory"`, `binding0=:AAAA:`}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true},
		{name: "malformed fields without the tag are ignored", body: two, raw: [2]string{`sig1=(("@authority"`, `nonsense`}, want: "ok"},
		{name: "Signature missing for the label", body: two, raw: [2]string{`binding0=("@authority";req);created=1;expires=2;keyid="k";tag="http-message-signatures-directory"`, ``}, want: "fetch", wantErr: keyfetch.ErrDirectorySignature, wantSigned: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			h := signedDirectory(clk, tt.body, tt.sigs...)
			if tt.digest != "" {
				h = signedDirectoryDigest(clk, tt.body, strings.TrimPrefix(tt.digest, "-"), tt.sigs...)
			}
			if tt.raw[0] != "" {
				h = func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Signature-Input", tt.raw[0])
					if tt.raw[1] != "" {
						w.Header().Set("Signature", tt.raw[1])
					}
					serveBody(signer.DirectoryMediaType, "", "", tt.body)(w, r)
				}
			} else if len(tt.sigs) == 0 {
				h = serveBody(signer.DirectoryMediaType, "", "", tt.body)
			}
			srv := newDirServer(t, h)
			cfg := testConfig(clk)
			cfg.RequireSignedDirectories = tt.require
			f := keyfetch.New(cfg)
			set := agentSet(t, srv.URL)
			_, err := f.Key(context.Background(), set, k1.Public.Thumbprint)
			if got := errKind(err); got != tt.want {
				t.Fatalf("Key error kind = %s (%v), want %s", got, err, tt.want)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("Key error = %v, want it to wrap %v", err, tt.wantErr)
			}
			r, err := f.CheckKeySet(context.Background(), set)
			if r == nil {
				t.Fatalf("CheckKeySet = nil, %v; want a report", err)
			}
			wantVerified := tt.wantSigned && (tt.want == "ok" || errors.Is(tt.wantErr, keyfetch.ErrUnsignedDirectory))
			if r.OK() != (tt.want == "ok") || r.Signed != tt.wantSigned || r.Verified != wantVerified || r.Authenticated != tt.wantAuth || len(r.SignedBy) != tt.wantSignedBy {
				t.Errorf("report OK=%v Signed=%v Verified=%v Authenticated=%v SignedBy=%q (problems %q), want OK=%v Signed=%v Verified=%v Authenticated=%v %d signers",
					r.OK(), r.Signed, r.Verified, r.Authenticated, r.SignedBy, r.Problems, tt.want == "ok", tt.wantSigned, wantVerified, tt.wantAuth, tt.wantSignedBy)
			}
		})
	}
}

func with(s dirSig, mod func(*dirSig)) dirSig {
	mod(&s)
	return s
}

// TestFailingSignatureKeepsLastGoodSet: a refresh whose directory
// signature fails is a fetch failure, so the last good (signed) set keeps
// serving through the stale window, and the next good response replaces it.
func TestFailingSignatureKeepsLastGoodSet(t *testing.T) {
	t.Parallel()
	k1, k2 := testPrivate(1), testPrivate(2)
	clk := newClock()
	srv := newDirServer(t, signedDirectory(clk, jwksOf(k1.Public), edSig(k1)))
	cfg := testConfig(clk)
	cfg.RequireSignedDirectories = true
	f := keyfetch.New(cfg)
	ctx := context.Background()
	set := agentSet(t, srv.URL)
	if _, err := f.Key(ctx, set, k1.Public.Thumbprint); err != nil {
		t.Fatalf("Key error = %v, want nil", err)
	}

	// Someone swaps in k2, signing with it, but cannot sign as k1.
	srv.set(signedDirectory(clk, jwksOf(k1.Public, k2.Public), with(edSig(k1), func(s *dirSig) { s.corrupt = true })))
	clk.Advance(61 * time.Second)
	if _, err := f.Key(ctx, set, k1.Public.Thumbprint); err != nil {
		t.Errorf("Key(k1) after a refused refresh error = %v, want the stale key", err)
	}
	if _, err := f.Key(ctx, set, k2.Public.Thumbprint); !errors.Is(err, keyfetch.ErrDirectorySignature) {
		t.Errorf("Key(k2) error = %v, want the refused refresh (ErrDirectorySignature)", err)
	}

	// A correctly signed rotation replaces the set.
	srv.set(signedDirectory(clk, jwksOf(k2.Public), edSig(k2)))
	clk.Advance(keyfetch.DefaultNegativeTTL + time.Second)
	if _, err := f.Key(ctx, set, k2.Public.Thumbprint); err != nil {
		t.Fatalf("Key(k2) after a good refresh error = %v, want nil", err)
	}
	if _, err := f.Key(ctx, set, k1.Public.Thumbprint); !errors.Is(err, signer.ErrUnknownKey) {
		t.Errorf("Key(k1) after the rotation error = %v, want ErrUnknownKey", err)
	}
}

// TestSignedJWKSBehindCard: a card's jwks_uri response signed for its own
// authority is verified against the keys it holds.
func TestSignedJWKSBehindCard(t *testing.T) {
	t.Parallel()
	k1 := testPrivate(1)
	clk := newClock()
	srv := newDirServer(t, serveStatus(http.StatusNotFound))
	srv.handle("/card.json", func(w http.ResponseWriter, r *http.Request) {
		serveBody("application/json", "", "", `{"jwks_uri":"{origin}/jwks.json"}`)(withOrigin(w, srv.URL), r)
	})
	srv.handle("/jwks.json", signedDirectory(clk, jwksOf(k1.Public), edSig(k1)))
	cfg := testConfig(clk)
	cfg.RequireSignedDirectories = true
	f := keyfetch.New(cfg)
	set := keySet(t, srv.URL+"/card.json", "cimd")
	if _, err := f.Key(context.Background(), set, k1.Public.Thumbprint); err != nil {
		t.Fatalf("Key error = %v, want nil", err)
	}
	r, err := f.CheckKeySet(context.Background(), set)
	if err != nil || !r.Signed || !r.Verified || r.JWKSURI != srv.URL+"/jwks.json" {
		t.Errorf("CheckKeySet = Signed %v, Verified %v, JWKSURI %q, %v; want true, true, the jwks_uri, nil", r.Signed, r.Verified, r.JWKSURI, err)
	}
}

func mustDigest(body string) string {
	d, err := signer.ContentDigest([]byte(body), "sha-256")
	if err != nil {
		panic(err)
	}
	return d
}
