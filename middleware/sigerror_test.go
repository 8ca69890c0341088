package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/dunglas/httpsfv"
)

// docRow is one row of docs/signature-agent.md's Signature-Error table.
type docRow struct {
	sig    string // "" for —
	status int
}

var docRowRE = regexp.MustCompile("^\\| `([a-z_]+)` \\| (?:`([a-z_]+)`|—) \\| ([0-9]{3}) \\|")

// docSigTable parses the table of docs/signature-agent.md that maps each
// code to its Signature-Error code and status.
func docSigTable(t testing.TB) map[middleware.Code]docRow {
	t.Helper()
	b, err := os.ReadFile("../docs/signature-agent.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n### Signature-Error\n")
	if !ok {
		t.Fatal("docs/signature-agent.md has no Signature-Error section")
	}
	sec, _, _ = strings.Cut(sec, "\n### ")
	rows := map[middleware.Code]docRow{}
	for _, line := range strings.Split(sec, "\n") {
		m := docRowRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		st, _ := strconv.Atoi(m[3])
		if _, dup := rows[middleware.Code(m[1])]; dup {
			t.Errorf("docs: %s is in the table twice", m[1])
		}
		rows[middleware.Code(m[1])] = docRow{sig: m[2], status: st}
	}
	if len(rows) == 0 {
		t.Fatal("docs/signature-agent.md: the Signature-Error table has no rows")
	}
	return rows
}

// packageCodes are the codes middleware defines (not those the tests add
// with DefineCode).
func packageCodes() []middleware.Code {
	var out []middleware.Code
	for _, c := range middleware.Codes() {
		if !strings.HasPrefix(string(c), "test_") {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// TestSignatureErrorDocTable: the docs' table and the code's agree both
// ways, on the Signature-Error code and on the status.
func TestSignatureErrorDocTable(t *testing.T) {
	t.Parallel()
	doc := docSigTable(t)
	for _, c := range packageCodes() {
		row, ok := doc[c]
		if !ok {
			t.Errorf("docs/signature-agent.md: code %s is missing from the Signature-Error table", c)
			continue
		}
		if got := middleware.SignatureErrorOf(c); row.sig != got {
			t.Errorf("code %s: docs say Signature-Error %q, the code's table %q", c, row.sig, got)
		}
		if row.status != c.Status() {
			t.Errorf("code %s: docs say status %d, the code %d", c, row.status, c.Status())
		}
	}
	for c := range doc {
		if !slices.Contains(packageCodes(), c) {
			t.Errorf("docs/signature-agent.md: %s is not a code of package middleware", c)
		}
	}
}

// sigCase produces one refusal code over loopback: by a request the
// verifier refuses (req), or, for a code the verifier never answers by
// itself, by a handler that refuses with it.
type sigCase struct {
	name    string
	code    middleware.Code
	cfg     func(*middleware.Config)
	req     func(t testing.TB, url string) *http.Request
	replay  bool   // send the request once before (replayed_nonce)
	wantSig string // the Signature-Error code, when not the docs' (a refinement)
	input   string // the required_input wanted, serialized
}

func sigCases() []sigCase {
	untrusted := middleware.KeySourceFunc(func(context.Context, signer.KeySet, string) (signer.PublicKey, error) {
		return signer.PublicKey{}, fmt.Errorf("keyfetch: host not trusted: %w", signer.ErrUntrustedAgent)
	})
	revoked := middleware.KeySourceFunc(func(context.Context, signer.KeySet, string) (signer.PublicKey, error) {
		return signer.PublicKey{}, fmt.Errorf("refserver: %w", signer.ErrRevokedKey)
	})
	down := middleware.KeySourceFunc(func(context.Context, signer.KeySet, string) (signer.PublicKey, error) {
		return signer.PublicKey{}, errors.New("keyfetch: dial tcp 192.0.2.1:443: connection refused")
	})
	signed := func(key signer.PrivateKey, mod func(*signer.Options), edit func(*http.Request)) func(testing.TB, string) *http.Request {
		return func(t testing.TB, url string) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, url+"/v1/things?x=1", nil)
			if err := signer.Sign(r, key, signOpts(mod)); err != nil {
				t.Fatal(err)
			}
			if edit != nil {
				edit(r)
			}
			return r
		}
	}
	post := func(body string) func(testing.TB, string) *http.Request {
		return func(t testing.TB, url string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, url+"/v1/things", strings.NewReader(`{"a":1}`))
			if err := signer.Sign(r, keyA, signOpts(func(o *signer.Options) { o.Components = signer.WriteComponents })); err != nil {
				t.Fatal(err)
			}
			r.Body, r.ContentLength, r.GetBody = io.NopCloser(strings.NewReader(body)), int64(len(body)), nil
			return r
		}
	}
	def := signed(keyA, nil, nil)
	return []sigCase{
		{name: "unsigned", code: middleware.CodeMissingSignature, req: signed(keyA, nil, func(r *http.Request) {
			r.Header.Del("Signature")
			r.Header.Del("Signature-Input")
		})},
		{name: "no signature-input", code: middleware.CodeInvalidSignatureInput, req: signed(keyA, nil, func(r *http.Request) { r.Header.Del("Signature-Input") })},
		{name: "tampered", code: middleware.CodeInvalidSignature, req: signed(keyA, nil, func(r *http.Request) {
			r.Header.Set("Signature-Input", regexp.MustCompile(`nonce="[^"]*"`).ReplaceAllString(r.Header.Get("Signature-Input"), `nonce="forged"`))
		})},
		{name: "expired", code: middleware.CodeExpiredSignature, req: signed(keyA, func(o *signer.Options) { o.Created = testNow.Add(-time.Hour) }, nil)},
		{name: "created ahead", code: middleware.CodeNotYetValid, req: signed(keyA, func(o *signer.Options) { o.Created = testNow.Add(10 * time.Minute) }, nil)},
		{name: "window too long", code: middleware.CodeWindowTooLong, req: signed(keyA, func(o *signer.Options) { o.TTL = 11 * time.Minute }, nil)},
		{name: "no nonce", code: middleware.CodeMissingNonce, req: signed(keyA, func(o *signer.Options) { o.NoNonce = true }, nil)},
		{name: "replayed", code: middleware.CodeReplayedNonce, req: def, replay: true},
		{name: "algorithm", code: middleware.CodeUnsupportedAlgorithm, cfg: func(c *middleware.Config) { c.Algorithms = []string{"rsa-pss-sha512"} }, req: def},
		{name: "required components", code: middleware.CodeMissingComponents, cfg: func(c *middleware.Config) { c.RequiredComponents = []string{"@method", "@path"} },
			req: def, input: `error=invalid_input, required_input=("@authority" "@method" "@path")`},
		{name: "bound agent required", code: middleware.CodeMissingComponents, cfg: func(c *middleware.Config) { c.RequireBound = true },
			req: def, input: `error=invalid_input, required_input=("@authority" "signature-agent";key="sig1")`},
		{name: "covered header absent", code: middleware.CodeMissingComponents, wantSig: "invalid_signature", req: func(t testing.TB, url string) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, url+"/", nil)
			r.Header.Set("X-Tenant", "t1")
			if err := signer.Sign(r, keyA, signOpts(func(o *signer.Options) { o.Components = []string{"@authority", "x-tenant"} })); err != nil {
				t.Fatal(err)
			}
			r.Header.Del("X-Tenant")
			return r
		}},
		{name: "duplicate component", code: middleware.CodeDuplicateComponent, req: signed(keyA, nil, func(r *http.Request) {
			r.Header.Set("Signature-Input", strings.Replace(r.Header.Get("Signature-Input"), `("@authority")`, `("@authority" "@authority")`, 1))
		})},
		{name: "nonce too long", code: middleware.CodeNonceTooLong, req: signed(keyA, func(o *signer.Options) { o.Nonce = strings.Repeat("n", 300) }, nil)},
		{name: "no signature-agent", code: middleware.CodeInvalidSignatureAgent, req: signed(keyA, func(o *signer.Options) { o.SignatureAgent = "" }, nil)},
		{name: "untrusted", code: middleware.CodeUntrustedAgent, cfg: func(c *middleware.Config) { c.Keys = untrusted }, req: def},
		{name: "unknown key", code: middleware.CodeUnknownKey, req: signed(keyB, nil, nil)},
		{name: "revoked", code: middleware.CodeRevokedKey, cfg: func(c *middleware.Config) { c.Keys = revoked }, req: def},
		{name: "digest", code: middleware.CodeDigestMismatch, req: post(`{"a":2}`)},
		{name: "key fetch", code: middleware.CodeKeyFetchFailed, cfg: func(c *middleware.Config) { c.Keys = down }, req: def},
		{name: "body too large", code: middleware.CodePayloadTooLarge, cfg: func(c *middleware.Config) { c.MaxBodyBytes = 4 }, req: post(`{"a":1}`)},
		{name: "other authority", code: middleware.CodeMisdirectedRequest, cfg: func(c *middleware.Config) {
			c.AnyAuthority, c.Authorities = false, []string{"api.example.com"}
		}, req: def},
	}
}

// TestSignatureErrorEveryCode sends, over loopback, a refusal of every
// code of the package, and reads its Signature-Error, its JSON body and
// its Problem Details.
func TestSignatureErrorEveryCode(t *testing.T) {
	t.Parallel()
	doc := docSigTable(t)
	cases := sigCases()
	real := map[middleware.Code]bool{}
	for _, c := range cases {
		real[c.code] = true
	}
	for _, c := range packageCodes() {
		if !real[c] {
			cases = append(cases, sigCase{name: "refused with " + string(c), code: c})
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := middleware.Config{Keys: staticKeys(), Now: clock, AnyAuthority: true,
				Replay: middleware.NewMemoryReplayStoreWithClock(clock)}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			v := mustNew(t, cfg)
			var h http.Handler = v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
			if tc.req == nil {
				h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					v.WriteError(w, r, middleware.Fail(tc.code, "refused with %s", tc.code))
				})
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			wantSig := doc[tc.code].sig
			if tc.wantSig != "" {
				wantSig = tc.wantSig
			}
			wantStatus := tc.code.Status()

			for _, neg := range []struct {
				accept  string
				problem bool
			}{{"", false}, {"*/*", false}, {"application/json", false}, {"application/problem+json", true}, {"application/json;q=0.5, application/problem+json", true}} {
				accept := neg.accept
				var r *http.Request
				if tc.req != nil {
					r = tc.req(t, srv.URL)
					if tc.replay {
						first := r.Clone(context.Background())
						resp, err := http.DefaultClient.Do(first)
						if err != nil {
							t.Fatal(err)
						}
						resp.Body.Close()
					}
				} else {
					r, _ = http.NewRequest(http.MethodGet, srv.URL+"/", nil)
				}
				if accept != "" {
					r.Header.Set("Accept", accept)
				}
				resp, err := http.DefaultClient.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != wantStatus {
					t.Fatalf("Accept %q: status %d (%s), want %d", accept, resp.StatusCode, body, wantStatus)
				}
				checkSignatureError(t, resp.Header, wantSig, tc.input)
				if !slices.Contains(resp.Header.Values("Vary"), "Accept") {
					t.Errorf("Vary = %q, want Accept", resp.Header.Values("Vary"))
				}
				date, err := http.ParseTime(resp.Header.Get("Date"))
				if err != nil || !date.Equal(testNow) {
					t.Errorf("Date = %q, want the verifier's clock %s", resp.Header.Get("Date"), testNow.UTC().Format(http.TimeFormat))
				}
				checkBody(t, resp, body, neg.problem, tc.code, wantSig, wantStatus)
			}
		})
	}
}

// checkSignatureError checks h's Signature-Error: absent when want is "",
// else a Dictionary whose error is want, with required_input when input
// (the whole field) is set and only then.
func checkSignatureError(t *testing.T, h http.Header, want, input string) {
	t.Helper()
	vals := h.Values("Signature-Error")
	if want == "" {
		if len(vals) != 0 {
			t.Errorf("Signature-Error = %q, want none", vals)
		}
		return
	}
	d, err := httpsfv.UnmarshalDictionary(vals)
	if err != nil {
		t.Fatalf("Signature-Error %q: %v", vals, err)
	}
	m, _ := d.Get("error")
	if it, ok := m.(httpsfv.Item); !ok || it.Value != httpsfv.Token(want) {
		t.Errorf("Signature-Error = %q, want error=%s", vals, want)
	}
	_, hasInput := d.Get("required_input")
	if input != "" && vals[0] != input {
		t.Errorf("Signature-Error = %q, want %q", vals[0], input)
	}
	if input == "" && hasInput {
		t.Errorf("Signature-Error = %q carries required_input", vals)
	}
}

// checkBody checks a refusal's body: Problem Details or the JSON body.
func checkBody(t *testing.T, resp *http.Response, body []byte, problem bool, code middleware.Code, sig string, status int) {
	t.Helper()
	ct := resp.Header.Get("Content-Type")
	if !problem {
		var e errorJSON
		if ct != "application/json" || json.Unmarshal(body, &e) != nil || e.Error.Code != string(code) || e.Error.Status != status {
			t.Errorf("JSON body: %s %s, want code %s", ct, body, code)
		}
		return
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
		Code   string `json:"code"`
	}
	if ct != "application/problem+json" || json.Unmarshal(body, &p) != nil {
		t.Fatalf("Problem Details: %s %s", ct, body)
	}
	wantType, wantTitle := "about:blank", http.StatusText(status)
	if sig != "" {
		wantType = "urn:ietf:params:sig-error:" + sig
		wantTitle = p.Title // per type; not empty
	}
	if p.Type != wantType || p.Title != wantTitle || p.Title == "" || p.Status != status || p.Code != string(code) || p.Detail == "" {
		t.Errorf("Problem Details %s, want type %s, title %q, status %d, code %s and a detail", body, wantType, wantTitle, status, code)
	}
}

// TestSignatureErrorRefusalStatus: a refusal answered 403 (RefusalStatus)
// keeps its Signature-Error; a policy 403 has none.
func TestSignatureErrorRefusalStatus(t *testing.T) {
	t.Parallel()
	v := mustNew(t, middleware.Config{Keys: staticKeys(), Now: clock, AnyAuthority: true, RefusalStatus: http.StatusForbidden})
	rec := httptest.NewRecorder()
	v.WriteError(rec, httptest.NewRequest("GET", "/", nil), middleware.Fail(middleware.CodeUnknownKey, "no"))
	if rec.Code != 403 || rec.Header().Get("Signature-Error") != "error=unknown_key" {
		t.Errorf("got %d %q, want 403 error=unknown_key", rec.Code, rec.Header().Get("Signature-Error"))
	}
	rec = httptest.NewRecorder()
	middleware.WriteError(rec, nil, middleware.Fail(middleware.CodeForbidden, "no"))
	if rec.Code != 403 || rec.Header().Get("Signature-Error") != "" {
		t.Errorf("policy refusal: got %d %q, want 403 and no Signature-Error", rec.Code, rec.Header().Get("Signature-Error"))
	}
	// A Vary set before is kept, and Accept is not added twice.
	rec = httptest.NewRecorder()
	rec.Header().Set("Vary", "Origin, accept")
	middleware.WriteError(rec, nil, middleware.Fail(middleware.CodeForbidden, "no"))
	if got := rec.Header().Values("Vary"); len(got) != 1 {
		t.Errorf("Vary = %q, want the one line set before", got)
	}
}
