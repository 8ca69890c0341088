package signer_test

import (
	"bytes"
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
	"testing"
	"testing/iotest"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

var (
	fixedCreated = time.Unix(1767225600, 0) // 2026-01-01T00:00:00Z
	fixedNonce   = base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{0x5a}, 64))
)

func fixedClock() time.Time { return fixedCreated }

// verifySignature parses the request's signatures, rebuilds the base of the
// one labelled label and checks it with pub. It returns the signature and its base.
func verifySignature(t testing.TB, r *http.Request, label string, pub ed25519.PublicKey) (signer.Signature, string) {
	t.Helper()
	sig, base, err := checkSignature(r, label, pub)
	if err != nil {
		t.Fatal(err)
	}
	return sig, base
}

func checkSignature(r *http.Request, label string, pub ed25519.PublicKey) (signer.Signature, string, error) {
	sigs, err := signer.ParseSignatures(r.Header.Values("Signature-Input"), r.Header.Values("Signature"))
	if err != nil {
		return signer.Signature{}, "", fmt.Errorf("ParseSignatures: %w", err)
	}
	for _, s := range sigs {
		if s.Label != label {
			continue
		}
		base, err := s.Base(r)
		if err != nil {
			return s, "", fmt.Errorf("Base: %w", err)
		}
		if !ed25519.Verify(pub, base, s.Value) {
			return s, string(base), fmt.Errorf("signature %s does not verify over\n%s", label, base)
		}
		if cd, ok := s.CoversName("content-digest"); ok && cd.Key == "" && !cd.SF {
			body, err := signer.ReadBody(r, 1<<20)
			if err != nil {
				return s, string(base), err
			}
			if err := signer.VerifyContentDigest(r.Header.Values("Content-Digest"), body); err != nil {
				return s, string(base), err
			}
		}
		return s, string(base), nil
	}
	return signer.Signature{}, "", fmt.Errorf("no signature labelled %s in %q", label, r.Header.Values("Signature-Input"))
}

var defaultInput = regexp.MustCompile(`^sig1=\("@authority" "signature-agent";key="sig1"\);created=(\d+);keyid="([A-Za-z0-9_-]{43})";alg="ed25519";expires=(\d+);nonce="([A-Za-z0-9_-]+)";tag="web-bot-auth"$`)
var signatureValue = regexp.MustCompile(`^sig1=:([A-Za-z0-9+/]{86}==):$`)

func TestSignDefaultProfile(t *testing.T) {
	t.Parallel()
	key := signertest.Key(1)
	req := clientRequest(t, "GET", "https://Agent-Target.Example:443/whoami?x=1")
	err := signer.Sign(req, key, signer.Options{SignatureAgent: "http://agent-x.localhost:3000", Now: fixedClock})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"Signature-Input", "Signature", "Signature-Agent"} {
		if n := len(req.Header.Values(h)); n != 1 {
			t.Errorf("%s has %d lines, want 1", h, n)
		}
	}
	in := req.Header.Get("Signature-Input")
	m := defaultInput.FindStringSubmatch(in)
	if m == nil {
		t.Fatalf("Signature-Input = %s, does not match the default profile %s", in, defaultInput)
	}
	created, _ := strconv.ParseInt(m[1], 10, 64)
	expires, _ := strconv.ParseInt(m[3], 10, 64)
	if created != fixedCreated.Unix() {
		t.Errorf("created = %d, want %d", created, fixedCreated.Unix())
	}
	if expires != created+300 {
		t.Errorf("expires = %d, want created+300 = %d", expires, created+300)
	}
	if m[2] != key.KeyID() {
		t.Errorf("keyid = %s, want %s", m[2], key.KeyID())
	}
	nonce, err := base64.RawURLEncoding.DecodeString(m[4])
	if err != nil || len(nonce) != 64 {
		t.Errorf("nonce %q decodes to %d bytes (%v), want 64 bytes of base64url", m[4], len(nonce), err)
	}
	if got := req.Header.Get("Signature"); !signatureValue.MatchString(got) {
		t.Errorf("Signature = %s, want sig1=:<64 bytes base64>:", got)
	}
	if got, want := req.Header.Get("Signature-Agent"), `sig1="http://agent-x.localhost:3000"`; got != want {
		t.Errorf("Signature-Agent = %s, want %s", got, want)
	}
	_, base := verifySignature(t, req, "sig1", key.Public.Key)
	wantBase := "\"@authority\": agent-target.example\n\"signature-agent\";key=\"sig1\": \"http://agent-x.localhost:3000\"\n\"@signature-params\": " + strings.TrimPrefix(in, "sig1=")
	if base != wantBase {
		t.Errorf("base =\n%s\nwant\n%s", base, wantBase)
	}

	// A second signing draws a new nonce.
	req2 := clientRequest(t, "GET", "https://agent-target.example/whoami?x=1")
	if err := signer.Sign(req2, key, signer.Options{Now: fixedClock}); err != nil {
		t.Fatal(err)
	}
	// Without a Signature-Agent there is no member to cover.
	m2 := regexp.MustCompile(`^sig1=\("@authority"\);created=(\d+);keyid="([A-Za-z0-9_-]{43})";alg="ed25519";expires=(\d+);nonce="([A-Za-z0-9_-]+)";tag="web-bot-auth"$`).FindStringSubmatch(req2.Header.Get("Signature-Input"))
	if m2 == nil || m2[4] == m[4] {
		t.Errorf("second nonce = %v, want a fresh one (first %s)", m2, m[4])
	}
	if got := req2.Header.Values("Signature-Agent"); got != nil {
		t.Errorf("Signature-Agent = %q without Options.SignatureAgent, want none", got)
	}
}

func TestSignOptions(t *testing.T) {
	t.Parallel()
	key := signertest.Key(2)
	tests := []struct {
		name string
		opts signer.Options
		want string // Signature-Input
	}{
		{"fixed created and nonce", signer.Options{Created: fixedCreated, Nonce: "abc"},
			`sig1=("@authority");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="abc";tag="web-bot-auth"`},
		{"created wins over now", signer.Options{Created: fixedCreated, Now: func() time.Time { return time.Unix(5, 0) }, Nonce: "abc"},
			`sig1=("@authority");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="abc";tag="web-bot-auth"`},
		{"now", signer.Options{Now: func() time.Time { return time.Unix(1000, 999) }, Nonce: "abc"},
			`sig1=("@authority");created=1000;keyid="%s";alg="ed25519";expires=1300;nonce="abc";tag="web-bot-auth"`},
		{"ttl", signer.Options{Created: fixedCreated, TTL: time.Minute, Nonce: "abc"},
			`sig1=("@authority");created=1767225600;keyid="%s";alg="ed25519";expires=1767225660;nonce="abc";tag="web-bot-auth"`},
		{"expires", signer.Options{Created: fixedCreated, Expires: fixedCreated.Add(10 * time.Second), TTL: time.Hour, Nonce: "abc"},
			`sig1=("@authority");created=1767225600;keyid="%s";alg="ed25519";expires=1767225610;nonce="abc";tag="web-bot-auth"`},
		{"no nonce", signer.Options{Created: fixedCreated, NoNonce: true, Nonce: "ignored"},
			`sig1=("@authority");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;tag="web-bot-auth"`},
		{"tag and label", signer.Options{Created: fixedCreated, Nonce: "abc", Tag: signer.KeyPossessionTag, Label: "proof"},
			`proof=("@authority");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="abc";tag="agentid-key-possession"`},
		{"rand", signer.Options{Created: fixedCreated, Rand: bytes.NewReader(bytes.Repeat([]byte{0xff}, 64))},
			`sig1=("@authority");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="` + strings.Repeat("_", 85) + `w";tag="web-bot-auth"`},
		{"components", signer.Options{Created: fixedCreated, Nonce: "abc", Components: []string{"@Method", "@path", `"@query-param";name="x"`, `"x-dict";key="b"`, `"x-dict";sf`}},
			`sig1=("@method" "@path" "@query-param";name="x" "x-dict";key="b" "x-dict";sf);created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="abc";tag="web-bot-auth"`},
		{"empty components", signer.Options{Created: fixedCreated, Nonce: "abc", Components: []string{}},
			`sig1=();created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="abc";tag="web-bot-auth"`},
		{"nonce escaped", signer.Options{Created: fixedCreated, Nonce: `a"b\c`},
			`sig1=("@authority");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="a\"b\\c";tag="web-bot-auth"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := clientRequest(t, "GET", "http://h.example/p?x=1", "X-Dict", "a=1,  b=2")
			label := tt.opts.Label
			if label == "" {
				label = "sig1"
			}
			if err := signer.Sign(req, key, tt.opts); err != nil {
				t.Fatal(err)
			}
			if got, want := req.Header.Get("Signature-Input"), fmt.Sprintf(tt.want, key.KeyID()); got != want {
				t.Errorf("Signature-Input =\n%s\nwant\n%s", got, want)
			}
			verifySignature(t, req, label, key.Public.Key)
		})
	}
}

func TestSignErrors(t *testing.T) {
	t.Parallel()
	key := signertest.Key(3)
	tests := []struct {
		name string
		key  signer.PrivateKey
		opts signer.Options
		is   error // nil: any error
	}{
		{"no key", signer.PrivateKey{}, signer.Options{}, nil},
		{"short key", signer.PrivateKey{Key: ed25519.PrivateKey(make([]byte, 32))}, signer.Options{}, nil},
		{"signature agent scheme", key, signer.Options{SignatureAgent: "ftp://agent.example"}, signer.ErrInvalidSignatureAgent},
		{"signature agent fragment", key, signer.Options{SignatureAgent: "https://agent.example/keys#x"}, signer.ErrInvalidSignatureAgent},
		{"signature agent user", key, signer.Options{SignatureAgent: "https://u@agent.example"}, signer.ErrInvalidSignatureAgent},
		{"signature agent userinfo", key, signer.Options{SignatureAgent: "https://u@agent.example"}, signer.ErrInvalidSignatureAgent},
		{"unknown component", key, signer.Options{Components: []string{"@foo"}}, signer.ErrUnknownComponent},
		{"bad component", key, signer.Options{Components: []string{`"x";tr`}}, signer.ErrUnknownComponent},
		{"absent header", key, signer.Options{Components: []string{"@authority", "x-absent"}}, signer.ErrMissingComponent},
		{"absent key member", key, signer.Options{Components: []string{`"signature-agent";key="sig1"`}}, signer.ErrMissingComponent},
		{"rand fails", key, signer.Options{Rand: iotest.ErrReader(errors.New("no entropy"))}, nil},
		{"uppercase label", key, signer.Options{Label: "Sig1", SignatureAgent: "https://agent.example"}, nil},
		{"label with a space", key, signer.Options{Label: "sig 1"}, nil},
		{"label starting with a digit", key, signer.Options{Label: "1sig"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := clientRequest(t, "GET", "http://h.example/")
			err := signer.Sign(req, tt.key, tt.opts)
			if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) {
				t.Fatalf("Sign = %v, want error %v", err, tt.is)
			}
			if !strings.HasPrefix(err.Error(), "signer: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			for _, f := range []string{"Signature", "Signature-Input"} {
				if got := req.Header.Values(f); got != nil {
					t.Errorf("%s = %q after a failed Sign, want none", f, got)
				}
			}
		})
	}
}

// roundTripComponents lists every component kind Sign can cover.
var roundTripComponents = [][]string{
	nil,
	{"@method"},
	{"@authority"},
	{"@scheme"},
	{"@target-uri"},
	{"@request-target"},
	{"@path"},
	{"@query"},
	{`"@query-param";name="q"`},
	{"x-custom"},
	{"X-Multi"},
	{`"x-dict";key="b"`},
	{`"x-dict";sf`},
	{"content-type"},
	{"content-digest"},
	{"host"},
	{`"signature-agent";key="sig1"`},
	{"signature-agent"},
	signer.WriteComponents,
	{"@method", "@authority", "@scheme", "@target-uri", "@request-target", "@path", "@query", `"@query-param";name="q"`,
		"x-custom", "x-multi", `"x-dict";key="b"`, `"x-dict";sf`, "x-dict", "content-type", "content-digest", `"signature-agent";key="sig1"`, "signature-agent"},
}

func newRoundTripRequest(t testing.TB, body string) *http.Request {
	t.Helper()
	method := "GET"
	var rd io.Reader
	if body != "" {
		method, rd = "POST", strings.NewReader(body)
	}
	r, err := http.NewRequest(method, "http://Target.Example:8080/a/b%20c?q=hello+world&z=%2A", rd)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("X-Custom", "  custom value ")
	r.Header.Add("X-Multi", "one")
	r.Header.Add("X-Multi", "two, three")
	r.Header.Set("X-Dict", "a=1,   b=(x y);p=?1")
	r.Header.Set("Content-Type", "application/json")
	return r
}

func TestSignRoundTrip(t *testing.T) {
	t.Parallel()
	key := signertest.Key(4)
	for _, body := range []string{"", `{"hello": "world"}`} {
		for _, comps := range roundTripComponents {
			for _, legacy := range []bool{false, true} {
				name := fmt.Sprintf("body=%v/%s/legacy=%v", body != "", strings.Join(comps, ","), legacy)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					req := newRoundTripRequest(t, body)
					opts := signer.Options{Components: comps, SignatureAgent: "https://agent-x.example", Legacy: legacy}
					if err := signer.Sign(req, key, opts); err != nil {
						t.Fatal(err)
					}
					sig, _ := verifySignature(t, req, "sig1", key.Public.Key)
					// protocol-01 (the default) covers the member keyed by the
					// label; Legacy covers only what was asked.
					explicit := containsString(comps, `"signature-agent";key="sig1"`) || containsString(comps, "signature-agent")
					if got := sig.Covers(`"signature-agent";key="sig1"`) || sig.Covers(`"signature-agent"`); got != (!legacy || explicit) {
						t.Errorf("covers signature-agent member = %v with Legacy %v", got, legacy)
					}
					if n := len(sig.Components); comps != nil && n != len(comps)+boolInt(!legacy && !explicit) {
						t.Errorf("%d covered components, want %d: %v", n, len(comps)+boolInt(!legacy && !explicit), sig.Components)
					}
					if sig.Params.KeyID != key.KeyID() || sig.Params.Alg != "ed25519" || sig.Params.Tag != "web-bot-auth" {
						t.Errorf("params = %+v", sig.Params)
					}
					if _, ok := sig.CoversName("content-digest"); ok {
						wantDigest, _ := signer.ContentDigest([]byte(body), "sha-256")
						if got := req.Header.Get("Content-Digest"); got != wantDigest {
							t.Errorf("Content-Digest = %s, want %s", got, wantDigest)
						}
					} else if got := req.Header.Get("Content-Digest"); got != "" {
						t.Errorf("Content-Digest = %s, but content-digest is not covered", got)
					}
					// The body is still there for the transport.
					if req.Body != nil {
						got, _ := io.ReadAll(req.Body)
						if string(got) != body {
							t.Errorf("body after Sign = %q, want %q", got, body)
						}
					}
				})
			}
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestSignRoundTripOverHTTP signs with Transport and verifies on the server's
// view of the request (origin-form URL, Host header, no scheme), over loopback.
func TestSignRoundTripOverHTTP(t *testing.T) {
	t.Parallel()
	key := signertest.Key(5)
	srv := httptest.NewServer(verifyHandler(key.Public.Key))
	t.Cleanup(srv.Close) // after the parallel subtests
	for _, body := range []string{"", `{"hello": "world"}`} {
		for _, comps := range roundTripComponents {
			name := fmt.Sprintf("body=%v/%s", body != "", strings.Join(comps, ","))
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				client := &http.Client{Transport: &signer.Transport{Key: key, Options: signer.Options{
					Components: comps, SignatureAgent: "https://agent-x.example", Standards: true}}}
				tmpl := newRoundTripRequest(t, body)
				req, err := http.NewRequest(tmpl.Method, srv.URL+"/a/b%20c?q=hello+world&z=%2A", tmpl.Body)
				if err != nil {
					t.Fatal(err)
				}
				req.Header = tmpl.Header
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("status = %d (%s), want 200", resp.StatusCode, got)
				}
			})
		}
	}
}

// verifyHandler answers 200 when sig1 verifies with pub (and the body
// matches a covered Content-Digest), else 401 with the reason.
func verifyHandler(pub ed25519.PublicKey) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, err := checkSignature(r, "sig1", pub); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, r.Header.Get("Signature-Input"))
	})
}

// TestSignTamper: changing any covered part of the request after signing
// breaks verification.
func TestSignTamper(t *testing.T) {
	t.Parallel()
	key := signertest.Key(6)
	all := roundTripComponents[len(roundTripComponents)-1]
	tests := []struct {
		name   string
		mutate func(r *http.Request)
	}{
		{"method", func(r *http.Request) { r.Method = "PUT" }},
		{"authority", func(r *http.Request) { r.Host = "evil.example:8080" }},
		{"authority port", func(r *http.Request) { r.Host = "target.example:8081" }},
		{"scheme", func(r *http.Request) { r.URL.Scheme = "https" }},
		{"path", func(r *http.Request) { r.URL.Path, r.URL.RawPath = "/a/b c2", "" }},
		{"query", func(r *http.Request) { r.URL.RawQuery += "&extra=1" }},
		{"query param", func(r *http.Request) { r.URL.RawQuery = "q=hello+World&z=%2A" }},
		{"header", func(r *http.Request) { r.Header.Set("X-Custom", "other") }},
		{"header line added", func(r *http.Request) { r.Header.Add("X-Multi", "four") }},
		{"dictionary member", func(r *http.Request) { r.Header.Set("X-Dict", "a=1, b=(x z);p=?1") }},
		{"content type", func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }},
		{"body", func(r *http.Request) { r.Body = io.NopCloser(strings.NewReader(`{"hello": "World"}`)) }},
		{"signature agent", func(r *http.Request) { r.Header.Set("Signature-Agent", `sig1="https://evil.example"`) }},
		{"created", func(r *http.Request) {
			r.Header.Set("Signature-Input", strings.Replace(r.Header.Get("Signature-Input"), "created=", "created=1", 1))
		}},
		{"signature byte", func(r *http.Request) {
			s := []byte(r.Header.Get("Signature"))
			if s[10] == 'A' {
				s[10] = 'B'
			} else {
				s[10] = 'A'
			}
			r.Header.Set("Signature", string(s))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := newRoundTripRequest(t, `{"hello": "world"}`)
			if err := signer.Sign(req, key, signer.Options{Components: all, SignatureAgent: "https://agent-x.example"}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := checkSignature(req, "sig1", key.Public.Key); err != nil {
				t.Fatalf("untouched request: %v", err)
			}
			req.Body = io.NopCloser(strings.NewReader(`{"hello": "world"}`))
			tt.mutate(req)
			if _, _, err := checkSignature(req, "sig1", key.Public.Key); err == nil {
				t.Error("tampered request verifies")
			}
		})
	}
}

func TestSignExtendedProfiles(t *testing.T) {
	t.Parallel()
	key := signertest.Key(7)
	const agent = "https://agent-x.example"
	tests := []struct {
		name      string
		method    string
		body      string
		opts      signer.Options
		wantInput string
		wantAgent string
	}{
		{"standards", "GET", "", signer.Options{Standards: true, SignatureAgent: agent},
			`sig1=("@authority" "signature-agent";key="sig1");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="n";tag="web-bot-auth"`,
			`sig1="https://agent-x.example"`},
		{"standards without agent", "GET", "", signer.Options{Standards: true},
			`sig1=("@authority");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="n";tag="web-bot-auth"`, ""},
		{"standards already covered", "GET", "", signer.Options{Standards: true, SignatureAgent: agent, Components: []string{`"signature-agent";key="sig1"`, "@authority"}},
			`sig1=("signature-agent";key="sig1" "@authority");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="n";tag="web-bot-auth"`,
			`sig1="https://agent-x.example"`},
		{"standards other label", "GET", "", signer.Options{Standards: true, SignatureAgent: agent, Label: "agent"},
			`agent=("@authority" "signature-agent";key="agent");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="n";tag="web-bot-auth"`,
			`agent="https://agent-x.example"`},
		{"agent normalized", "GET", "", signer.Options{SignatureAgent: "HTTPS://Agent-X.Example:443/"},
			`sig1=("@authority" "signature-agent";key="sig1");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="n";tag="web-bot-auth"`,
			`sig1="https://agent-x.example"`},
		{"legacy", "GET", "", signer.Options{SignatureAgent: agent, Legacy: true},
			`sig1=("@authority");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="n";tag="web-bot-auth"`,
			`sig1="https://agent-x.example"`},
		{"legacy with standards", "GET", "", signer.Options{SignatureAgent: agent, Legacy: true, Standards: true},
			`sig1=("@authority" "signature-agent";key="sig1");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="n";tag="web-bot-auth"`,
			`sig1="https://agent-x.example"`},
		{"whole field asked for", "GET", "", signer.Options{SignatureAgent: agent, Components: []string{"@authority", "signature-agent"}},
			`sig1=("@authority" "signature-agent");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="n";tag="web-bot-auth"`,
			`sig1="https://agent-x.example"`},
		{"metadata", "GET", "", signer.Options{SignatureAgent: agent, Metadata: map[string]string{"operator": "Example Corp", "contact": "mailto:bots@example.com"}},
			`sig1=("@authority" "signature-agent";key="sig1" "signed-agent-metadata");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="n";tag="web-bot-auth"`,
			`sig1="https://agent-x.example"`},
		{"write components with body", "POST", `{"public_jwk":{}}`, signer.Options{Components: signer.WriteComponents},
			`sig1=("@method" "@authority" "@path" "content-digest");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="n";tag="web-bot-auth"`, ""},
		{"write components without body", "PUT", "", signer.Options{Components: signer.WriteComponents, SignatureAgent: agent, Standards: true},
			`sig1=("@method" "@authority" "@path" "content-digest" "signature-agent";key="sig1");created=1767225600;keyid="%s";alg="ed25519";expires=1767225900;nonce="n";tag="web-bot-auth"`,
			`sig1="https://agent-x.example"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var rd io.Reader
			if tt.body != "" {
				rd = strings.NewReader(tt.body)
			}
			req, err := http.NewRequest(tt.method, "https://api.example/agents", rd)
			if err != nil {
				t.Fatal(err)
			}
			tt.opts.Created, tt.opts.Nonce = fixedCreated, "n"
			if err := signer.Sign(req, key, tt.opts); err != nil {
				t.Fatal(err)
			}
			if got, want := req.Header.Get("Signature-Input"), fmt.Sprintf(tt.wantInput, key.KeyID()); got != want {
				t.Errorf("Signature-Input =\n%s\nwant\n%s", got, want)
			}
			if got := req.Header.Get("Signature-Agent"); got != tt.wantAgent {
				t.Errorf("Signature-Agent = %q, want %q", got, tt.wantAgent)
			}
			label := tt.opts.Label
			if label == "" {
				label = "sig1"
			}
			sig, base := verifySignature(t, req, label, key.Public.Key)
			if sig.Covers(`"signature-agent";key="` + label + `"`) {
				if want := `"signature-agent";key="` + label + `": "https://agent-x.example"` + "\n"; !strings.Contains(base, want) {
					t.Errorf("base lacks %q:\n%s", want, base)
				}
			}
			if sig.Covers(`"content-digest"`) {
				want, _ := signer.ContentDigest([]byte(tt.body), "sha-256")
				if got := req.Header.Get("Content-Digest"); got != want {
					t.Errorf("Content-Digest = %q, want %q", got, want)
				}
			}
		})
	}
}

// TestSignTwoSignatures is the key rotation request: sig1 by the current
// key, sig2 by the new key with another tag, over the same components.
func TestSignTwoSignatures(t *testing.T) {
	t.Parallel()
	current, next := signertest.Key(8), signertest.Key(9)
	req, err := http.NewRequest("PUT", "http://localhost:3000/agents/agent-0123/keys", strings.NewReader(`{"public_jwk":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	base := signer.Options{Components: signer.WriteComponents, SignatureAgent: "http://agent-0123.localhost:3000", Standards: true, Created: fixedCreated}
	if err := signer.Sign(req, current, base); err != nil {
		t.Fatal(err)
	}
	digest := req.Header.Get("Content-Digest")
	second := base
	second.Label, second.Tag = "sig2", signer.KeyPossessionTag
	second.SignatureAgent, second.Standards = "", false
	second.Components = []string{"@method", "@authority", "@path", "content-digest", `"signature-agent";key="sig1"`}
	if err := signer.Sign(req, next, second); err != nil {
		t.Fatal(err)
	}
	if got := req.Header.Get("Content-Digest"); got != digest {
		t.Errorf("Content-Digest changed by the second signature: %s, want %s", got, digest)
	}
	sigs, err := signer.ParseSignatures(req.Header.Values("Signature-Input"), req.Header.Values("Signature"))
	if err != nil {
		t.Fatal(err)
	}
	if len(sigs) != 2 || sigs[0].Label != "sig1" || sigs[1].Label != "sig2" {
		t.Fatalf("labels = %v, want sig1, sig2", sigs)
	}
	s1, _ := verifySignature(t, req, "sig1", current.Public.Key)
	s2, _ := verifySignature(t, req, "sig2", next.Public.Key)
	if s1.Params.Tag != "web-bot-auth" || s2.Params.Tag != signer.KeyPossessionTag {
		t.Errorf("tags = %q, %q; want web-bot-auth, %s", s1.Params.Tag, s2.Params.Tag, signer.KeyPossessionTag)
	}
	if s1.Params.KeyID != current.KeyID() || s2.Params.KeyID != next.KeyID() {
		t.Errorf("keyids = %s, %s; want %s, %s", s1.Params.KeyID, s2.Params.KeyID, current.KeyID(), next.KeyID())
	}
	if s1.Params.Nonce == s2.Params.Nonce {
		t.Error("both signatures share a nonce")
	}
	if _, _, err := checkSignature(req, "sig2", current.Public.Key); err == nil {
		t.Error("sig2 verifies with the current key")
	}
	if got := req.Header.Values("Signature-Agent"); len(got) != 1 || got[0] != `sig1="http://agent-0123.localhost:3000"` {
		t.Errorf("Signature-Agent = %q, want only sig1's", got)
	}

	// Signing sig1 again replaces that member and keeps sig2.
	if err := signer.Sign(req, next, signer.Options{}); err != nil {
		t.Fatal(err)
	}
	sigs, err = signer.ParseSignatures(req.Header.Values("Signature-Input"), req.Header.Values("Signature"))
	if err != nil || len(sigs) != 2 {
		t.Fatalf("after re-signing sig1: %d signatures, %v; want 2", len(sigs), err)
	}
	verifySignature(t, req, "sig1", next.Public.Key)
	verifySignature(t, req, "sig2", next.Public.Key)
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	key := signertest.Key(0x11)
	opts := signer.Options{Created: fixedCreated, Nonce: fixedNonce, SignatureAgent: "https://agent-x.example"}
	h, err := signer.Headers("GET", "https://Example.com:443/path?x=1", key, opts)
	if err != nil {
		t.Fatal(err)
	}
	// Built independently of the package: the RFC 9421 base and an Ed25519 signature.
	params := `("@authority" "signature-agent";key="sig1");created=1767225600;keyid="` + key.KeyID() + `";alg="ed25519";expires=1767225900;nonce="` + fixedNonce + `";tag="web-bot-auth"`
	wantBase := "\"@authority\": example.com\n\"signature-agent\";key=\"sig1\": \"https://agent-x.example\"\n\"@signature-params\": " + params
	want := signer.SignatureHeaders{
		SignatureInput: "sig1=" + params,
		Signature:      "sig1=:" + base64.StdEncoding.EncodeToString(ed25519.Sign(key.Key, []byte(wantBase))) + ":",
		SignatureAgent: `sig1="https://agent-x.example"`,
	}
	if h != want {
		t.Errorf("Headers =\n%+v\nwant\n%+v", h, want)
	}
	again, err := signer.Headers("GET", "https://example.com/path?x=1", key, opts)
	if err != nil {
		t.Fatal(err)
	}
	if again != h {
		t.Errorf("Headers is not deterministic with fixed Created and Nonce:\n%+v\n%+v", again, h)
	}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 3 || m["Signature"] != h.Signature || m["Signature-Input"] != h.SignatureInput || m["Signature-Agent"] != h.SignatureAgent {
		t.Errorf("JSON = %s, want the keys Signature, Signature-Input, Signature-Agent", b)
	}

	// Without a Signature-Agent the member is empty and left out of the JSON.
	h2, err := signer.Headers("", "https://example.com/", key, signer.Options{Created: fixedCreated, Nonce: fixedNonce, Components: []string{"@method", "@authority"}})
	if err != nil {
		t.Fatal(err)
	}
	if h2.SignatureAgent != "" {
		t.Errorf("SignatureAgent = %q, want empty", h2.SignatureAgent)
	}
	if b, _ := json.Marshal(h2); strings.Contains(string(b), "Signature-Agent") {
		t.Errorf("JSON = %s, has Signature-Agent", b)
	}
	// The empty method means GET.
	r := clientRequest(t, "GET", "https://example.com/")
	r.Header.Set("Signature-Input", h2.SignatureInput)
	r.Header.Set("Signature", h2.Signature)
	verifySignature(t, r, "sig1", key.Public.Key)
}

func TestHeadersErrors(t *testing.T) {
	t.Parallel()
	key := signertest.Key(10)
	tests := []struct{ method, url string }{
		{"GET", "/relative"},
		{"GET", "example.com/x"},
		{"GET", "http://"},
		{"GET", "://bad"},
		{"GET", "http://exa mple.com/"},
		{"G ET", "http://example.com/"},
		{"GET\n", "http://example.com/"},
		{"GET", "http://example.com/\x00"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.url, func(t *testing.T) {
			t.Parallel()
			h, err := signer.Headers(tt.method, tt.url, key, signer.Options{})
			if err == nil {
				t.Fatalf("Headers(%q, %q) = %+v, want an error", tt.method, tt.url, h)
			}
			if !strings.HasPrefix(err.Error(), "signer: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
	if _, err := signer.Headers("GET", "https://example.com/", signer.PrivateKey{}, signer.Options{}); err == nil {
		t.Error("Headers with no key succeeded")
	}
}
