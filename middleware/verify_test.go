package middleware_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/dunglas/httpsfv"
)

// Fixed keys, clock and agent of the tests.
var (
	keyA = signertest.Key(0xa1)
	keyB = signertest.Key(0xb2)

	testNow = time.Unix(1767225600, 0) // 2026-01-01T00:00:00Z
)

const (
	testUID    = "agent-0123456789abcdef01234567"
	testOrigin = "https://" + testUID + ".agentid.example"
	testURL    = "https://api.example.com/v1/things?x=1"
)

// testAuthorities are the authorities the tests' verifiers serve: the host
// of testURL.
var testAuthorities = []string{"api.example.com"}

func clock() time.Time { return testNow }

// countingKeys wraps a KeySource and counts lookups.
type countingKeys struct {
	middleware.KeySource
	calls atomic.Int32
}

func (c *countingKeys) Key(ctx context.Context, set signer.KeySet, keyID string) (signer.PublicKey, error) {
	c.calls.Add(1)
	return c.KeySource.Key(ctx, set, keyID)
}

// KeyCached passes the wrapped source's answer on (false when it is not a
// KeyCache: every lookup then counts as one that may fetch).
func (c *countingKeys) KeyCached(set signer.KeySet, keyID string) bool {
	kc, ok := c.KeySource.(middleware.KeyCache)
	return ok && kc.KeyCached(set, keyID)
}

// staticKeys publishes keyA for testOrigin.
func staticKeys() *middleware.StaticKeys {
	k := middleware.NewStaticKeys()
	k.Add(testOrigin, keyA.Public)
	return k
}

// signOpts returns the default signing options of the tests, changed by mod.
//
// The tests of the deployed profile were written against the shape agentid
// signed before protocol-01 (Signature-Agent sent, not covered), which is
// now Options.Legacy; the protocol-01 shape is tested in profile_test.go.
func signOpts(mod func(*signer.Options)) signer.Options {
	o := signer.Options{SignatureAgent: testOrigin, Now: clock, Legacy: true}
	if mod != nil {
		mod(&o)
	}
	return o
}

// signedRequest returns a GET to testURL signed with key under opts.
func signedRequest(t testing.TB, key signer.PrivateKey, opts signer.Options) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, testURL, nil)
	if err := signer.Sign(r, key, opts); err != nil {
		t.Fatal(err)
	}
	return r
}

// signedPost returns a POST of body to testURL covering the write
// components, so Content-Digest is set.
func signedPost(t testing.TB, body string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, testURL, strings.NewReader(body))
	if err := signer.Sign(r, keyA, signOpts(func(o *signer.Options) { o.Components = signer.WriteComponents })); err != nil {
		t.Fatal(err)
	}
	return r
}

// signRaw signs r with key over the given serialized signature parameters
// (`("@authority");created=…`), so the tests can produce validly signed
// requests that the signer itself never makes.
func signRaw(t testing.TB, r *http.Request, key signer.PrivateKey, label, params string) {
	t.Helper()
	base, err := signer.SignatureBase(r, params)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Signature-Input", label+"="+params)
	r.Header.Set("Signature", label+"=:"+base64.StdEncoding.EncodeToString(ed25519.Sign(key.Key, base))+":")
}

// rawRequest is a GET to testURL with Signature-Agent set and signed by
// keyA over params, in which {created}, {expires} and {kid} are replaced.
func rawRequest(t testing.TB, params string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, testURL, nil)
	r.Header.Set("Signature-Agent", `sig1="`+testOrigin+`"`)
	params = strings.NewReplacer(
		"{created}", strconv.FormatInt(testNow.Unix(), 10),
		"{expires}", strconv.FormatInt(testNow.Unix()+300, 10),
		"{kid}", keyA.KeyID(),
	).Replace(params)
	signRaw(t, r, keyA, "sig1", params)
	return r
}

type errorJSON struct {
	Error struct {
		Status  int    `json:"status"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// result is what one request through the middleware produced.
type result struct {
	status  int
	code    string
	agent   middleware.Agent
	hasID   bool
	body    string // the request body as the handler read it
	rec     *httptest.ResponseRecorder
	keyLook int32
	stored  int
}

// serve runs r through a fresh middleware built from cfg (Keys defaults to
// staticKeys, Now to the test clock, Replay to a fresh store) and reports
// what happened.
func serve(t testing.TB, cfg middleware.Config, r *http.Request) result {
	t.Helper()
	if cfg.Keys == nil {
		cfg.Keys = staticKeys()
	}
	keys := &countingKeys{KeySource: cfg.Keys}
	cfg.Keys = keys
	if cfg.Now == nil {
		cfg.Now = clock
	}
	if cfg.Authorities == nil && !cfg.AnyAuthority {
		cfg.Authorities = testAuthorities
	}
	store, _ := cfg.Replay.(*middleware.MemoryReplayStore)
	if cfg.Replay == nil {
		store = middleware.NewMemoryReplayStoreWithClock(clock)
		cfg.Replay = store
	}
	var res result
	h := mustNew(t, cfg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res.agent, res.hasID = middleware.AgentFrom(r.Context())
		if r.Body != nil {
			b, _ := io.ReadAll(r.Body)
			res.body = string(b)
		}
		w.WriteHeader(http.StatusOK)
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	res.rec = rec
	res.status = rec.Code
	res.keyLook = keys.calls.Load()
	if store != nil {
		res.stored = middleware.ReplayLen(store)
	}
	if rec.Code != http.StatusOK {
		var e errorJSON
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
			t.Fatalf("error body %q is not JSON: %v", rec.Body.String(), err)
		}
		res.code = e.Error.Code
	}
	return res
}

// TestVerifyPolicy walks the verification policy step by step (docs/security.md): each case breaks one rule
// and expects its code. Rejections before step 6 never consult the key
// source, and no rejection records a nonce.
func TestVerifyPolicy(t *testing.T) {
	t.Parallel()
	untrusted := middleware.KeySourceFunc(func(context.Context, signer.KeySet, string) (signer.PublicKey, error) {
		return signer.PublicKey{}, fmt.Errorf("keyfetch: host not trusted: %w", signer.ErrUntrustedAgent)
	})
	revoked := middleware.KeySourceFunc(func(context.Context, signer.KeySet, string) (signer.PublicKey, error) {
		return signer.PublicKey{}, fmt.Errorf("refserver: %w", signer.ErrRevokedKey)
	})
	down := middleware.KeySourceFunc(func(context.Context, signer.KeySet, string) (signer.PublicKey, error) {
		return signer.PublicKey{}, errors.New("keyfetch: dial tcp 192.0.2.1:443: connection refused")
	})
	wrongKey := middleware.KeySourceFunc(func(context.Context, signer.KeySet, string) (signer.PublicKey, error) {
		return keyB.Public, nil // published under keyA's kid, but it is keyB
	})
	def := func(t testing.TB) *http.Request { return signedRequest(t, keyA, signOpts(nil)) }
	with := func(mod func(*signer.Options)) func(t testing.TB) *http.Request {
		return func(t testing.TB) *http.Request { return signedRequest(t, keyA, signOpts(mod)) }
	}
	edit := func(mk func(t testing.TB) *http.Request, f func(r *http.Request)) func(t testing.TB) *http.Request {
		return func(t testing.TB) *http.Request { r := mk(t); f(r); return r }
	}
	raw := func(params string) func(t testing.TB) *http.Request {
		return func(t testing.TB) *http.Request { return rawRequest(t, params) }
	}

	tests := []struct {
		name       string
		cfg        middleware.Config
		req        func(t testing.TB) *http.Request
		wantStatus int
		wantCode   string
		step       int // the policy step that rejects (0: accepted)
	}{
		{"default profile accepted", middleware.Config{}, def, 200, "", 0},

		// Step 1: parse, pick by tag.
		{"unsigned", middleware.Config{}, func(testing.TB) *http.Request { return httptest.NewRequest("GET", testURL, nil) }, 401, "missing_signature", 1},
		{"signature-input unparsable", middleware.Config{}, edit(def, func(r *http.Request) { r.Header.Set("Signature-Input", `sig1=("@authority"`) }), 401, "invalid_signature_input", 1},
		{"signature unparsable", middleware.Config{}, edit(def, func(r *http.Request) { r.Header.Set("Signature", `sig1=:not base64:`) }), 401, "invalid_signature_input", 1},
		{"signature without signature-input", middleware.Config{}, edit(def, func(r *http.Request) { r.Header.Del("Signature-Input") }), 401, "invalid_signature_input", 1},
		{"mismatched labels", middleware.Config{}, edit(def, func(r *http.Request) {
			r.Header.Set("Signature", strings.Replace(r.Header.Get("Signature"), "sig1=", "sig2=", 1))
		}), 401, "invalid_signature_input", 1},
		{"two web-bot-auth signatures: the first decides", middleware.Config{}, edit(def, func(r *http.Request) {
			if err := signer.Sign(r, keyA, signOpts(func(o *signer.Options) { o.Label = "sig2" })); err != nil {
				panic(err)
			}
		}), 200, "", 0},
		{"two web-bot-auth signatures: the second passes when the first fails", middleware.Config{}, func(t testing.TB) *http.Request {
			r := signedRequest(t, keyB, signOpts(nil)) // keyB is not published
			if err := signer.Sign(r, keyA, signOpts(func(o *signer.Options) { o.Label = "sig2"; o.SignatureAgent = "" })); err != nil {
				t.Fatal(err)
			}
			return r
		}, 200, "", 0},
		{"two web-bot-auth signatures that fail: the first one's error", middleware.Config{}, func(t testing.TB) *http.Request {
			r := signedRequest(t, keyB, signOpts(nil))
			if err := signer.Sign(r, keyA, signOpts(func(o *signer.Options) { o.Label = "sig2"; o.Created = testNow.Add(-time.Hour) })); err != nil {
				t.Fatal(err)
			}
			return r
		}, 401, "unknown_key", 6},
		{"no web-bot-auth tag", middleware.Config{}, with(func(o *signer.Options) { o.Tag = "other" }), 401, "invalid_signature_input", 1},
		{"AnyTag accepts the only signature", middleware.Config{AnyTag: true}, with(func(o *signer.Options) { o.Tag = "other" }), 200, "", 0},
		{"second signature with another tag ignored", middleware.Config{}, edit(def, func(r *http.Request) {
			if err := signer.Sign(r, keyB, signOpts(func(o *signer.Options) { o.Label = "sig2"; o.Tag = "other" })); err != nil {
				panic(err)
			}
		}), 200, "", 0},
		{"duplicate component", middleware.Config{}, edit(def, func(r *http.Request) {
			r.Header.Set("Signature-Input", strings.Replace(r.Header.Get("Signature-Input"), `("@authority")`, `("@authority" "@authority")`, 1))
		}), 401, "duplicate_component", 1},

		// Step 2: covered components.
		{"no @authority nor @target-uri", middleware.Config{}, with(func(o *signer.Options) { o.Components = []string{"@method", "@path"} }), 401, "missing_components", 2},
		{"@target-uri instead of @authority", middleware.Config{}, with(func(o *signer.Options) { o.Components = []string{"@target-uri"} }), 200, "", 0},
		{"required component not covered", middleware.Config{RequiredComponents: []string{"@method", "@path"}}, def, 401, "missing_components", 2},
		{"required components covered", middleware.Config{RequiredComponents: []string{"@method", "@path"}}, with(func(o *signer.Options) {
			o.Components = []string{"@method", "@authority", "@path"}
		}), 200, "", 0},
		{"required member component needs the member form", middleware.Config{RequiredComponents: []string{`"signature-agent";key="sig1"`}},
			with(func(o *signer.Options) { o.Components = []string{"@authority", "signature-agent"} }), 401, "missing_components", 2},
		{"covered header absent", middleware.Config{}, edit(func(t testing.TB) *http.Request {
			r := httptest.NewRequest("GET", testURL, nil)
			r.Header.Set("X-Tenant", "t1")
			if err := signer.Sign(r, keyA, signOpts(func(o *signer.Options) { o.Components = []string{"@authority", "x-tenant"} })); err != nil {
				t.Fatal(err)
			}
			return r
		}, func(r *http.Request) { r.Header.Del("X-Tenant") }), 401, "missing_components", 2},

		// Step 3: parameters (validly signed, so only the policy rejects).
		{"unsupported algorithm", middleware.Config{}, raw(`("@authority");created={created};keyid="{kid}";alg="hmac-sha256";expires={expires};nonce="n1";tag="web-bot-auth"`), 401, "unsupported_algorithm", 3},
		{"algorithm narrowed by Config", middleware.Config{Algorithms: []string{"rsa-pss-sha512"}}, def, 401, "unsupported_algorithm", 3},
		{"alg of another key type", middleware.Config{}, raw(`("@authority");created={created};keyid="{kid}";alg="rsa-pss-sha512";expires={expires};nonce="n1";tag="web-bot-auth"`), 401, "unsupported_algorithm", 6},
		{"Ed25519 key refused when only RSA is accepted (alg absent)", middleware.Config{Algorithms: []string{"rsa-pss-sha512"}}, raw(`("@authority");created={created};keyid="{kid}";expires={expires};nonce="n1";tag="web-bot-auth"`), 401, "unsupported_algorithm", 6},
		{"alg absent accepted", middleware.Config{}, raw(`("@authority");created={created};keyid="{kid}";expires={expires};nonce="n1";tag="web-bot-auth"`), 200, "", 0},
		{"created missing", middleware.Config{}, raw(`("@authority");keyid="{kid}";alg="ed25519";expires={expires};nonce="n1";tag="web-bot-auth"`), 401, "invalid_signature_input", 3},
		{"expires missing", middleware.Config{}, raw(`("@authority");created={created};keyid="{kid}";alg="ed25519";nonce="n1";tag="web-bot-auth"`), 401, "invalid_signature_input", 3},
		{"expires missing allowed", middleware.Config{AllowMissingExpires: true}, raw(`("@authority");created={created};keyid="{kid}";alg="ed25519";nonce="n1";tag="web-bot-auth"`), 200, "", 0},
		{"keyid missing", middleware.Config{}, raw(`("@authority");created={created};alg="ed25519";expires={expires};nonce="n1";tag="web-bot-auth"`), 401, "invalid_signature_input", 3},
		{"nonce missing", middleware.Config{}, with(func(o *signer.Options) { o.NoNonce = true }), 401, "missing_nonce", 3},
		{"nonce missing allowed", middleware.Config{AllowMissingNonce: true}, with(func(o *signer.Options) { o.NoNonce = true }), 200, "", 0},

		// Step 4: validity window (skew 60 s, window 10 min).
		{"created beyond skew", middleware.Config{}, with(func(o *signer.Options) { o.Created = testNow.Add(61 * time.Second) }), 401, "signature_not_yet_valid", 4},
		{"created within skew", middleware.Config{}, with(func(o *signer.Options) { o.Created = testNow.Add(59 * time.Second) }), 200, "", 0},
		{"no skew configured", middleware.Config{Skew: -1}, with(func(o *signer.Options) { o.Created = testNow.Add(time.Second) }), 401, "signature_not_yet_valid", 4},
		{"expired beyond skew", middleware.Config{}, with(func(o *signer.Options) {
			o.Created = testNow.Add(-7 * time.Minute)
			o.Expires = testNow.Add(-61 * time.Second)
		}), 401, "expired_signature", 4},
		{"expired within skew", middleware.Config{}, with(func(o *signer.Options) {
			o.Created = testNow.Add(-7 * time.Minute)
			o.Expires = testNow.Add(-59 * time.Second)
		}), 200, "", 0},
		{"window too long", middleware.Config{}, with(func(o *signer.Options) { o.TTL = 10*time.Minute + time.Second }), 401, "signature_window_too_long", 4},
		{"window of exactly 10 minutes", middleware.Config{}, with(func(o *signer.Options) { o.TTL = 10 * time.Minute }), 200, "", 0},
		{"longer window configured", middleware.Config{MaxWindow: time.Hour}, with(func(o *signer.Options) { o.TTL = 30 * time.Minute }), 200, "", 0},
		{"expires before created", middleware.Config{}, with(func(o *signer.Options) { o.Expires = testNow.Add(-time.Second) }), 401, "invalid_signature_input", 4},

		// Step 5: Signature-Agent.
		{"signature-agent absent", middleware.Config{}, with(func(o *signer.Options) { o.SignatureAgent = "" }), 401, "invalid_signature_agent", 5},
		{"signature-agent absent allowed", middleware.Config{AllowMissingSignatureAgent: true, Keys: func() middleware.KeySource {
			k := middleware.NewStaticKeys()
			k.Add("", keyA.Public)
			return k
		}()}, with(func(o *signer.Options) { o.SignatureAgent = "" }), 200, "", 0},
		{"signature-agent unparsable", middleware.Config{}, edit(def, func(r *http.Request) { r.Header.Set("Signature-Agent", `sig1="https://unterminated`) }), 401, "invalid_signature_agent", 5},
		{"signature-agent without member for the label", middleware.Config{}, edit(def, func(r *http.Request) {
			r.Header.Set("Signature-Agent", `a="`+testOrigin+`", b="https://other.example"`)
		}), 401, "invalid_signature_agent", 5},
		{"signature-agent ftp scheme", middleware.Config{}, edit(def, func(r *http.Request) { r.Header.Set("Signature-Agent", `sig1="ftp://`+testUID+`.agentid.example"`) }), 401, "invalid_signature_agent", 5},
		{"signature-agent with a path names another key set", middleware.Config{}, edit(def, func(r *http.Request) { r.Header.Set("Signature-Agent", `sig1="`+testOrigin+`/keys"`) }), 401, "unknown_key", 6},
		{"signature-agent with a fragment", middleware.Config{}, edit(def, func(r *http.Request) { r.Header.Set("Signature-Agent", `sig1="`+testOrigin+`/keys#k"`) }), 401, "invalid_signature_agent", 5},
		{"signature-agent of an unknown type", middleware.Config{}, edit(def, func(r *http.Request) { r.Header.Set("Signature-Agent", `sig1="`+testOrigin+`";type=x509`) }), 401, "invalid_signature_agent", 5},
		{"RequireBound rejects an unbound agent", middleware.Config{RequireBound: true}, def, 401, "missing_components", 5},
		{"RequireBound accepts the standards profile", middleware.Config{RequireBound: true}, with(func(o *signer.Options) { o.Standards = true }), 200, "", 0},

		// Step 6: key.
		{"untrusted signature agent", middleware.Config{Keys: untrusted}, def, 401, "untrusted_signature_agent", 6},
		{"unknown key", middleware.Config{}, func(t testing.TB) *http.Request { return signedRequest(t, keyB, signOpts(nil)) }, 401, "unknown_key", 6},
		{"key not published by this agent", middleware.Config{}, edit(def, func(r *http.Request) {
			r.Header.Set("Signature-Agent", `sig1="https://agent-ffffffffffffffffffffffff.agentid.example"`)
		}), 401, "unknown_key", 6},
		{"keyid is not the key's thumbprint", middleware.Config{Keys: wrongKey}, def, 401, "unknown_key", 6},
		{"revoked key", middleware.Config{Keys: revoked}, def, 401, "revoked_key", 6},
		{"key directory unreachable", middleware.Config{Keys: down}, def, 503, "key_fetch_failed", 6},

		// Step 7: Ed25519.
		{"other host served, signature for another", middleware.Config{Authorities: []string{"api.example.com", "api.example.org"}}, edit(def, func(r *http.Request) { r.Host = "api.example.org" }), 401, "invalid_signature", 7},
		{"tampered nonce", middleware.Config{}, edit(def, func(r *http.Request) {
			r.Header.Set("Signature-Input", regexp.MustCompile(`nonce="[^"]*"`).ReplaceAllString(r.Header.Get("Signature-Input"), `nonce="forged"`))
		}), 401, "invalid_signature", 7},
		{"signature by another key", middleware.Config{}, edit(def, func(r *http.Request) {
			other := signedRequest(t, keyB, signOpts(nil))
			r.Header.Set("Signature", other.Header.Get("Signature"))
		}), 401, "invalid_signature", 7},
		{"covered signature-agent changed", middleware.Config{Keys: func() middleware.KeySource {
			k := staticKeys()
			k.Add("https://evil.example", keyA.Public)
			return k
		}()}, edit(with(func(o *signer.Options) { o.Standards = true }), func(r *http.Request) {
			r.Header.Set("Signature-Agent", `sig1="https://evil.example"`)
		}), 401, "invalid_signature", 7},

		// Step 8: Content-Digest.
		{"content-digest matches", middleware.Config{}, func(t testing.TB) *http.Request { return signedPost(t, `{"a":1}`) }, 200, "", 0},
		{"content-digest mismatch", middleware.Config{}, edit(func(t testing.TB) *http.Request { return signedPost(t, `{"a":1}`) }, func(r *http.Request) {
			r.Body = io.NopCloser(strings.NewReader(`{"a":2}`))
		}), 401, "content_digest_mismatch", 8},
		{"content-digest unsupported algorithm", middleware.Config{}, edit(func(t testing.TB) *http.Request {
			r := httptest.NewRequest("POST", testURL, strings.NewReader(`{"a":1}`))
			r.Header.Set("Content-Digest", "md5=:AAAA:")
			if err := signer.Sign(r, keyA, signOpts(func(o *signer.Options) { o.Components = signer.WriteComponents })); err != nil {
				t.Fatal(err)
			}
			return r
		}, func(*http.Request) {}), 401, "content_digest_mismatch", 8},
		{"payload too large", middleware.Config{MaxBodyBytes: 8}, func(t testing.TB) *http.Request { return signedPost(t, `{"a":"0123456789"}`) }, 413, "payload_too_large", 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := serve(t, tt.cfg, tt.req(t))
			if res.status != tt.wantStatus || res.code != tt.wantCode {
				t.Fatalf("status, code = %d %q (%s), want %d %q", res.status, res.code, res.rec.Body.String(), tt.wantStatus, tt.wantCode)
			}
			if tt.step > 0 && tt.step < 6 && res.keyLook != 0 {
				t.Errorf("key source called %d times, want 0 before step 6", res.keyLook)
			}
			wantStored := 0
			if tt.wantStatus == 200 && !tt.cfg.AllowMissingNonce {
				wantStored = 1
			}
			if res.stored != wantStored {
				t.Errorf("replay store holds %d nonces, want %d", res.stored, wantStored)
			}
			if (res.status == 200) != res.hasID {
				t.Errorf("handler saw an identity = %v with status %d", res.hasID, res.status)
			}
		})
	}
}

// TestVerifyOrder checks that when a request breaks several rules, the
// earliest step of the policy decides the code.
func TestVerifyOrder(t *testing.T) {
	t.Parallel()
	down := middleware.KeySourceFunc(func(context.Context, signer.KeySet, string) (signer.PublicKey, error) {
		return signer.PublicKey{}, errors.New("unreachable")
	})
	tests := []struct {
		name     string
		cfg      middleware.Config
		opts     func(*signer.Options)
		edit     func(*http.Request)
		wantCode string
	}{
		{"tag before components", middleware.Config{}, func(o *signer.Options) { o.Tag = "x"; o.Components = []string{"@method"} }, nil, "invalid_signature_input"},
		{"components before nonce", middleware.Config{}, func(o *signer.Options) { o.NoNonce = true; o.Components = []string{"@method"} }, nil, "missing_components"},
		{"nonce before window", middleware.Config{}, func(o *signer.Options) { o.NoNonce = true; o.TTL = time.Hour }, nil, "missing_nonce"},
		{"window before signature agent", middleware.Config{}, func(o *signer.Options) { o.TTL = time.Hour; o.SignatureAgent = "" }, nil, "signature_window_too_long"},
		{"signature agent before key", middleware.Config{Keys: down}, nil, func(r *http.Request) { r.Header.Set("Signature-Agent", `sig1="ftp://x"`) }, "invalid_signature_agent"},
		{"key before signature", middleware.Config{Keys: down, AnyAuthority: true}, nil, func(r *http.Request) { r.Host = "other.example" }, "key_fetch_failed"},
		{"signature before digest", middleware.Config{AnyAuthority: true}, func(o *signer.Options) { o.Components = []string{"@authority", "content-digest"} }, func(r *http.Request) {
			r.Host = "other.example"
			r.Header.Set("Content-Digest", "sha-256=:AAAA:")
		}, "invalid_signature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("POST", testURL, strings.NewReader("body"))
			if err := signer.Sign(r, keyA, signOpts(tt.opts)); err != nil {
				t.Fatal(err)
			}
			if tt.edit != nil {
				tt.edit(r)
			}
			if res := serve(t, tt.cfg, r); res.code != tt.wantCode {
				t.Errorf("code = %q (%s), want %q", res.code, res.rec.Body.String(), tt.wantCode)
			}
		})
	}
}

// TestReplay: a nonce is accepted once; a forged or unsigned request never
// reaches the replay store.
func TestReplay(t *testing.T) {
	t.Parallel()
	store := middleware.NewMemoryReplayStoreWithClock(clock)
	// api.example.org is served too: the forged request's signature, not
	// its host, is what fails.
	v, err := middleware.New(middleware.Config{Authorities: []string{"api.example.com", "api.example.org"}, Keys: staticKeys(), Now: clock, Replay: store})
	if err != nil {
		t.Fatal(err)
	}
	forged := signedRequest(t, keyA, signOpts(func(o *signer.Options) { o.Nonce = "n-forged" }))
	forged.Host = "api.example.org"
	for i := range 3 {
		if _, err := v.Verify(forged); codeOf(err) != "invalid_signature" {
			t.Fatalf("forged #%d: error = %v, want invalid_signature", i, err)
		}
		if _, err := v.Verify(httptest.NewRequest("GET", testURL, nil)); codeOf(err) != "missing_signature" {
			t.Fatalf("unsigned #%d: error = %v, want missing_signature", i, err)
		}
	}
	if got := middleware.ReplayLen(store); got != 0 {
		t.Fatalf("replay store holds %d nonces after forged and unsigned requests, want 0", got)
	}

	// The genuine request with the forged one's nonce still passes once.
	genuine := signedRequest(t, keyA, signOpts(func(o *signer.Options) { o.Nonce = "n-forged" }))
	if _, err := v.Verify(genuine); err != nil {
		t.Fatalf("first use: %v", err)
	}
	if _, err := v.Verify(genuine); codeOf(err) != "replayed_nonce" {
		t.Fatalf("second use: error = %v, want replayed_nonce", err)
	}
	// vestauth weakness 2: the same nonce on a different, validly signed request.
	other := httptest.NewRequest("DELETE", "https://api.example.com/elsewhere", nil)
	if err := signer.Sign(other, keyA, signOpts(func(o *signer.Options) { o.Nonce = "n-forged" })); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(other); codeOf(err) != "replayed_nonce" {
		t.Fatalf("same nonce, other request: error = %v, want replayed_nonce", err)
	}
	// The nonce is scoped to the key: another agent may use the same one.
	keys := staticKeys()
	keys.Add("https://b.example", keyB.Public)
	vb, _ := middleware.New(middleware.Config{Authorities: testAuthorities, Keys: keys, Now: clock, Replay: store})
	if _, err := vb.Verify(signedRequest(t, keyB, signOpts(func(o *signer.Options) { o.Nonce = "n-forged"; o.SignatureAgent = "https://b.example" }))); err != nil {
		t.Fatalf("same nonce, other key: %v", err)
	}
	if got := middleware.ReplayLen(store); got != 2 {
		t.Errorf("replay store holds %d nonces, want 2", got)
	}
}

// failingStore is a ReplayStore that cannot answer.
type failingStore struct{}

func (failingStore) Seen(context.Context, string, time.Time) (bool, error) {
	return false, errors.New("connection reset")
}

func TestReplayStoreFailure(t *testing.T) {
	t.Parallel()
	res := serve(t, middleware.Config{Replay: failingStore{}}, signedRequest(t, keyA, signOpts(nil)))
	if res.status != 503 || res.code != "database_unavailable" {
		t.Errorf("status, code = %d %q, want 503 database_unavailable", res.status, res.code)
	}
}

// TestConcurrentReplay sends one signed request 50 times at once over
// loopback: exactly one passes, the others get replayed_nonce.
func TestConcurrentReplay(t *testing.T) {
	t.Parallel()
	var passed atomic.Int32
	srv := httptest.NewServer(nil)
	defer srv.Close()
	srv.Config.Handler = mustNew(t, middleware.Config{Authorities: []string{srv.Listener.Addr().String()}, Keys: staticKeys(), Now: clock}).Middleware(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { passed.Add(1) }))
	h, err := signer.Headers("GET", srv.URL+"/whoami", keyA, signOpts(nil))
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		codes = make([]string, n)
		stats = make([]int, n)
	)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("GET", srv.URL+"/whoami", nil)
			req.Header.Set("Signature", h.Signature)
			req.Header.Set("Signature-Input", h.SignatureInput)
			req.Header.Set("Signature-Agent", h.SignatureAgent)
			<-start
			resp, err := client.Do(req)
			if err != nil {
				codes[i] = err.Error()
				return
			}
			defer resp.Body.Close()
			stats[i] = resp.StatusCode
			var e errorJSON
			json.NewDecoder(resp.Body).Decode(&e)
			codes[i] = e.Error.Code
		}()
	}
	close(start)
	wg.Wait()
	ok, replayed := 0, 0
	for i := range n {
		switch {
		case stats[i] == 200:
			ok++
		case stats[i] == 401 && codes[i] == "replayed_nonce":
			replayed++
		default:
			t.Errorf("request %d: status %d, code %q", i, stats[i], codes[i])
		}
	}
	if ok != 1 || replayed != n-1 || passed.Load() != 1 {
		t.Errorf("passed %d (handler ran %d times), replayed %d; want 1 and %d", ok, passed.Load(), replayed, n-1)
	}
}

// TestErrorResponse checks the JSON error body and Accept-Signature.
func TestErrorResponse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		cfg           middleware.Config
		req           *http.Request
		wantStatus    int
		wantCode      string
		wantAccept    bool
		wantComponent string // a component Accept-Signature must list
	}{
		{"401 unsigned", middleware.Config{}, httptest.NewRequest("GET", testURL, nil), 401, "missing_signature", true, `"@authority"`},
		{"401 lists required components", middleware.Config{RequiredComponents: []string{"@method", "content-digest"}},
			httptest.NewRequest("GET", testURL, nil), 401, "missing_signature", true, `"content-digest"`},
		{"401 lists the bound agent", middleware.Config{RequireBound: true}, httptest.NewRequest("GET", testURL, nil), 401, "missing_signature", true, `"signature-agent";key="sig1"`},
		{"401 expired", middleware.Config{}, signedRequest(t, keyA, signOpts(func(o *signer.Options) { o.Created = testNow.Add(-time.Hour) })), 401, "expired_signature", true, `"@authority"`},
		{"503 has no Accept-Signature", middleware.Config{Keys: middleware.KeySourceFunc(func(context.Context, signer.KeySet, string) (signer.PublicKey, error) {
			return signer.PublicKey{}, errors.New("boom")
		})}, signedRequest(t, keyA, signOpts(nil)), 503, "key_fetch_failed", false, ""},
		{"413 has no Accept-Signature", middleware.Config{MaxBodyBytes: 1}, signedPost(t, "too long"), 413, "payload_too_large", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := serve(t, tt.cfg, tt.req)
			rec := res.rec
			if rec.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d", rec.Code, tt.wantStatus)
			}
			if got := rec.Header().Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", got)
			}
			var body map[string]map[string]any
			dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
			dec.UseNumber()
			if err := dec.Decode(&body); err != nil {
				t.Fatalf("body %q: %v", rec.Body.String(), err)
			}
			e := body["error"]
			if len(body) != 1 || len(e) != 3 {
				t.Errorf("body = %s, want exactly {\"error\":{status,code,message}}", rec.Body.String())
			}
			if got := e["status"]; got != json.Number(strconv.Itoa(tt.wantStatus)) {
				t.Errorf("error.status = %v, want %d", got, tt.wantStatus)
			}
			if got := e["code"]; got != tt.wantCode {
				t.Errorf("error.code = %v, want %s", got, tt.wantCode)
			}
			if msg, _ := e["message"].(string); msg == "" {
				t.Errorf("error.message is empty")
			}
			accept := rec.Header().Get("Accept-Signature")
			if (accept != "") != tt.wantAccept {
				t.Fatalf("Accept-Signature = %q, want present = %v", accept, tt.wantAccept)
			}
			if !tt.wantAccept {
				return
			}
			d, err := httpsfv.UnmarshalDictionary([]string{accept})
			if err != nil {
				t.Fatalf("Accept-Signature %q does not parse: %v", accept, err)
			}
			m, ok := d.Get("sig1")
			il, isList := m.(httpsfv.InnerList)
			if !ok || !isList {
				t.Fatalf("Accept-Signature %q has no sig1 inner list", accept)
			}
			found := false
			for _, it := range il.Items {
				if s, _ := httpsfv.Marshal(it); s == tt.wantComponent {
					found = true
				}
			}
			if !found {
				t.Errorf("Accept-Signature %q does not list %s", accept, tt.wantComponent)
			}
			if tag, _ := il.Params.Get("tag"); tag != "web-bot-auth" {
				t.Errorf("Accept-Signature tag = %v, want web-bot-auth", tag)
			}
		})
	}
}

// TestOptional: unsigned requests pass without an identity; signed ones
// are verified; bad signatures are still rejected.
func TestOptional(t *testing.T) {
	t.Parallel()
	cfg := middleware.Config{Mode: middleware.Optional, Authorities: []string{"api.example.com", "api.example.org"}}
	tests := []struct {
		name       string
		req        *http.Request
		wantStatus int
		wantID     bool
	}{
		{"unsigned passes anonymously", httptest.NewRequest("GET", testURL, nil), 200, false},
		{"signature-agent alone passes anonymously", func() *http.Request {
			r := httptest.NewRequest("GET", testURL, nil)
			r.Header.Set("Signature-Agent", `sig1="`+testOrigin+`"`)
			return r
		}(), 200, false},
		{"signed passes with identity", signedRequest(t, keyA, signOpts(nil)), 200, true},
		{"bad signature rejected", func() *http.Request {
			r := signedRequest(t, keyA, signOpts(nil))
			r.Host = "api.example.org"
			return r
		}(), 401, false},
		{"half a signature rejected", func() *http.Request {
			r := signedRequest(t, keyA, signOpts(nil))
			r.Header.Del("Signature")
			return r
		}(), 401, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := serve(t, cfg, tt.req)
			if res.status != tt.wantStatus || res.hasID != tt.wantID {
				t.Errorf("status, identity = %d %v, want %d %v", res.status, res.hasID, tt.wantStatus, tt.wantID)
			}
		})
	}
}

// TestAgentIdentity checks every field of the Agent a handler receives, and
// that the body is restored after the Content-Digest check.
func TestAgentIdentity(t *testing.T) {
	t.Parallel()
	body := `{"public_jwk":{"kty":"OKP"}}`
	r := httptest.NewRequest(http.MethodPost, testURL, strings.NewReader(body))
	if err := signer.Sign(r, keyA, signOpts(func(o *signer.Options) {
		o.Components = signer.WriteComponents
		o.Standards = true
		o.Nonce = "nonce-1"
	})); err != nil {
		t.Fatal(err)
	}
	res := serve(t, middleware.Config{}, r)
	if res.status != 200 {
		t.Fatalf("status = %d (%s), want 200", res.status, res.rec.Body.String())
	}
	a := res.agent
	want := middleware.Agent{
		ID: testOrigin, UID: testUID, KeyID: keyA.KeyID(), Thumbprint: keyA.Public.Thumbprint, Alg: "ed25519", JWK: keyA.Public.JWK, SignatureAgent: testOrigin,
		DirectoryURL: testOrigin + "/.well-known/http-message-signatures-directory",
		Created:      testNow, Expires: testNow.Add(300 * time.Second), Nonce: "nonce-1", Label: "sig1", Tag: "web-bot-auth",
		Components: []string{`"@method"`, `"@authority"`, `"@path"`, `"content-digest"`, `"signature-agent";key="sig1"`},
		Bound:      true,
	}
	if fmt.Sprintf("%+v", a) != fmt.Sprintf("%+v", want) {
		t.Errorf("agent = %+v\nwant    %+v", a, want)
	}
	if a.JWK.D != "" {
		t.Errorf("agent JWK carries d")
	}
	if res.body != body {
		t.Errorf("handler read body %q, want %q", res.body, body)
	}
}

func TestAgentContext(t *testing.T) {
	t.Parallel()
	if _, ok := middleware.AgentFrom(context.Background()); ok {
		t.Errorf("AgentFrom(empty context) ok = true, want false")
	}
	want := middleware.Agent{UID: testUID, KeyID: "k"}
	got, ok := middleware.AgentFrom(middleware.WithAgent(context.Background(), want))
	if !ok || got.UID != want.UID || got.KeyID != want.KeyID {
		t.Errorf("AgentFrom(WithAgent(a)) = %+v, %v; want %+v, true", got, ok, want)
	}
}

// TestSignatureAgentForms checks the accepted Signature-Agent forms, which
// member is used, and the Bound flag.
func TestSignatureAgentForms(t *testing.T) {
	t.Parallel()
	keys := staticKeys()
	keys.Add("https://evil.example", keyB.Public) // a wrong pick ends in unknown_key
	tests := []struct {
		name       string
		field      string   // Signature-Agent, set before signing
		components []string // covered by sig1
		label      string
		wantOrigin string
		wantBound  bool
	}{
		{"dictionary string member", `sig1="` + testOrigin + `"`, nil, "", testOrigin, false},
		{"dictionary token member, no scheme means https", `sig1=` + testUID + `.agentid.example`, nil, "", testOrigin, false},
		{"http origin kept", `sig1="http://` + testUID + `.localhost:3000"`, nil, "", "http://" + testUID + ".localhost:3000", false},
		{"legacy string", `"` + testOrigin + `"`, nil, "", testOrigin, false},
		{"uppercase host and default port normalized", `sig1="HTTPS://` + strings.ToUpper(testUID) + `.AGENTID.EXAMPLE:443/"`, nil, "", testOrigin, false},
		{"member by covered key", `sig1="https://evil.example", agent2="` + testOrigin + `"`, []string{"@authority", `"signature-agent";key="agent2"`}, "", testOrigin, true},
		{"member by label", `other="https://evil.example", sig1="` + testOrigin + `"`, nil, "", testOrigin, false},
		{"member by label sig2", `sig1="https://evil.example", sig2="` + testOrigin + `"`, nil, "sig2", testOrigin, false},
		{"only member", `agent9="` + testOrigin + `"`, nil, "", testOrigin, false},
		{"whole field covered (web-bot-auth 0.1.3)", `sig1="` + testOrigin + `"`, []string{"@authority", "signature-agent"}, "", testOrigin, true},
		{"whole legacy field covered", `"` + testOrigin + `"`, []string{"@authority", "signature-agent"}, "", testOrigin, true},
		{"member form covered", `sig1="` + testOrigin + `"`, []string{"@authority", `"signature-agent";key="sig1"`}, "", testOrigin, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k := staticKeys()
			k.Add("https://evil.example", keyB.Public)
			k.Add("http://"+testUID+".localhost:3000", keyA.Public)
			r := httptest.NewRequest("GET", testURL, nil)
			r.Header.Set("Signature-Agent", tt.field)
			if err := signer.Sign(r, keyA, signer.Options{Components: tt.components, Label: tt.label, Now: clock}); err != nil {
				t.Fatal(err)
			}
			res := serve(t, middleware.Config{Keys: k}, r)
			if res.status != 200 {
				t.Fatalf("status = %d (%s), want 200", res.status, res.rec.Body.String())
			}
			if res.agent.SignatureAgent != tt.wantOrigin || res.agent.Bound != tt.wantBound {
				t.Errorf("agent, bound = %q %v, want %q %v", res.agent.SignatureAgent, res.agent.Bound, tt.wantOrigin, tt.wantBound)
			}
			if got, want := res.agent.UID, signer.UIDFromOrigin(tt.wantOrigin); got != want || got != testUID {
				t.Errorf("uid = %q, want %q", got, testUID)
			}
		})
	}
}

// TestVestauthAttacks replays, at the middleware level, the weaknesses of
// vestauth (docs/security.md) that a verifier must stop.
func TestVestauthAttacks(t *testing.T) {
	t.Parallel()
	t.Run("created far in the future without expires", func(t *testing.T) {
		t.Parallel()
		params := `("@authority");created=9999999999;keyid="{kid}";alg="ed25519";nonce="n1";tag="web-bot-auth"`
		for _, cfg := range []middleware.Config{{}, {AllowMissingExpires: true}} {
			res := serve(t, cfg, rawRequest(t, params))
			if res.status != 401 || (res.code != "invalid_signature_input" && res.code != "signature_not_yet_valid") {
				t.Errorf("AllowMissingExpires=%v: status, code = %d %q, want 401", cfg.AllowMissingExpires, res.status, res.code)
			}
			if cfg.AllowMissingExpires && res.code != "signature_not_yet_valid" {
				t.Errorf("AllowMissingExpires: code = %q, want signature_not_yet_valid", res.code)
			}
		}
	})
	t.Run("same nonce twice", func(t *testing.T) {
		t.Parallel()
		v, _ := middleware.New(middleware.Config{Authorities: testAuthorities, Keys: staticKeys(), Now: clock})
		r := signedRequest(t, keyA, signOpts(nil))
		_, err1 := v.Verify(r)
		_, err2 := v.Verify(r.Clone(context.Background()))
		if err1 != nil || codeOf(err2) != "replayed_nonce" {
			t.Errorf("errors = %v, %v; want nil, replayed_nonce", err1, err2)
		}
	})
	t.Run("signature for host A presented to host B", func(t *testing.T) {
		t.Parallel()
		h, err := signer.Headers("GET", "https://evil-tool.example/x", keyA, signOpts(nil))
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("POST", "https://api.example.com/agents/"+testUID+"/keys", nil)
		r.Header.Set("Signature", h.Signature)
		r.Header.Set("Signature-Input", h.SignatureInput)
		r.Header.Set("Signature-Agent", h.SignatureAgent)
		if res := serve(t, middleware.Config{}, r); res.code != "invalid_signature" {
			t.Errorf("code = %q, want invalid_signature", res.code)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	keys := staticKeys()
	tests := []struct {
		name    string
		cfg     middleware.Config
		wantErr string
	}{
		{"valid", middleware.Config{Keys: keys}, ""},
		{"valid relaxed", middleware.Config{Keys: keys, AnyTag: true, MaxWindow: -1, Skew: -1, RequiredComponents: []string{"@method", `"signature-agent";key="sig1"`}}, ""},
		{"no keys", middleware.Config{}, "Keys is required"},
		{"negative body cap", middleware.Config{Keys: keys, MaxBodyBytes: -1}, "MaxBodyBytes"},
		{"unknown derived component", middleware.Config{Keys: keys, RequiredComponents: []string{"@bogus"}}, "RequiredComponents"},
		{"bad field name", middleware.Config{Keys: keys, RequiredComponents: []string{"bad name"}}, "RequiredComponents"},
		{"tag with a control character", middleware.Config{Keys: keys, Tag: "web\nbot"}, "Tag"},
		{"unparsable sf-item", middleware.Config{Keys: keys, RequiredComponents: []string{`"signature-agent";key=`}}, "RequiredComponents"},
		{"unbounded window, no expires, nonces required", middleware.Config{Keys: keys, MaxWindow: -1, AllowMissingExpires: true}, "MaxWindow"},
		{"unbounded window, no expires, no nonces", middleware.Config{Keys: keys, MaxWindow: -1, AllowMissingExpires: true, AllowMissingNonce: true}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				if _, err := middleware.New(tt.cfg); err != nil {
					t.Fatalf("New = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want an error mentioning %q", err, tt.wantErr)
			}
			if _, err := middleware.New(tt.cfg); err == nil || err.Error() != tt.cfg.Validate().Error() {
				t.Errorf("New = %v, want the Validate error", err)
			}
		})
	}
}

// codeTaken is a code a package above middleware defines (as the
// reference server defines key_conflict).
var codeTaken = middleware.DefineCode("test_taken", http.StatusConflict)

func TestWriteError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
		wantMsg    string
	}{
		{"typed", middleware.Fail(middleware.CodeForbidden, "not yours: %s", "x"), 403, "forbidden", "not yours: x"},
		{"wrapped", fmt.Errorf("ctx: %w", middleware.Fail(codeTaken, "taken")), 409, "test_taken", "taken"},
		{"plain error leaks nothing", errors.New("pq: password authentication failed"), 500, "internal", "internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			middleware.WriteError(rec, nil, tt.err)
			var e errorJSON
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
				t.Fatal(err)
			}
			if rec.Code != tt.wantStatus || e.Error.Status != tt.wantStatus || e.Error.Code != tt.wantCode || e.Error.Message != tt.wantMsg {
				t.Errorf("got %d %+v, want %d %s %q", rec.Code, e.Error, tt.wantStatus, tt.wantCode, tt.wantMsg)
			}
		})
	}
	if !errors.Is(fmt.Errorf("x: %w", middleware.Fail(middleware.CodeExpiredSignature, "m")), &middleware.Error{Code: "expired_signature"}) {
		t.Errorf("errors.Is by code failed")
	}
}

// errReader fails after its data.
type errReader struct{ data *strings.Reader }

func (e errReader) Read(p []byte) (int, error) {
	if e.data.Len() == 0 {
		return 0, errors.New("connection reset")
	}
	return e.data.Read(p)
}

// TestBodyRestored: after the Content-Digest check the handler reads the
// whole body, whatever its length and whether Content-Length is known; the
// cap is exact.
func TestBodyRestored(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("0123456789abcdef", 300) // 4800 bytes, several reads
	tests := []struct {
		name          string
		body          string
		maxBody       int64
		unknownLength bool
		readErr       bool
		wantStatus    int
	}{
		{"short", `{"a":1}`, 0, false, false, 200},
		{"empty", "", 0, false, false, 200},
		{"long, known length", long, 0, false, false, 200},
		{"long, unknown length", long, 0, true, false, 200},
		{"exactly the cap", long, int64(len(long)), false, false, 200},
		{"exactly the cap, unknown length", long, int64(len(long)), true, false, 200},
		{"one byte over the cap", long, int64(len(long)) - 1, false, false, 413},
		{"one byte over the cap, unknown length", long, int64(len(long)) - 1, true, false, 413},
		{"read error", long, 0, true, true, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := signedPost(t, tt.body)
			if tt.unknownLength {
				r.ContentLength = -1
			}
			if tt.readErr {
				r.Body = io.NopCloser(errReader{strings.NewReader(tt.body[:100])})
			}
			res := serve(t, middleware.Config{MaxBodyBytes: tt.maxBody}, r)
			if res.status != tt.wantStatus {
				t.Fatalf("status = %d (%s), want %d", res.status, res.rec.Body.String(), tt.wantStatus)
			}
			if tt.wantStatus == 200 && res.body != tt.body {
				t.Errorf("handler read %d bytes, want the %d sent", len(res.body), len(tt.body))
			}
			if tt.wantStatus != 200 && res.stored != 0 {
				t.Errorf("replay store holds %d nonces, want 0", res.stored)
			}
		})
	}
}

// TestDefineCode: a code defined with DefineCode has its status in the one
// table and is listed by Codes; defining a code twice, or with a status
// that is not an error, panics.
func TestDefineCode(t *testing.T) {
	if got := codeTaken.Status(); got != http.StatusConflict {
		t.Errorf("status = %d, want 409", got)
	}
	listed := false
	for _, c := range middleware.Codes() {
		listed = listed || c == codeTaken
	}
	if !listed {
		t.Errorf("Codes() lacks %s", codeTaken)
	}
	for _, tc := range []struct {
		name   string
		code   middleware.Code
		status int
	}{
		{"twice", "test_taken", http.StatusConflict},
		{"a middleware code", middleware.CodeInvalidRequest, http.StatusBadRequest},
		{"status 200", "test_ok", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("DefineCode(%q, %d) did not panic", tc.code, tc.status)
				}
			}()
			middleware.DefineCode(tc.code, tc.status)
		})
	}
}

// mustNew returns middleware.New(cfg), failing tb on an error.
func mustNew(tb testing.TB, cfg middleware.Config) *middleware.Verifier {
	tb.Helper()
	v, err := middleware.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}
