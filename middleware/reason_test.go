package middleware_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestErrorBodyReason: a refusal caused by keyfetch carries its reason in
// the JSON error body; other refusals carry none.
func TestErrorBodyReason(t *testing.T) {
	t.Parallel()
	key := signertest.Key(7)
	tests := []struct {
		name       string
		keys       middleware.KeySource
		agent      string
		wantCode   string
		wantReason string
	}{
		{"untrusted host", keyfetch.New(keyfetch.Config{TrustedHosts: []string{"*.agents.example"}}), "https://bot.example", "untrusted_signature_agent", "untrusted_host"},
		{"plain http", keyfetch.New(keyfetch.Config{TrustedHosts: []string{"*.agents.example"}}), "http://a.agents.example", "untrusted_signature_agent", "http_refused"},
		{"private address", keyfetch.New(keyfetch.Config{TrustedHosts: []string{"127.0.0.1:*"}, AllowHTTP: true}), "http://127.0.0.1:1", "key_fetch_failed", "private_address"},
		{"not from keyfetch", middleware.NewStaticKeys(), "https://bot.example", "unknown_key", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := mustNew(t, middleware.Config{Keys: tt.keys, Authorities: []string{"api.example"}}).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			req := httptest.NewRequest(http.MethodGet, "http://api.example/x", nil)
			if err := signer.Sign(req, key, signer.Options{SignatureAgent: tt.agent}); err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			var body struct {
				Error map[string]any `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			reason, has := body.Error["reason"]
			if body.Error["code"] != tt.wantCode || (tt.wantReason == "") == has || (has && reason != tt.wantReason) {
				t.Errorf("error = %v, want code %q and reason %q", body.Error, tt.wantCode, tt.wantReason)
			}
		})
	}
}
