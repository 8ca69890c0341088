package keyfetch_test

import (
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

var _ middleware.KeySource = (*keyfetch.Fetcher)(nil)

// TestWithMiddleware signs requests with signer.Sign and verifies them with
// the middleware resolving keys through a Fetcher.
func TestWithMiddleware(t *testing.T) {
	t.Parallel()
	seed := make([]byte, ed25519.SeedSize)
	seed[0] = 7
	agentKey := signer.NewPrivateKey(ed25519.NewKeyFromSeed(seed))
	other := signer.NewPrivateKey(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))

	tests := []struct {
		name        string
		trusted     []string
		dir         http.HandlerFunc
		key         signer.PrivateKey
		wantStatus  int
		wantCode    string
		wantAccepts bool
	}{
		{name: "published key verifies", trusted: []string{"127.0.0.1:*"}, dir: serveKeys("max-age=60", "", agentKey.Public), key: agentKey, wantStatus: http.StatusOK, wantAccepts: true},
		{name: "unpublished key", trusted: []string{"127.0.0.1:*"}, dir: serveKeys("max-age=60", "", agentKey.Public), key: other, wantStatus: http.StatusUnauthorized, wantCode: "unknown_key", wantAccepts: true},
		{name: "untrusted agent, no connection", trusted: []string{"*.agentid.example"}, dir: serveKeys("max-age=60", "", agentKey.Public), key: agentKey, wantStatus: http.StatusUnauthorized, wantCode: "untrusted_signature_agent"},
		{name: "directory down", trusted: []string{"127.0.0.1:*"}, dir: serveStatus(http.StatusBadGateway), key: agentKey, wantStatus: http.StatusServiceUnavailable, wantCode: "key_fetch_failed", wantAccepts: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := newDirServer(t, tt.dir)
			keys := keyfetch.New(keyfetch.Config{TrustedHosts: tt.trusted, AllowHTTP: true, AllowPrivateNetworks: true})
			var got middleware.Agent
			h := middleware.New(middleware.Config{Keys: keys, Authorities: []string{"api.example"}})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got, _ = middleware.AgentFrom(r.Context())
			}))
			req := httptest.NewRequest(http.MethodGet, "http://api.example/whoami", nil)
			if err := signer.Sign(req, tt.key, signer.Options{SignatureAgent: dir.URL}); err != nil {
				t.Fatalf("Sign: %v", err)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.wantStatus {
				t.Fatalf("status = %d (%s), want %d", rec.Code, rec.Body, tt.wantStatus)
			}
			if tt.wantCode != "" {
				var body struct {
					Error struct{ Code string } `json:"error"`
				}
				_ = json.Unmarshal(rec.Body.Bytes(), &body)
				if body.Error.Code != tt.wantCode {
					t.Errorf("error code = %q, want %q", body.Error.Code, tt.wantCode)
				}
			} else if got.KeyID != tt.key.KeyID() || got.SignatureAgent != dir.URL {
				t.Errorf("agent = {KeyID %q, SignatureAgent %q}, want {%q, %q}", got.KeyID, got.SignatureAgent, tt.key.KeyID(), dir.URL)
			}
			if got := dir.accepts.Load() > 0; got != tt.wantAccepts {
				t.Errorf("directory contacted = %v, want %v", got, tt.wantAccepts)
			}
		})
	}
}
