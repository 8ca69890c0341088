package middleware_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest/benchtest"
)

// hostileShape is a request built to cost the verifier as much as possible
// with no valid key: the shapes of the attacks that cost quadratic CPU
// before the limits came first.
type hostileShape struct {
	name string
	// code is the refusal wanted with the default limits.
	code string
	req  func(t testing.TB) *http.Request
}

// hostileParams is a Signature-Input inner list with the given component
// identifiers and nonce, otherwise well-formed and current.
func hostileParams(ids []string, nonce string, created time.Time) string {
	return "(" + strings.Join(ids, " ") + ");created=" + strconv.FormatInt(created.Unix(), 10) +
		`;keyid="` + keyA.KeyID() + `";alg="ed25519";expires=` + strconv.FormatInt(created.Unix()+300, 10) +
		`;nonce="` + nonce + `";tag="web-bot-auth"`
}

// hostileRequest is a GET to url carrying one signature (label sig1) over
// params, with a signature value that does not verify.
func hostileRequest(url, params string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, url, nil)
	r.Header.Set("Signature-Agent", `sig1="`+testOrigin+`"`)
	r.Header.Set("Signature-Input", "sig1="+params)
	r.Header.Set("Signature", "sig1=:"+strings.Repeat("AAAA", 21)+"AA==:")
	return r
}

var hostileShapes = []hostileShape{
	{"2000 @query-param components on a 400-parameter URL", "signature_too_large", func(testing.TB) *http.Request {
		var q []string
		for i := range 400 {
			q = append(q, fmt.Sprintf("p%d=v%d", i, i))
		}
		var ids []string
		for i := range 2000 {
			ids = append(ids, fmt.Sprintf(`"@query-param";name="p%d"`, i%400+i/400*1000))
		}
		return hostileRequest(testURL+"&"+strings.Join(q, "&"), hostileParams(ids, "n", testNow))
	}},
	{"3000 duplicate components", "signature_too_large", func(testing.TB) *http.Request {
		return hostileRequest(testURL, hostileParams(strings.Split(strings.Repeat(`"@authority" `, 3000)[:13*3000-1], " "), "n", testNow))
	}},
	{"4000 labels", "signature_too_large", func(testing.TB) *http.Request {
		r := hostileRequest(testURL, hostileParams([]string{`"@authority"`}, "n", testNow))
		var in, sig []string
		for i := range 4000 {
			in = append(in, fmt.Sprintf(`s%d=("@authority");created=1`, i))
			sig = append(sig, fmt.Sprintf(`s%d=:AAAA:`, i))
		}
		r.Header.Set("Signature-Input", strings.Join(in, ", "))
		r.Header.Set("Signature", strings.Join(sig, ", "))
		return r
	}},
	{"4000-member Signature-Agent", "signature_agent_too_large", func(testing.TB) *http.Request {
		r := hostileRequest(testURL, hostileParams([]string{`"@authority"`}, "n", testNow))
		var m []string
		for i := range 4000 {
			m = append(m, fmt.Sprintf(`a%d="https://a%d.example"`, i, i))
		}
		r.Header.Set("Signature-Agent", strings.Join(m, ", "))
		return r
	}},
	{"60 KB nonce", "signature_too_large", func(testing.TB) *http.Request {
		return hostileRequest(testURL, hostileParams([]string{`"@authority"`}, strings.Repeat("n", 60<<10), testNow))
	}},
	{"expired signature covering 2000 components", "signature_too_large", func(testing.TB) *http.Request {
		var ids []string
		for i := range 2000 {
			ids = append(ids, fmt.Sprintf(`"x-h%d"`, i))
		}
		return hostileRequest(testURL, hostileParams(ids, "n", testNow.Add(-time.Hour)))
	}},
}

// TestHostileShapes: each hostile shape is refused with a 4xx and its own
// code under the default limits, without consulting the key source or the
// replay store; with the size limit raised, the count limits refuse them
// instead.
func TestHostileShapes(t *testing.T) {
	t.Parallel()
	raised := map[string]string{
		"2000 @query-param components on a 400-parameter URL": "too_many_components",
		"3000 duplicate components":                           "too_many_components",
		"4000 labels":                                         "too_many_signatures",
		"4000-member Signature-Agent":                         "signature_agent_too_large",
		"60 KB nonce":                                         "nonce_too_long",
		"expired signature covering 2000 components":          "too_many_components",
	}
	for _, hs := range hostileShapes {
		t.Run(hs.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range []struct {
				cfg  middleware.Config
				want string
			}{
				{middleware.Config{}, hs.code},
				{middleware.Config{Limits: signer.Limits{MaxFieldBytes: 1 << 20}}, raised[hs.name]},
			} {
				res := serve(t, c.cfg, hs.req(t))
				if res.status < 400 || res.status >= 500 || res.code != c.want {
					t.Errorf("MaxHeaderBytes %d: status, code = %d %q, want 4xx %q", c.cfg.Limits.MaxFieldBytes, res.status, res.code, c.want)
				}
				if res.keyLook != 0 || res.stored != 0 {
					t.Errorf("key lookups %d, nonces stored %d; want none", res.keyLook, res.stored)
				}
			}
		})
	}
}

// TestLimitsEachHaveACode checks the limits one by one just past their
// value, so each refusal has its own code, and just within it.
func TestLimitsEachHaveACode(t *testing.T) {
	t.Parallel()
	within := func(mod func(*signer.Options)) func(testing.TB) *http.Request {
		return func(t testing.TB) *http.Request { return signedRequest(t, keyA, signOpts(mod)) }
	}
	tests := []struct {
		name string
		cfg  middleware.Config
		req  func(testing.TB) *http.Request
		code string
	}{
		{"nonce at the limit", middleware.Config{Limits: signer.Limits{MaxNonceLength: 10}}, within(func(o *signer.Options) { o.Nonce = strings.Repeat("n", 10) }), ""},
		{"nonce past the limit", middleware.Config{Limits: signer.Limits{MaxNonceLength: 10}}, within(func(o *signer.Options) { o.Nonce = strings.Repeat("n", 11) }), "nonce_too_long"},
		{"default nonce limit", middleware.Config{}, within(func(o *signer.Options) { o.Nonce = strings.Repeat("n", 257) }), "nonce_too_long"},
		{"keyid past the limit", middleware.Config{Limits: signer.Limits{MaxKeyIDLength: 42}}, within(nil), "keyid_too_long"},
		{"keyid at the limit", middleware.Config{Limits: signer.Limits{MaxKeyIDLength: 43}}, within(nil), ""},
		{"components past the limit", middleware.Config{Limits: signer.Limits{MaxComponents: 2}}, within(func(o *signer.Options) { o.Components = []string{"@method", "@authority", "@path"} }), "too_many_components"},
		{"components at the limit", middleware.Config{Limits: signer.Limits{MaxComponents: 3}}, within(func(o *signer.Options) { o.Components = []string{"@method", "@authority", "@path"} }), ""},
		{"signatures past the limit", middleware.Config{Limits: signer.Limits{MaxSignatures: 1}}, func(t testing.TB) *http.Request {
			r := signedRequest(t, keyA, signOpts(nil))
			if err := signer.Sign(r, keyB, signOpts(func(o *signer.Options) { o.Label = "sig2"; o.Tag = "other" })); err != nil {
				t.Fatal(err)
			}
			return r
		}, "too_many_signatures"},
		{"signature-agent members past the limit", middleware.Config{Limits: signer.Limits{MaxSignatureAgentMembers: 1}}, func(t testing.TB) *http.Request {
			r := signedRequest(t, keyA, signOpts(nil))
			r.Header.Set("Signature-Agent", `sig1="`+testOrigin+`", x="https://x.example"`)
			return r
		}, "signature_agent_too_large"},
		{"header past the byte limit", middleware.Config{Limits: signer.Limits{MaxFieldBytes: 100}}, within(nil), "signature_too_large"},
		{"signature-agent past the byte limit", middleware.Config{Limits: signer.Limits{MaxFieldBytes: 400}}, func(t testing.TB) *http.Request {
			r := signedRequest(t, keyA, signOpts(nil))
			r.Header.Set("Signature-Agent", `sig1="`+testOrigin+`", x="https://`+strings.Repeat("x", 400)+`.example"`)
			return r
		}, "signature_agent_too_large"},
		{"host with two ports", middleware.Config{}, func(t testing.TB) *http.Request {
			r := signedRequest(t, keyA, signOpts(nil))
			r.Host = "api.example.com:443:80"
			return r
		}, "invalid_authority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := serve(t, tt.cfg, tt.req(t))
			if res.code != tt.code || (tt.code == "" && res.status != 200) {
				t.Errorf("status, code = %d %q, want %q", res.status, res.code, tt.code)
			}
		})
	}
}

// TestContentDigestEveryForm: Content-Digest is checked whenever the
// signature covers it in any form (bare, ;sf, ;key=, ;bs), so a body swapped
// under a valid signature is refused; and a RequiredComponents
// "content-digest" is satisfied by those forms only because they are checked.
func TestContentDigestEveryForm(t *testing.T) {
	t.Parallel()
	for _, form := range []string{`"content-digest"`, `"content-digest";sf`, `"content-digest";key="sha-256"`, `"content-digest";bs`} {
		for _, cfg := range []middleware.Config{{}, {RequiredComponents: []string{"content-digest"}}} {
			t.Run(form+fmt.Sprint(cfg.RequiredComponents), func(t *testing.T) {
				t.Parallel()
				sign := func() *http.Request {
					r := httptest.NewRequest(http.MethodPost, testURL, strings.NewReader(`{"public_jwk":"mine"}`))
					if err := signer.Sign(r, keyA, signOpts(func(o *signer.Options) {
						o.Components = []string{"@method", "@authority", "@path", form}
					})); err != nil {
						t.Fatal(err)
					}
					return r
				}
				if res := serve(t, cfg, sign()); res.status != 200 || res.body != `{"public_jwk":"mine"}` {
					t.Fatalf("untouched: status %d (%s), body %q", res.status, res.code, res.body)
				}
				swapped := sign()
				swapped.Body = http.NoBody
				swapped.Body = httptest.NewRequest(http.MethodPost, testURL, strings.NewReader(`{"public_jwk":"attacker"}`)).Body
				res := serve(t, cfg, swapped)
				if res.status != 401 || res.code != "content_digest_mismatch" || res.stored != 0 {
					t.Errorf("swapped body: status, code = %d %q (stored %d), want 401 content_digest_mismatch", res.status, res.code, res.stored)
				}
			})
		}
	}
}

// BenchmarkHostile measures each hostile shape, refused, against one valid
// verification in the same iteration (x-valid is the hostile one's cost
// over the valid one's). The target is
// at most 10× with the default limits. The raised-limits variants show the
// cost stays linear when an operator lifts the byte limit.
func BenchmarkHostile(b *testing.B) {
	for _, limits := range []struct {
		name string
		cfg  middleware.Config
	}{{"default-limits", middleware.Config{}}, {"byte-limit-raised", middleware.Config{Limits: signer.Limits{MaxFieldBytes: 1 << 20}}}} {
		for _, hs := range hostileShapes {
			b.Run(limits.name+"/"+strings.ReplaceAll(hs.name, " ", "-"), func(b *testing.B) {
				cfg := limits.cfg
				cfg.Keys, cfg.Now, cfg.Authorities = staticKeys(), clock, testAuthorities
				v, err := middleware.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				hostile := hs.req(b)
				valid := make([]*http.Request, b.N)
				for i := range valid {
					valid[i] = signedRequest(b, keyA, signOpts(func(o *signer.Options) { o.Nonce = fmt.Sprintf("bench-%d", i) }))
				}
				b.ReportAllocs()
				benchtest.Paired(b, 1, "valid", "hostile",
					func(i int) {
						if _, err := v.Verify(valid[i]); err != nil {
							b.Fatalf("valid: %v", err)
						}
					},
					func(int) {
						_, err := v.Verify(hostile)
						if s := middleware.AsError(err).Status(); err == nil || s < 400 || s >= 500 {
							b.Fatalf("hostile refused with %v", err)
						}
					})
			})
		}
	}
}

// FuzzVerifyRequest feeds the verifier whole hostile requests — the three
// signature fields, the Host and the query — and checks it never panics and
// always refuses with a typed 4xx (the replay store, the only other failure,
// is never reached without a valid signature).
func FuzzVerifyRequest(f *testing.F) {
	for _, hs := range hostileShapes {
		r := hs.req(f)
		if len(r.Header.Get("Signature-Input")) < 4096 && len(r.Header.Get("Signature-Agent")) < 4096 {
			f.Add(r.Header.Get("Signature-Input"), r.Header.Get("Signature"), r.Header.Get("Signature-Agent"), r.Host, r.URL.RawQuery)
		}
	}
	valid := signedRequest(f, keyA, signOpts(func(o *signer.Options) { o.Standards = true }))
	f.Add(valid.Header.Get("Signature-Input"), valid.Header.Get("Signature"), valid.Header.Get("Signature-Agent"), valid.Host, valid.URL.RawQuery)
	f.Add(`sig1=("@query-param";name="a" "@query-param";name="a");created=1;keyid="k";nonce="n";tag="web-bot-auth"`, `sig1=:AAAA:`, `"https://a.example/keys";type=jwks_uri`, "h:1:2", "a=1&a=2&%zz")
	f.Add(`sig1=("content-digest";bs "x";sf "y";key="k");created=1;expires=2;keyid="k";nonce="n";tag="web-bot-auth"`, `sig1=:AAAA:`, `sig1=https://duckduckgo.com`, "[::1]:443", "")
	v, err := middleware.New(middleware.Config{Authorities: testAuthorities, Keys: staticKeys(), Now: clock, AllowMissingSignatureAgent: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in, sig, agent, host, query string) {
		r := httptest.NewRequest(http.MethodGet, testURL, nil)
		r.Host = host
		r.URL.RawQuery = query
		for name, val := range map[string]string{"Signature-Input": in, "Signature": sig, "Signature-Agent": agent} {
			if val != "" {
				r.Header[name] = []string{val}
			}
		}
		_, err := v.Verify(r)
		if err == nil {
			return // only the valid seed, once: its nonce is then spent
		}
		e := middleware.AsError(err)
		if e.Code == middleware.CodeInternal || e.Status() < 400 || e.Status() >= 500 {
			t.Fatalf("refused with %d %s: %v", e.Status(), e.Code, err)
		}
	})
}

// hostileKeys are a key of every algorithm and RSA size the verifier
// accepts by default (rsa-v1_5-sha256 is not accepted), for forged
// signatures: only the length of an RSA modulus matters to a check that
// fails, so those without a private key are made of a fixed pattern.
func hostileKeys(tb testing.TB) []ksSigner {
	tb.Helper()
	return []ksSigner{
		ksEd25519(tb, 0x44, ""),
		ksECDSA(tb, ""),
		ksRSA(tb, ""), // 2048 bits
		ksRSAPublic(tb, 3072, "rsa-3072"),
		ksRSA4096(tb, "rsa-4096"),
	}
}

// twoForged is a request to a verifier's key source of agent carrying two
// signatures by s whose bytes do not verify, each a whole check's work
// (forge); they differ in label and nonce.
func twoForged(tb testing.TB, s ksSigner, agent string, now time.Time) *http.Request {
	tb.Helper()
	r := httptest.NewRequest(http.MethodGet, "https://api.example.com/v1/things", nil)
	f := forge(s)
	var in, sv, sa []string
	for j := range 2 {
		label := fmt.Sprintf("s%d", j)
		one := r.Clone(r.Context())
		ksSign(tb, one, f, label, `"@authority"`, s.pub.Thumbprint, now)
		in = append(in, one.Header.Get("Signature-Input"))
		sv = append(sv, one.Header.Get("Signature"))
		sa = append(sa, label+`="`+agent+`"`)
	}
	r.Header.Set("Signature-Input", strings.Join(in, ", "))
	r.Header.Set("Signature", strings.Join(sv, ", "))
	r.Header.Set("Signature-Agent", strings.Join(sa, ", "))
	return r
}

// BenchmarkHostileAlgorithms: two forged signatures by a key of each
// accepted algorithm and RSA size, against a cached key (a key set the
// verifier trusts publishes it), each timed against one valid Ed25519
// verification in the same run: x-valid (and cpu-x-valid, the thread's
// CPU time) is the ratio, at most 10 by Config.MaxVerifyCost's default.
// checks/op is the number of signature checks the verifier ran.
func BenchmarkHostileAlgorithms(b *testing.B) {
	for _, s := range hostileKeys(b) {
		b.Run(s.name, func(b *testing.B) {
			keys := middleware.NewStaticKeys()
			keys.Add(benchOrigin, s.pub)
			counter := &checkCounter{}
			v, err := middleware.New(middleware.Config{Keys: keys, Authorities: testAuthorities, Now: func() time.Time { return benchNow }, Logger: slog.New(counter)})
			if err != nil {
				b.Fatal(err)
			}
			forged := twoForged(b, s, benchOrigin, benchNow)
			prepare, valid := validSide(b)
			b.ReportAllocs()
			benchtest.PairedPrepared(b, ratioBlock, "valid", "2-forged", prepare, valid, func(int) {
				if _, err := v.Verify(forged); codeOf(err) != string(middleware.CodeInvalidSignature) {
					b.Fatalf("two forged %s signatures: %v, want invalid_signature", s.name, err)
				}
			})
			b.ReportMetric(float64(counter.failed.Load())/float64(b.N), "checks/op")
		})
	}
}
