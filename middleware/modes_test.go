package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/agentid/agentid/middleware"
)

// TestModes: each mode decides which requests reach the handler; every
// outcome goes to OnResult once, with its verdict and code; the handler
// reads the same outcome with ResultFrom; in every mode a replayed
// signature is invalid.
func TestModes(t *testing.T) {
	t.Parallel()
	signed := signedRequest(t, keyA, signOpts(nil))
	replay := signed.Clone(signed.Context())
	bad := signedRequest(t, keyA, signOpts(nil))
	bad.Host = "other.example"
	reqs := []struct {
		name    string
		req     *http.Request
		kind    string // verified, unsigned or invalid: what Mode acts on
		verdict middleware.Outcome
		reason  string
		code    middleware.Code
	}{
		{"verified", signed, "verified", middleware.OutcomeVerified, "verified", ""},
		{"replayed", replay, "invalid", middleware.OutcomeInvalid, "replayed_nonce", middleware.CodeReplayedNonce},
		{"unsigned", httptest.NewRequest("GET", testURL, nil), "unsigned", middleware.OutcomeNotPresent, "unsigned", middleware.CodeMissingSignature},
		{"bad signature", bad, "invalid", middleware.OutcomeInvalid, "invalid_signature", middleware.CodeInvalidSignature},
	}
	for _, mode := range []struct {
		mode   middleware.Mode
		passes map[string]bool
	}{
		{middleware.Required, map[string]bool{"verified": true}},
		{middleware.Optional, map[string]bool{"verified": true, "unsigned": true}},
		{middleware.Observe, map[string]bool{"verified": true, "unsigned": true, "invalid": true}},
	} {
		t.Run(mode.mode.String(), func(t *testing.T) {
			var (
				mu      sync.Mutex
				results []middleware.Result
			)
			store := middleware.NewMemoryReplayStoreWithClock(clock)
			// other.example is served too: "bad signature" is a signature
			// that fails, not a request for another host (TestAuthorities).
			v, err := middleware.New(middleware.Config{Authorities: []string{"api.example.com", "other.example"}, Keys: staticKeys(), Now: clock, Mode: mode.mode, Replay: store,
				OnResult: func(r middleware.Result) { mu.Lock(); results = append(results, r); mu.Unlock() }})
			if err != nil {
				t.Fatal(err)
			}
			for i, rq := range reqs {
				var seen *middleware.Result
				h := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					res, ok := middleware.ResultFrom(r.Context())
					if !ok {
						t.Errorf("%s: no result in the handler's context", rq.name)
					}
					seen = &res
					_, hasAgent := middleware.AgentFrom(r.Context())
					if hasAgent != (res.Outcome == middleware.OutcomeVerified) {
						t.Errorf("%s: AgentFrom = %v with verdict %s", rq.name, hasAgent, res.Outcome)
					}
				}))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, rq.req.Clone(rq.req.Context()))
				wantPass := mode.passes[rq.kind]
				if (seen != nil) != wantPass || (rec.Code == 200) != wantPass {
					t.Errorf("%s: reached handler %v (status %d), want %v", rq.name, seen != nil, rec.Code, wantPass)
				}
				if !wantPass && rec.Header().Get("Accept-Signature") == "" {
					t.Errorf("%s: refusal without Accept-Signature", rq.name)
				}
				mu.Lock()
				if len(results) != i+1 {
					t.Fatalf("%s: OnResult called %d times, want %d", rq.name, len(results), i+1)
				}
				got := results[i]
				mu.Unlock()
				if got.Outcome != rq.verdict || got.Reason != rq.reason || got.Passed != wantPass || (got.Err == nil) != (rq.code == "") || (got.Err != nil && got.Err.Code != rq.code) {
					t.Errorf("%s: OnResult got outcome %s reason %s passed %v err %v; want %s %s %v %s", rq.name, got.Outcome, got.Reason, got.Passed, got.Err, rq.verdict, rq.reason, wantPass, rq.code)
				}
				if rq.verdict == middleware.OutcomeVerified && (got.Agent.UID != testUID || got.Agent.ID != testOrigin) {
					t.Errorf("%s: agent %+v", rq.name, got.Agent)
				}
				if seen != nil && (seen.Outcome != got.Outcome || seen.Reason != got.Reason) {
					t.Errorf("%s: ResultFrom outcome %s, OnResult %s", rq.name, seen.Outcome, got.Outcome)
				}
			}
		})
	}
}

// TestRefusalStatus403 answers refusals with 403 and Accept-Signature (web-bot-auth
// protocol-01), keeping other statuses.
func TestRefusalStatus403(t *testing.T) {
	t.Parallel()
	res := serve(t, middleware.Config{RefusalStatus: http.StatusForbidden}, httptest.NewRequest("GET", testURL, nil))
	if res.status != 403 || res.code != "missing_signature" || res.rec.Header().Get("Accept-Signature") == "" {
		t.Errorf("status %d code %s Accept-Signature %q, want 403 missing_signature with Accept-Signature", res.status, res.code, res.rec.Header().Get("Accept-Signature"))
	}
	res = serve(t, middleware.Config{RefusalStatus: http.StatusForbidden, MaxBodyBytes: 1}, signedPost(t, "too long"))
	if res.status != 413 {
		t.Errorf("payload too large answered %d, want 413 kept", res.status)
	}
	if err := (middleware.Config{Keys: staticKeys(), RefusalStatus: 418}).Validate(); err == nil {
		t.Error("RefusalStatus 418 accepted")
	}
}
