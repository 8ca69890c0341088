package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// precheckBefore is precheck as it was when whether a refusal passed was
// read from its error's code (forbidden never passed): the reference the
// present precheck must agree with.
func (h *Handler) precheckBefore(orig *http.Request, signed *middleware.Signed) *middleware.Result {
	var err *middleware.Error
	if names := agentHeaders(orig.Header); len(names) > 0 {
		err = middleware.Fail(middleware.CodeForbidden,
			"the request carries %s: X-Agent-* headers are set only by the proxy in front of the service, and this forward-auth endpoint cannot remove them", signer.Truncate(strings.Join(names, ", ")))
	} else if h.cfg.Verifier.Covers(signed, "content-digest") {
		err = middleware.Fail(middleware.CodeInvalidSignatureInput,
			"the signature covers content-digest, but a forward-auth endpoint never sees the request body: sign without content-digest, or verify where the body is seen (a reverse proxy or the service itself)")
	}
	if err == nil {
		return nil
	}
	passed := h.cfg.Verifier.Mode() == middleware.Observe && err.Code != middleware.CodeForbidden
	return &middleware.Result{Request: orig, Outcome: err.Outcome(), Err: err, Passed: passed}
}

// TestPrecheckAgrees: in every mode, for requests with and without
// X-Agent-* headers and with and without a signature over content-digest,
// precheck refuses as it did when
// the refusal's code decided whether it passed: X-Agent-* headers never
// pass, a signature over the body passes as invalid in Observe mode only.
func TestPrecheckAgrees(t *testing.T) {
	t.Parallel()
	now := time.Unix(1767225600, 0)
	const origin = "https://agent-0123456789abcdef01234567.agentid.example"
	key := signertest.Key(0x7c)
	keys := middleware.NewStaticKeys()
	keys.Add(origin, key.Public)
	request := func(t *testing.T, components []string, agentHeader string) *http.Request {
		t.Helper()
		r, _ := http.NewRequest(http.MethodPost, "https://api.example.com/transfer", nil)
		digest, _ := signer.ContentDigest(nil, "sha-256")
		r.Header.Set("Content-Digest", digest)
		if components != nil {
			if err := signer.Sign(r, key, signer.Options{SignatureAgent: origin, Now: func() time.Time { return now }, Components: components}); err != nil {
				t.Fatal(err)
			}
		}
		if agentHeader != "" {
			r.Header[agentHeader] = []string{"x"}
		}
		return r
	}
	plain := []string{"@method", "@authority", "@path"}
	digest := append(plain[:3:3], "content-digest")
	type want struct {
		refused bool
		code    middleware.Code
		passed  bool
	}
	for _, mode := range []middleware.Mode{middleware.Required, middleware.Optional, middleware.Observe} {
		v, err := middleware.New(middleware.Config{Keys: keys, Mode: mode, Now: func() time.Time { return now }, Authorities: []string{"api.example.com"}})
		if err != nil {
			t.Fatal(err)
		}
		h, err := New(Config{Verifier: v, ForwardAuth: FrontNginx})
		if err != nil {
			t.Fatal(err)
		}
		observe := mode == middleware.Observe
		for _, tc := range []struct {
			name        string
			components  []string // nil: unsigned
			agentHeader string
			want        want
		}{
			{"unsigned", nil, "", want{}},
			{"signed", plain, "", want{}},
			{"over content-digest", digest, "", want{true, middleware.CodeInvalidSignatureInput, observe}},
			{"unsigned with X-Agent-Uid", nil, "X-Agent-Uid", want{true, middleware.CodeForbidden, false}},
			{"signed with x_agent_role", plain, "x_agent_role", want{true, middleware.CodeForbidden, false}},
			{"over content-digest with X-AGENT-ID", digest, "X-AGENT-ID", want{true, middleware.CodeForbidden, false}},
		} {
			r := request(t, tc.components, tc.agentHeader)
			signed := v.ParseChecked(r)
			got, before := h.precheck(r, signed), h.precheckBefore(r, signed)
			what := mode.String() + ", " + tc.name
			if (got == nil) != (before == nil) || (got != nil && (got.Err.Code != before.Err.Code || got.Passed != before.Passed ||
				got.Outcome != before.Outcome || got.Err.Message != before.Err.Message || got.Request != before.Request)) {
				t.Errorf("%s: precheck %+v, before %+v", what, got, before)
			}
			switch {
			case !tc.want.refused && got != nil:
				t.Errorf("%s: refused (%s), want nil", what, got.Err.Code)
			case tc.want.refused && got == nil:
				t.Errorf("%s: nil, want %s", what, tc.want.code)
			case got != nil && (got.Err.Code != tc.want.code || got.Passed != tc.want.passed || got.Outcome == middleware.OutcomeVerified):
				t.Errorf("%s: %s passed %v verdict %v, want %s passed %v invalid", what, got.Err.Code, got.Passed, got.Outcome, tc.want.code, tc.want.passed)
			}
		}
	}
}
