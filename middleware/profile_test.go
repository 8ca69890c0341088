package middleware_test

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

// profileKeys publishes keyA for testOrigin as both profiles name it: the
// origin (its well-known directory, the deployed profile) and the origin's
// root URL, fetched as sent (protocol-01).
func profileKeys() *middleware.StaticKeys {
	k := staticKeys()
	k.Add(testOrigin+"/", keyA.Public)
	return k
}

func profileVerifier(t *testing.T, p middleware.Profile) *middleware.Verifier {
	t.Helper()
	v, err := middleware.New(middleware.Config{Keys: profileKeys(), Authorities: testAuthorities, Now: clock, Profile: p})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// handSigned signs a GET to testURL with keyA covering comps, after
// setting Signature-Agent to agent by hand ("" for none).
func handSigned(t *testing.T, agent string, comps ...string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, testURL, nil)
	if agent != "" {
		r.Header.Set("Signature-Agent", agent)
	}
	if err := signer.Sign(r, keyA, signer.Options{Components: comps, Now: clock}); err != nil {
		t.Fatal(err)
	}
	return r
}

// agentid's default signing profile (protocol-01) verifies in both
// profiles; the identity is the URL as each profile fetches it.
func TestProfilesAcceptProtocol01Default(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p      middleware.Profile
		wantID string
	}{
		{middleware.ProfileDeployed, testOrigin},
		{middleware.ProfileStrict01, testOrigin + "/"},
	} {
		t.Run(tc.p.String(), func(t *testing.T) {
			r := signedRequest(t, keyA, signer.Options{SignatureAgent: testOrigin, Now: clock})
			a, err := profileVerifier(t, tc.p).Verify(r)
			if err != nil {
				t.Fatalf("Verify (%s) of the protocol-01 default: %v", tc.p, err)
			}
			if a.ID != tc.wantID || !a.Bound || a.UID != testUID || a.KeyID != keyA.KeyID() {
				t.Errorf("agent = {ID:%q Bound:%v UID:%q KeyID:%q}, want {%q true %q %q}", a.ID, a.Bound, a.UID, a.KeyID, tc.wantID, testUID, keyA.KeyID())
			}
		})
	}
}

// Each form older drafts and deployed signers use is accepted by the
// deployed profile and refused by the strict one with its own reason.
func TestStrictProfileRefusesEachLegacyForm(t *testing.T) {
	t.Parallel()
	const host = testUID + ".agentid.example"
	tests := []struct {
		name         string
		req          func(t *testing.T) *http.Request
		wantCode     string
		wantReason   error
		deployedPass bool
	}{
		{"no Signature-Agent", func(t *testing.T) *http.Request { return handSigned(t, "", "@authority") },
			"invalid_signature_agent", middleware.ErrLegacyNoSignatureAgent, false},
		{"string field, whole field covered", func(t *testing.T) *http.Request {
			return handSigned(t, `"`+testOrigin+`"`, "@authority", "signature-agent")
		}, "invalid_signature_agent", middleware.ErrLegacyStringField, true},
		{"token field", func(t *testing.T) *http.Request { return handSigned(t, testOrigin, "@authority", "signature-agent") },
			"invalid_signature_agent", middleware.ErrLegacyTokenField, true},
		{"member not covered (agentid --legacy, vestauth)", func(t *testing.T) *http.Request {
			return signedRequest(t, keyA, signOpts(nil))
		}, "missing_components", middleware.ErrLegacyUncovered, true},
		{"whole dictionary field covered (web-bot-auth 0.1.3)", func(t *testing.T) *http.Request {
			return signedRequest(t, keyA, signOpts(func(o *signer.Options) { o.Components = []string{"@authority", "signature-agent"} }))
		}, "missing_components", middleware.ErrLegacyWholeField, true},
		{"member keyed other than by the label", func(t *testing.T) *http.Request {
			return handSigned(t, `agent2="`+testOrigin+`"`, "@authority", `"signature-agent";key="agent2"`)
		}, "missing_components", middleware.ErrLegacyOtherMember, true},
		{"member with ;type=directory", func(t *testing.T) *http.Request {
			return handSigned(t, `sig1="`+testOrigin+`";type=directory`, "@authority", `"signature-agent";key="sig1"`)
		}, "invalid_signature_agent", middleware.ErrLegacyMemberParams, true},
		{"member with ;type=jwks_uri", func(t *testing.T) *http.Request {
			return handSigned(t, `sig1="`+testOrigin+`";type=jwks_uri`, "@authority", `"signature-agent";key="sig1"`)
		}, "invalid_signature_agent", middleware.ErrLegacyMemberParams, false /* a JWKS at the origin is another key set */},
		{"member with ;type=cimd", func(t *testing.T) *http.Request {
			return handSigned(t, `sig1="`+testOrigin+`";type=cimd`, "@authority", `"signature-agent";key="sig1"`)
		}, "invalid_signature_agent", middleware.ErrLegacyMemberParams, false},
		{"token member without a scheme (vestauth's older form)", func(t *testing.T) *http.Request {
			return handSigned(t, `sig1=`+host, "@authority", `"signature-agent";key="sig1"`)
		}, "invalid_signature_agent", middleware.ErrLegacyTokenMember, true},
		{"string member without a scheme", func(t *testing.T) *http.Request {
			return handSigned(t, `sig1="`+host+`"`, "@authority", `"signature-agent";key="sig1"`)
		}, "invalid_signature_agent", signer.ErrInvalidSignatureAgent, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := profileVerifier(t, middleware.ProfileStrict01).Verify(tt.req(t))
			if codeOf(err) != tt.wantCode || !errors.Is(err, tt.wantReason) {
				t.Errorf("strict-01: got %v, want %s wrapping %v", err, tt.wantCode, tt.wantReason)
			}
			_, err = profileVerifier(t, middleware.ProfileDeployed).Verify(tt.req(t))
			if (err == nil) != tt.deployedPass {
				t.Errorf("deployed: got %v, want accepted = %v (as before protocol-01)", err, tt.deployedPass)
			}
		})
	}
}

// Strict refusals are 403 with an Accept-Signature asking for the member.
func TestStrictProfileRefusal(t *testing.T) {
	t.Parallel()
	mw := mustNew(t, middleware.Config{Keys: profileKeys(), Authorities: testAuthorities, Now: clock, Profile: middleware.ProfileStrict01}).Middleware
	w := httptest.NewRecorder()
	mw(http.NotFoundHandler()).ServeHTTP(w, signedRequest(t, keyA, signOpts(nil)))
	if w.Code != http.StatusForbidden || !strings.Contains(w.Header().Get("Accept-Signature"), `"signature-agent";key="sig1"`) {
		t.Errorf("strict refusal: %d, Accept-Signature %q; want 403 naming \"signature-agent\";key=\"sig1\"", w.Code, w.Header().Get("Accept-Signature"))
	}
	if err := (middleware.Config{Keys: profileKeys(), Profile: 7}).Validate(); err == nil {
		t.Error("Validate accepted Profile 7")
	}
}

func TestResultOutcome(t *testing.T) {
	t.Parallel()
	fail := func(c middleware.Code) *middleware.Error { return &middleware.Error{Code: c} }
	tests := []struct {
		err  *middleware.Error
		want middleware.Outcome
	}{
		{nil, middleware.OutcomeUnverified},
		{fail(middleware.CodeMissingSignature), middleware.OutcomeNotPresent},
		{fail(middleware.CodeKeyFetchFailed), middleware.OutcomeUnverified},
		{fail(middleware.CodeUnknownKey), middleware.OutcomeUnverified},
		{fail(middleware.CodeUntrustedAgent), middleware.OutcomeUnverified},
		{fail(middleware.CodeInvalidSignature), middleware.OutcomeInvalid},
		{fail(middleware.CodeExpiredSignature), middleware.OutcomeInvalid},
		{fail(middleware.CodeReplayedNonce), middleware.OutcomeInvalid},
		{fail(middleware.CodeMissingComponents), middleware.OutcomeInvalid},
		{fail(middleware.CodeRevokedKey), middleware.OutcomeInvalid},
	}
	for _, tt := range tests {
		if got := tt.err.Outcome(); got != tt.want {
			t.Errorf("Outcome of %v = %s, want %s", tt.err, got, tt.want)
		}
	}
	// Through Check: an unsigned request is not-present, a forged one
	// invalid, a good one verified; each with its reason.
	v := profileVerifier(t, middleware.ProfileStrict01)
	if got := v.Check(httptest.NewRequest(http.MethodGet, testURL, nil)); got.Outcome != middleware.OutcomeNotPresent || got.Reason != "unsigned" {
		t.Errorf("unsigned request: %s %s, want not-present unsigned", got.Outcome, got.Reason)
	}
	r := signedRequest(t, keyA, signer.Options{SignatureAgent: testOrigin, Now: clock})
	r.Host = "other.example"
	if got := v.Check(r); got.Outcome != middleware.OutcomeInvalid || got.Reason != "misdirected_request" {
		t.Errorf("request moved to another host: %s %s, want invalid misdirected_request", got.Outcome, got.Reason)
	}
	if got := profileVerifier(t, middleware.ProfileDeployed).Check(signedRequest(t, keyA, signOpts(nil))); got.Outcome != middleware.OutcomeVerified || got.Reason != "verified" {
		t.Errorf("signed request: %s %s (%v), want verified verified", got.Outcome, got.Reason, got.Err)
	}
	if got, _ := middleware.ResultFrom(middleware.WithAgent(t.Context(), middleware.Agent{ID: testOrigin})); got.Reason != "verified" {
		t.Errorf("WithAgent: reason %q, want verified", got.Reason)
	}
}

func TestSignedAgentMetadata(t *testing.T) {
	t.Parallel()
	v := profileVerifier(t, middleware.ProfileDeployed)
	md := map[string]string{"operator": "Example Corp", "purpose": "search"}
	r := signedRequest(t, keyA, signOpts(func(o *signer.Options) { o.Metadata = md }))
	a, err := v.Verify(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Metadata) != 2 || a.Metadata["operator"] != "Example Corp" || a.Metadata["purpose"] != "search" {
		t.Errorf("Metadata = %v, want %v", a.Metadata, md)
	}

	// Other item types are handed over serialized.
	r2 := httptest.NewRequest(http.MethodGet, testURL, nil)
	r2.Header.Set("Signature-Agent", `sig1="`+testOrigin+`"`)
	r2.Header.Set(signer.MetadataHeader, `rate=10, tags=("a" "b"), verified, site=example.com`)
	if err := signer.Sign(r2, keyA, signer.Options{Components: []string{"@authority", `"signature-agent";key="sig1"`, "signed-agent-metadata"}, Now: clock}); err != nil {
		t.Fatal(err)
	}
	a, err = v.Verify(r2)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"rate": "10", "tags": `("a" "b")`, "verified": "?1", "site": "example.com"}
	for k, w := range want {
		if a.Metadata[k] != w {
			t.Errorf("Metadata[%s] = %q, want %q", k, a.Metadata[k], w)
		}
	}

	// Not covered: not handed over.
	r = signedRequest(t, keyA, signOpts(nil))
	r.Header.Set(signer.MetadataHeader, `operator="Mallory"`)
	if a, err := v.Verify(r); err != nil || a.Metadata != nil {
		t.Errorf("uncovered metadata: %v, Metadata %v; want verified without metadata", err, a.Metadata)
	}

	// Covered but not a dictionary: refused.
	r3 := httptest.NewRequest(http.MethodGet, testURL, nil)
	r3.Header.Set(signer.MetadataHeader, `operator=(`)
	if err := signer.Sign(r3, keyA, signer.Options{SignatureAgent: testOrigin, Components: []string{"@authority", "signed-agent-metadata"}, Now: clock}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(r3); codeOf(err) != "invalid_request" {
		t.Errorf("malformed covered metadata: %v, want invalid_request", err)
	}
}

// vectors01 are the protocol-01 entries of testdata/vectors.json.
type vectors01 struct {
	Key struct {
		JWK struct {
			D string `json:"d"`
		} `json:"jwk"`
	} `json:"ed25519_test_key_rfc9421_b14"`
	E21 struct {
		Request struct {
			Method    string `json:"method"`
			Authority string `json:"authority"`
		} `json:"request"`
		Headers map[string]string `json:"headers"`
		Base    string            `json:"signature_base"`
	} `json:"webbotauth_01_e21_member_keyed_by_label"`
	E23 struct {
		Authority string            `json:"request_authority"`
		Body      string            `json:"response_body"`
		Headers   map[string]string `json:"response_headers"`
		Base      string            `json:"signature_base"`
	} `json:"webbotauth_01_e23_signed_directory_response"`
}

func loadVectors01(t *testing.T) vectors01 {
	t.Helper()
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors01
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// The protocol-01 vectors: E.2.1 (member keyed by the label) verifies in
// the strict profile from a base equal byte for byte to the draft's; the
// older E.2.1 (member agent2 under label sig2) and E.2.2 (a string field)
// are refused there and still accepted by the deployed profile; E.2.3's
// directory-response base is rebuilt byte for byte.
func TestVectorsProtocol01(t *testing.T) {
	t.Parallel()
	v01 := loadVectors01(t)
	old := loadVectors(t)
	key := old.PrivateKey(t)
	keys := middleware.NewStaticKeys()
	keys.Add("https://signature-agent.test", key.Public)
	keys.Add("https://signature-agent.test/", key.Public)
	cfg := func(p middleware.Profile) middleware.Config {
		// Both vector sets' authorities: the -01 one and the older one.
		return middleware.Config{Keys: keys, Authorities: []string{v01.E21.Request.Authority, old.E21.Request.Build().Host}, Now: fixedClock(1735690000), MaxWindow: -1, Profile: p}
	}
	strict, _ := middleware.New(cfg(middleware.ProfileStrict01))
	deployed, _ := middleware.New(cfg(middleware.ProfileDeployed))

	e21 := func() *http.Request {
		r := httptest.NewRequest(v01.E21.Request.Method, "https://"+v01.E21.Request.Authority+"/", nil)
		for k, val := range v01.E21.Headers {
			r.Header.Set(k, val)
		}
		return r
	}
	sigs, err := signer.ParseSignatures(e21().Header.Values("Signature-Input"), e21().Header.Values("Signature"))
	if err != nil || len(sigs) != 1 {
		t.Fatalf("E.2.1 (01): %v", err)
	}
	if base, err := sigs[0].Base(e21()); err != nil || string(base) != v01.E21.Base {
		t.Errorf("E.2.1 (01) base =\n%s\nwant\n%s (%v)", base, v01.E21.Base, err)
	}
	for name, ver := range map[string]*middleware.Verifier{"strict": strict, "deployed": deployed} {
		a, err := ver.Verify(e21())
		if err != nil || a.KeyID != key.KeyID() || !a.Bound {
			t.Errorf("E.2.1 (01) in %s: %v, %+v", name, err, a)
		}
	}
	if _, err := strict.Verify(old.E21.Request.Build()); !errors.Is(err, middleware.ErrLegacyOtherMember) {
		t.Errorf("older E.2.1 (agent2 under sig2) in strict: %v, want ErrLegacyOtherMember", err)
	}
	// The -01 vector reuses the older one's nonce: a fresh replay store.
	deployed, _ = middleware.New(cfg(middleware.ProfileDeployed))
	if _, err := deployed.Verify(old.E21.Request.Build()); err != nil {
		t.Errorf("older E.2.1 in deployed: %v, want accepted", err)
	}
	if _, err := strict.Verify(old.E22.Request.Build()); !errors.Is(err, middleware.ErrLegacyStringField) {
		t.Errorf("E.2.2 legacy string in strict: %v, want ErrLegacyStringField", err)
	}
	if _, err := deployed.Verify(old.E22.Request.Build()); err != nil {
		t.Errorf("E.2.2 legacy string in deployed: %v, want accepted", err)
	}

	// E.2.3: the directory response's base, rebuilt from a response whose
	// request had the vector's authority.
	req := httptest.NewRequest(http.MethodGet, "https://"+v01.E23.Authority+signer.DirectoryPath, nil)
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Request: req}
	for k, val := range v01.E23.Headers {
		resp.Header.Set(k, val)
	}
	if err := signer.VerifyContentDigest(resp.Header.Values("Content-Digest"), []byte(v01.E23.Body)); err != nil {
		t.Errorf("E.2.3 Content-Digest: %v", err)
	}
	rs, err := signer.ParseSignaturesLimited(resp.Header.Values("Signature-Input"), resp.Header.Values("Signature"), signer.Limits{Tag: signer.DirectoryTag})
	if err != nil || len(rs) != 1 {
		t.Fatalf("E.2.3 signature: %v", err)
	}
	base, err := rs[0].AppendResponseBase(nil, resp)
	if err != nil || string(base) != v01.E23.Base {
		t.Errorf("E.2.3 base =\n%s\nwant\n%s (%v)", base, v01.E23.Base, err)
	}
	if err := key.Public.Verify(signer.AlgEd25519, base, rs[0].Value); err != nil {
		t.Errorf("E.2.3 signature over the rebuilt base: %v", err)
	}
}

// The debug line of a refusal names its protocol-01 outcome.
func TestRefusalLogNamesOutcome(t *testing.T) {
	t.Parallel()
	var buf strings.Builder
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	v, err := middleware.New(middleware.Config{Keys: profileKeys(), Authorities: testAuthorities, Now: clock, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	r := signedRequest(t, keyA, signOpts(nil))
	r.Host = "other.example"
	v.Check(r)
	v.Check(httptest.NewRequest(http.MethodGet, testURL, nil))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"outcome":"invalid","reason":"misdirected_request"`) || !strings.Contains(lines[1], `"outcome":"not-present","reason":"unsigned"`) {
		t.Errorf("log lines = %q, want invalid misdirected_request then not-present unsigned", lines)
	}
}
