package middleware_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

// twoSignatures returns a POST signed by keyA (the agent, default tag) and
// by keyB (tag agentid-key-possession), as a key rotation is.
func twoSignatures(t *testing.T, body string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, testURL, strings.NewReader(body))
	if err := signer.Sign(r, keyA, signOpts(func(o *signer.Options) { o.Components = signer.WriteComponents })); err != nil {
		t.Fatal(err)
	}
	second := signOpts(func(o *signer.Options) {
		o.Components = signer.WriteComponents
		o.Label, o.Tag, o.SignatureAgent = "sig2", signer.KeyPossessionTag, ""
	})
	if err := signer.Sign(r, keyB, second); err != nil {
		t.Fatal(err)
	}
	return r
}

// failingBody fails every read.
type failingBody struct{ reads int }

func (b *failingBody) Read([]byte) (int, error) { b.reads++; return 0, errors.New("read again") }
func (b *failingBody) Close() error             { return nil }

// TestCheckSignedParsesOnce checks two signatures of one request with two
// verifiers after one Parse: once parsed (and the body given with
// SetBody), the signature fields and the body are never read again, which
// the test makes evident by replacing them with garbage.
func TestCheckSignedParsesOnce(t *testing.T) {
	const body = `{"public_jwk":{}}`
	r := twoSignatures(t, body)
	agent, err := middleware.New(middleware.Config{Keys: staticKeys(), Authorities: testAuthorities, Now: clock, RequiredComponents: signer.WriteComponents})
	if err != nil {
		t.Fatal(err)
	}
	proof, err := middleware.New(middleware.Config{Keys: middleware.NewStaticKeys(), Authorities: testAuthorities, Now: clock,
		Tag: signer.KeyPossessionTag, AllowMissingSignatureAgent: true, RequiredComponents: signer.WriteComponents})
	if err != nil {
		t.Fatal(err)
	}
	s := agent.Parse(r)
	s.SetBody([]byte(body))
	fb := &failingBody{}
	r.Body = fb
	r.Header["Signature-Input"] = []string{"garbage"}
	r.Header["Signature"] = []string{"garbage"}

	res := agent.CheckSigned(s, nil)
	if res.Outcome != middleware.OutcomeVerified {
		t.Fatalf("agent signature: verdict %s (%v), want verified", res.Outcome, res.Err)
	}
	if res.Agent.KeyID != keyA.KeyID() || res.Agent.SignatureAgent != testOrigin {
		t.Errorf("agent = %s from %s, want %s from %s", res.Agent.KeyID, res.Agent.SignatureAgent, keyA.KeyID(), testOrigin)
	}
	onlyB := middleware.NewStaticKeys()
	onlyB.Add("", keyB.Public)
	res = proof.CheckSigned(s, onlyB)
	if res.Outcome != middleware.OutcomeVerified || res.Agent.KeyID != keyB.KeyID() || res.Agent.Tag != signer.KeyPossessionTag {
		t.Fatalf("possession signature: verdict %s key %s tag %q (%v), want verified by %s", res.Outcome, res.Agent.KeyID, res.Agent.Tag, res.Err, keyB.KeyID())
	}
	if fb.reads != 0 {
		t.Errorf("the body was read %d times after SetBody", fb.reads)
	}
	// The per-call key source replaces Config.Keys: the proof verifier's
	// own (empty) source knows no key.
	if res := proof.CheckSigned(s, nil); res.Outcome != middleware.OutcomeUnverified || res.Err.Code != middleware.CodeUnknownKey {
		t.Errorf("proof with Config.Keys: verdict %s (%v), want unverified unknown_key", res.Outcome, res.Err)
	}
}

// TestCheckSignedMatchesCheck: for requests Check refuses, CheckSigned
// refuses with the same code, and a body given with SetBody is what
// Content-Digest is checked against.
func TestCheckSignedMatchesCheck(t *testing.T) {
	v, err := middleware.New(middleware.Config{Keys: staticKeys(), Authorities: testAuthorities, Now: clock, RequiredComponents: signer.WriteComponents})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  func() *http.Request
		body string // given with SetBody when not ""
		want middleware.Code
	}{
		{"unsigned", func() *http.Request { return httptest.NewRequest(http.MethodPost, testURL, nil) }, "", middleware.CodeMissingSignature},
		{"input only", func() *http.Request {
			r := signedPost(t, "x")
			r.Header.Del("Signature")
			return r
		}, "", middleware.CodeInvalidSignatureInput},
		{"wrong tag", func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, testURL, strings.NewReader("x"))
			signer.Sign(r, keyA, signOpts(func(o *signer.Options) { o.Components = signer.WriteComponents; o.Tag = "other" }))
			return r
		}, "", middleware.CodeInvalidSignatureInput},
		{"body differs", func() *http.Request { return signedPost(t, "x") }, "y", middleware.CodeDigestMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := v.Check(tc.req())
			s := v.Parse(tc.req())
			if tc.body != "" {
				s.SetBody([]byte(tc.body))
			} else if want.Err == nil || want.Err.Code != tc.want {
				t.Fatalf("Check: %v, want %s", want.Err, tc.want)
			}
			got := v.CheckSigned(s, nil)
			if got.Err == nil || got.Err.Code != tc.want {
				t.Errorf("CheckSigned: %v, want %s", got.Err, tc.want)
			}
		})
	}
}
