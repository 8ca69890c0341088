package middleware_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer/signertest"
)

func loadVectors(t testing.TB) signertest.Vectors {
	return signertest.LoadVectors(t, "testdata/vectors.json")
}

func fixedClock(unix int64) func() time.Time {
	return func() time.Time { return time.Unix(unix, 0) }
}

func codeOf(err error) string {
	var e *middleware.Error
	if errors.As(err, &e) {
		return string(e.Code)
	}
	return ""
}

func TestVectorsVerify(t *testing.T) {
	v := loadVectors(t)
	key := v.PrivateKey(t)
	keys := middleware.NewStaticKeys()
	keys.Add("https://signature-agent.test", key.Public)
	keys.AddWithID("", "test-key-ed25519", key.Public) // B.2.6: no signature agent, a named keyid

	// The vectors' windows (1 h, 100 years) exceed the 10-minute default.
	web := middleware.Config{AnyAuthority: true, Keys: keys, Now: fixedClock(1735690000), MaxWindow: -1}
	rfc := middleware.Config{AnyAuthority: true, Keys: keys, Now: fixedClock(1618884473 + 10), AnyTag: true, AllowAnyKeyID: true,
		AllowMissingExpires: true, AllowMissingNonce: true, AllowMissingSignatureAgent: true}

	tests := []struct {
		name    string
		cfg     middleware.Config
		req     func() *http.Request
		wantErr string
	}{
		{"E.2.1 dictionary member", web, func() *http.Request { return v.E21.Request.Build() }, ""},
		{"E.2.2 legacy string", web, func() *http.Request { return v.E22.Request.Build() }, ""},
		{"B.2.6 relaxed RFC 9421", rfc, v.B26Request, ""},
		{"B.2.6 strict profile rejects it", web, v.B26Request, "invalid_signature_input"},
		{"E.2.2 default window", middleware.Config{AnyAuthority: true, Keys: keys, Now: fixedClock(1735690000)},
			func() *http.Request { return v.E22.Request.Build() }, "signature_window_too_long"},
		{"E.2.2 real clock", middleware.Config{AnyAuthority: true, Keys: keys, MaxWindow: -1},
			func() *http.Request { return v.E22.Request.Build() }, "expired_signature"},
		{"B.2.6 needs AllowAnyKeyID", func() middleware.Config { c := rfc; c.AllowAnyKeyID = false; return c }(), v.B26Request, "unknown_key"},
		{"E.2.1 changed authority", web, func() *http.Request {
			r := v.E21.Request.Build()
			r.Host = "example.org"
			return r
		}, "invalid_signature"},
		{"E.2.1 changed signature agent", web, func() *http.Request {
			r := v.E21.Request.Build()
			r.Header.Set("Signature-Agent", `agent2="https://signature-agent.tesu"`)
			return r
		}, "unknown_key"},
		{"B.2.6 changed content-type", rfc, func() *http.Request {
			r := v.B26Request()
			r.Header.Set("Content-Type", "application/jsom")
			return r
		}, "invalid_signature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Replay = middleware.NewMemoryReplayStore()
			ver, err := middleware.New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			a, err := ver.Verify(tt.req())
			if got := codeOf(err); got != tt.wantErr {
				t.Fatalf("error = %v (code %q), want code %q", err, got, tt.wantErr)
			}
			if tt.wantErr == "" && a.KeyID != key.KeyID() && a.KeyID != "test-key-ed25519" {
				t.Errorf("keyid = %q", a.KeyID)
			}
		})
	}
}
