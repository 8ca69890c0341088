package refserver_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

// dirSig is one entry of directory_signatures.
type dirSig struct {
	Input     string `json:"signature_input"`
	Signature string `json:"signature"`
}

func toDirSig(d signer.DirectorySignature) dirSig {
	return dirSig{Input: d.Input, Signature: base64.StdEncoding.EncodeToString(d.Value)}
}

// signDir signs uid's directory holding keys with key, valid from created
// for validity, as the agent does.
func (e *testEnv) signDir(uid string, key signer.PrivateKey, keys []signer.JWK, created time.Time, validity time.Duration) dirSig {
	e.t.Helper()
	d, err := signer.SignDirectory(key, "http", uid+"."+e.host, signer.DirectoryBody(keys), created, created.Add(validity))
	if err != nil {
		e.t.Fatal(err)
	}
	return toDirSig(d)
}

// refreshReq is PUT /agents/{uid}/directory-signatures with sigs, signed by
// key for agent uid.
func (e *testEnv) refreshReq(uid string, key signer.PrivateKey, sigs []dirSig, now time.Time) *http.Request {
	b, _ := json.Marshal(map[string]any{"directory_signatures": sigs})
	req := e.request(http.MethodPut, e.base+"/agents/"+uid+"/directory-signatures", b)
	return e.sign(req, key, signer.Options{Components: signer.WriteComponents, SignatureAgent: e.origin(uid), Created: now})
}

// verifyServed checks that the directory answer carries one verified
// directory signature by want's key over its body and authority, and no
// other.
func (e *testEnv) verifyServed(t *testing.T, uid string, resp response, want signer.PrivateKey) {
	t.Helper()
	if resp.status != http.StatusOK {
		t.Fatalf("directory: %d %s", resp.status, resp.body)
	}
	sigs, err := signer.ParseSignatures(resp.header.Values("Signature-Input"), resp.header.Values("Signature"))
	if err != nil || len(sigs) != 1 {
		t.Fatalf("directory signatures = %v (%v), want one (Signature-Input %q)", len(sigs), err, resp.header.Values("Signature-Input"))
	}
	if err := signer.VerifyContentDigest(resp.header.Values("Content-Digest"), resp.body); err != nil {
		t.Errorf("Content-Digest: %v", err)
	}
	s := sigs[0]
	if s.Params.KeyID != want.Public.Thumbprint || s.Params.Tag != signer.DirectoryTag {
		t.Errorf("keyid %s tag %s, want %s %s", s.Params.KeyID, s.Params.Tag, want.Public.Thumbprint, signer.DirectoryTag)
	}
	cd, _ := signer.ContentDigest(resp.body, signer.DirectoryDigestAlg)
	if err := signer.VerifyDirectoryDigest(&s, want.Public, "http", uid+"."+e.host, cd); err != nil {
		t.Errorf("served signature does not verify: %v", err)
	}
}

func wantUnsigned(t *testing.T, what string, resp response) {
	t.Helper()
	if resp.status != http.StatusOK {
		t.Fatalf("%s: directory %d %s", what, resp.status, resp.body)
	}
	if v := resp.header.Values("Signature"); len(v) > 0 || len(resp.header.Values("Signature-Input")) > 0 {
		t.Errorf("%s: directory is signed (%q), want unsigned", what, v)
	}
	if err := signer.VerifyContentDigest(resp.header.Values("Content-Digest"), resp.body); err != nil {
		t.Errorf("%s: Content-Digest: %v", what, err)
	}
}

// The agent's signatures are checked, stored and served until they expire;
// after that the directory is served unsigned; a rotation drops them (or
// replaces them with the new key's), and a vestauth-style agent with none
// is served as before.
func TestDirectorySignaturesLifecycle(t *testing.T) {
	t.Parallel()
	eachClockedEnv(t, func(t *testing.T, e *testEnv, clock *signertest.Clock) {
		key := signertest.Key(21)
		uid := e.register(key)
		wantUnsigned(t, "after registration", e.send(e.request(http.MethodGet, e.directoryURL(uid), nil)))

		now := clock.Now()
		sig := e.signDir(uid, key, []signer.JWK{key.Public.JWK}, now, 24*time.Hour)
		r := e.send(e.refreshReq(uid, key, []dirSig{sig}, now))
		if r.status != http.StatusOK {
			t.Fatalf("refresh: %d %s", r.status, r.body)
		}
		var out struct {
			UID        string `json:"uid"`
			Signatures []struct {
				KeyID     string    `json:"keyid"`
				ExpiresAt time.Time `json:"expires_at"`
			} `json:"directory_signatures"`
		}
		if err := json.Unmarshal(r.body, &out); err != nil || out.UID != uid || len(out.Signatures) != 1 ||
			out.Signatures[0].KeyID != key.Public.Thumbprint || !out.Signatures[0].ExpiresAt.Equal(now.Add(24*time.Hour).Truncate(time.Second)) {
			t.Errorf("refresh answer = %s", r.body)
		}
		signed := e.send(e.request(http.MethodGet, e.directoryURL(uid), nil))
		e.verifyServed(t, uid, signed, key)
		e.verifyServed(t, uid, e.send(e.request(http.MethodGet, e.origin(uid)+"/", nil)), key)

		// A cached copy of the unsigned answer is not revalidated as fresh.
		req := e.request(http.MethodGet, e.directoryURL(uid), nil)
		req.Header.Set("If-None-Match", signed.header.Get("ETag"))
		if r := e.send(req); r.status != http.StatusNotModified {
			t.Errorf("If-None-Match of the signed answer: %d, want 304", r.status)
		}

		// Past the expiry the directory is unsigned, never expired-signed.
		clock.Advance(24 * time.Hour)
		unsigned := e.send(e.request(http.MethodGet, e.directoryURL(uid), nil))
		wantUnsigned(t, "at expiry", unsigned)
		if unsigned.header.Get("ETag") == signed.header.Get("ETag") {
			t.Error("the unsigned answer has the ETag of the signed one")
		}

		// Rotation with the new key's signature: served at once; the old
		// row is gone.
		next := signertest.Key(22)
		now = clock.Now()
		rsig := e.signDir(uid, next, []signer.JWK{next.Public.JWK}, now, time.Hour)
		rreq := e.rotateReqWith(uid, key, next, []dirSig{rsig}, now)
		if r := e.send(rreq); r.status != http.StatusOK {
			t.Fatalf("rotate: %d %s", r.status, r.body)
		}
		e.verifyServed(t, uid, e.send(e.request(http.MethodGet, e.directoryURL(uid), nil)), next)
		if n := countRows(t, e.db, &store.DirectorySignature{}, "agent_uid = ?", uid); n != 1 {
			t.Errorf("%d signature rows after rotation, want 1", n)
		}

		// Rotation without signatures: the signatures over the old body are dropped.
		third := signertest.Key(23)
		if r := e.send(e.rotateReqWith(uid, next, third, nil, clock.Now())); r.status != http.StatusOK {
			t.Fatalf("rotate: %d %s", r.status, r.body)
		}
		wantUnsigned(t, "after a rotation without signatures", e.send(e.request(http.MethodGet, e.directoryURL(uid), nil)))
		if n := countRows(t, e.db, &store.DirectorySignature{}, "agent_uid = ?", uid); n != 0 {
			t.Errorf("%d signature rows after an unsigned rotation, want 0", n)
		}

		// An empty list un-signs; a stale row (another body) is never served.
		now = clock.Now()
		if r := e.send(e.refreshReq(uid, third, []dirSig{e.signDir(uid, third, []signer.JWK{third.Public.JWK}, now, time.Hour)}, now)); r.status != http.StatusOK {
			t.Fatalf("refresh: %d %s", r.status, r.body)
		}
		if err := e.db.Model(&store.DirectorySignature{}).Where("agent_uid = ?", uid).Update("body_digest", make([]byte, 32)).Error; err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second) // past the rendered-directory cache
		wantUnsigned(t, "a row of another body", e.send(e.request(http.MethodGet, e.directoryURL(uid), nil)))
		if r := e.send(e.refreshReq(uid, third, []dirSig{}, clock.Now())); r.status != http.StatusOK {
			t.Fatalf("empty refresh: %d %s", r.status, r.body)
		}
		if n := countRows(t, e.db, &store.DirectorySignature{}, "agent_uid = ?", uid); n != 0 {
			t.Errorf("%d signature rows after an empty refresh, want 0", n)
		}
	})
}

// rotateReqWith is rotateReq whose body also carries directory signatures.
func (e *testEnv) rotateReqWith(uid string, cur, next signer.PrivateKey, sigs []dirSig, now time.Time) *http.Request {
	b, _ := json.Marshal(map[string]any{"public_jwk": next.Public.JWK, "directory_signatures": sigs})
	req := e.request(http.MethodPut, e.base+"/agents/"+uid+"/keys", b)
	e.sign(req, cur, signer.Options{Components: signer.WriteComponents, SignatureAgent: e.origin(uid), Created: now})
	return e.sign(req, next, signer.Options{Label: "sig2", Tag: signer.KeyPossessionTag, Components: signer.WriteComponents, Created: now})
}

// Every hostile hand-over is refused with invalid_directory_signature (or
// the request's own code), and stores nothing: the signature already
// stored stays served.
func TestDirectorySignaturesHostile(t *testing.T) {
	t.Parallel()
	eachClockedEnv(t, func(t *testing.T, e *testEnv, clock *signertest.Clock) {
		key, other := signertest.Key(31), signertest.Key(32)
		uid := e.register(key)
		otherUID := e.register(other)
		now := clock.Now()
		keys := []signer.JWK{key.Public.JWK}
		good := e.signDir(uid, key, keys, now, time.Hour)
		if r := e.send(e.refreshReq(uid, key, []dirSig{good}, now)); r.status != http.StatusOK {
			t.Fatalf("refresh: %d %s", r.status, r.body)
		}
		params := func(comps, extra string, created, expires time.Time) string {
			return "(" + comps + ");created=" + itoa(created.Unix()) + ";keyid=\"" + key.Public.Thumbprint +
				"\";alg=\"ed25519\";expires=" + itoa(expires.Unix()) + extra
		}
		// signWith signs an arbitrary input over uid's real directory.
		signWith := func(input, authority string, body []byte) dirSig {
			sig, err := signer.ParseDirectorySignature(signer.DirectorySignature{Input: input})
			if err != nil {
				t.Fatal(err)
			}
			cd, _ := signer.ContentDigest(body, signer.DirectoryDigestAlg)
			resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Digest": {cd}},
				Request: httptest.NewRequest(http.MethodGet, "http://"+authority+signer.DirectoryPath, nil)}
			base, err := sig.AppendResponseBase(nil, resp)
			if err != nil {
				t.Fatal(err)
			}
			v := ed25519.Sign(key.Key, base)
			return dirSig{Input: input, Signature: base64.StdEncoding.EncodeToString(v)}
		}
		body := signer.DirectoryBody(keys)
		auth := uid + "." + e.host
		tag := `;tag="http-message-signatures-directory"`
		std := `"@authority";req "content-digest"`
		tests := []struct {
			name string
			sigs []dirSig
		}{
			{"not base64", []dirSig{{Input: good.Input, Signature: "!!"}}},
			{"wrong signature", []dirSig{{Input: good.Input, Signature: base64.StdEncoding.EncodeToString(make([]byte, 64))}}},
			{"wrong authority", []dirSig{e.signDir(otherUID, key, keys, now, time.Hour)}},
			{"wrong body", []dirSig{signWith(params(std, tag, now, now.Add(time.Hour)), auth, append(body, ' '))}},
			{"wrong tag", []dirSig{signWith(params(std, `;tag="web-bot-auth"`, now, now.Add(time.Hour)), auth, body)}},
			{"no tag", []dirSig{signWith(params(std, "", now, now.Add(time.Hour)), auth, body)}},
			{"authority only", []dirSig{signWith(params(`"@authority";req`, tag, now, now.Add(time.Hour)), auth, body)}},
			{"@authority without req", []dirSig{{Input: `("@authority" "content-digest");created=1;expires=2` + tag, Signature: good.Signature}}},
			{"expired", []dirSig{signWith(params(std, tag, now.Add(-2*time.Hour), now.Add(-time.Hour)), auth, body)}},
			{"far-future expiry", []dirSig{signWith(params(std, tag, now, now.Add(400*24*time.Hour)), auth, body)}},
			{"created in the future", []dirSig{signWith(params(std, tag, now.Add(time.Hour), now.Add(2*time.Hour)), auth, body)}},
			{"keyid of another key", []dirSig{e.signDir(uid, other, keys, now, time.Hour)}},
			{"two for one key", []dirSig{good, good}},
			{"too many", make([]dirSig, 9)},
			{"huge input", []dirSig{{Input: "(" + strings.Repeat(`"a" `, 400) + ")", Signature: good.Signature}}},
			{"huge signature", []dirSig{{Input: good.Input, Signature: strings.Repeat("A", 4000)}}},
		}
		for _, tt := range tests {
			r := e.send(e.refreshReq(uid, key, tt.sigs, now))
			r.wantError(t, tt.name, http.StatusBadRequest, refserver.CodeInvalidDirectorySignature)
			// Rotation refuses the same input before writing anything.
			next := signertest.Key(40)
			rr := e.send(e.rotateReqWith(uid, key, next, tt.sigs, now))
			rr.wantError(t, tt.name+" (rotation)", http.StatusBadRequest, refserver.CodeInvalidDirectorySignature)
		}
		wantRows(t, e.db, "after the refusals", 2, 2)
		clock.Advance(time.Second)
		e.verifyServed(t, uid, e.send(e.request(http.MethodGet, e.directoryURL(uid), nil)), key)

		// Another agent may not sign uid's directory; nor may an unsigned request.
		if r := e.send(e.refreshReq(uid, other, []dirSig{good}, now)); r.status < 400 {
			t.Errorf("refresh signed by another agent's key: %d", r.status)
		}
		b, _ := json.Marshal(map[string]any{"directory_signatures": []dirSig{good}})
		r := e.send(e.sign(e.request(http.MethodPut, e.base+"/agents/"+uid+"/directory-signatures", b), other,
			signer.Options{Components: signer.WriteComponents, SignatureAgent: e.origin(otherUID)}))
		r.wantError(t, "refresh by another agent", http.StatusForbidden, "forbidden")
		r = e.send(e.request(http.MethodPut, e.base+"/agents/"+uid+"/directory-signatures", b))
		if r.status != http.StatusUnauthorized {
			t.Errorf("unsigned refresh: %d, want 401", r.status)
		}
		r = e.send(e.sign(e.request(http.MethodPut, e.base+"/agents/"+uid+"/directory-signatures", []byte(`{"directory_signatures":"x"}`)), key,
			signer.Options{Components: signer.WriteComponents, SignatureAgent: e.origin(uid)}))
		r.wantError(t, "not a list", http.StatusBadRequest, "invalid_request")
	})
}

// eachClockedEnv is eachEnv with the server's clock a test clock of its
// own, starting now.
func eachClockedEnv(t *testing.T, fn func(t *testing.T, e *testEnv, clock *signertest.Clock)) {
	t.Helper()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		clock := signertest.NewClock(time.Now())
		fn(t, newTestEnvConfig(t, db, "", func(c *refserver.Config) { c.Now = clock.Now }), clock)
	})
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// A vestauth agent (POST /register, POST /rotate) is served unsigned, as
// before; an agent that signed its directory and then rotates through
// vestauth's /rotate (which carries no signatures) loses the signatures of
// the old directory with it.
func TestDirectorySignaturesVestauthCompat(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		e := compatEnv(t, db, nil)
		key := signertest.Key(51)
		uid := e.compatRegister(key)
		wantUnsigned(t, "vestauth agent", e.send(e.request(http.MethodGet, e.directoryURL(uid), nil)))
		now := time.Now()
		if r := e.send(e.refreshReq(uid, key, []dirSig{e.signDir(uid, key, []signer.JWK{key.Public.JWK}, now, time.Hour)}, now)); r.status != http.StatusOK {
			t.Fatalf("refresh: %d %s", r.status, r.body)
		}
		e.verifyServed(t, uid, e.send(e.request(http.MethodGet, e.directoryURL(uid), nil)), key)
		next := signertest.Key(52)
		if r := e.compatRotate(key, next, e.origin(uid), 300); r.status != http.StatusOK {
			t.Fatalf("vestauth rotate: %d %s", r.status, r.body)
		}
		wantUnsigned(t, "after vestauth's rotate", e.send(e.request(http.MethodGet, e.directoryURL(uid), nil)))
		if n := countRows(t, e.db, &store.DirectorySignature{}, "agent_uid = ?", uid); n != 0 {
			t.Errorf("%d signature rows after vestauth's rotate, want 0", n)
		}
	})
}

// Signatures handed to one instance are served by another sharing the
// database once its rendered copy expires (KeyCacheTTL, at most 500 ms).
func TestDirectorySignaturesTwoInstances(t *testing.T) {
	t.Parallel()
	eachClockedEnv(t, func(t *testing.T, a *testEnv, clock *signertest.Clock) {
		b := a.sibling(a.db, func(c *refserver.Config) { c.Now = clock.Now })
		key := signertest.Key(53)
		uid := a.register(key)
		wantUnsigned(t, "instance b before", b.send(b.request(http.MethodGet, b.directoryURL(uid), nil)))
		now := clock.Now()
		if r := a.send(a.refreshReq(uid, key, []dirSig{a.signDir(uid, key, []signer.JWK{key.Public.JWK}, now, time.Hour)}, now)); r.status != http.StatusOK {
			t.Fatalf("refresh: %d %s", r.status, r.body)
		}
		clock.Advance(refserver.MaxKeyCacheTTL)
		b.verifyServed(t, uid, b.send(b.request(http.MethodGet, b.directoryURL(uid), nil)), key)
	})
}

// TestDirectoryMaxAgeNeverOutlivesSignatures: a signed directory's
// Cache-Control max-age never reaches past the earliest served
// signature's expires (0 within the last second), so no cache holds the
// signed response after its signature has expired; at every URL and
// method of the directory (the agent origin, HEAD) and on a 304, whose
// Cache-Control renews a cached copy as much as a 200 does. Far from the
// expiry, and unsigned, it is 60 s.
func TestDirectoryMaxAgeNeverOutlivesSignatures(t *testing.T) {
	t.Parallel()
	eachClockedEnv(t, func(t *testing.T, e *testEnv, clock *signertest.Clock) {
		key := signertest.Key(0x11)
		uid := e.register(key)
		// answers returns the directory's answers: GET and HEAD at both
		// URLs, and conditional GETs naming the current ETag and "*".
		answers := func() map[string]response {
			t.Helper()
			out := map[string]response{}
			for _, u := range []string{e.directoryURL(uid), e.origin(uid) + "/"} {
				for _, m := range []string{http.MethodGet, http.MethodHead} {
					out[m+" "+u] = e.send(e.request(m, u, nil))
				}
				for _, inm := range []string{out["GET "+u].header.Get("ETag"), "*"} {
					req := e.request(http.MethodGet, u, nil)
					req.Header.Set("If-None-Match", inm)
					r := e.send(req)
					if r.status != http.StatusNotModified {
						t.Errorf("GET %s If-None-Match %s: %d, want 304", u, inm, r.status)
					}
					out["GET "+u+" If-None-Match "+inm] = r
				}
			}
			return out
		}
		want := func(step, cacheControl string) {
			t.Helper()
			for what, r := range answers() {
				if got := r.header.Get("Cache-Control"); got != cacheControl {
					t.Errorf("%s: %s: Cache-Control %q, want %q", step, what, got, cacheControl)
				}
			}
		}
		want("unsigned", "max-age=60")

		now := clock.Now()
		expires := now.Add(45 * time.Second).Truncate(time.Second) // as a signature states it
		sig := e.signDir(uid, key, []signer.JWK{key.Public.JWK}, now, expires.Sub(now))
		if r := e.send(e.refreshReq(uid, key, []dirSig{sig}, now)); r.status != http.StatusOK {
			t.Fatalf("refresh: %d %s", r.status, r.body)
		}
		for _, left := range []time.Duration{40 * time.Second, 10 * time.Second, 1500 * time.Millisecond, time.Second, 999 * time.Millisecond, time.Millisecond} {
			clock.Advance(expires.Add(-left).Sub(clock.Now()))
			want(fmt.Sprintf("signature expiring in %v", left), fmt.Sprintf("max-age=%d", int(left/time.Second)))
		}
		clock.Advance(time.Millisecond)
		want("signature expired (served unsigned)", "max-age=60")

		now = clock.Now()
		sig = e.signDir(uid, key, []signer.JWK{key.Public.JWK}, now, 24*time.Hour)
		if r := e.send(e.refreshReq(uid, key, []dirSig{sig}, now)); r.status != http.StatusOK {
			t.Fatalf("refresh: %d %s", r.status, r.body)
		}
		want("signature valid for a day", "max-age=60")
	})
}
