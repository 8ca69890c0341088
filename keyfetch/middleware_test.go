package keyfetch_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
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
			h := mustNew(t, middleware.Config{Keys: keys, Authorities: []string{"api.example"}}).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

// hideVerified is the Fetcher as a KeySource that is not told which key
// sets verified (no middleware.VerifiedReporter): the control of
// TestAdmissionThroughMiddleware.
type hideVerified struct{ f *keyfetch.Fetcher }

func (h hideVerified) Key(ctx context.Context, set signer.KeySet, keyID string) (signer.PublicKey, error) {
	return h.f.Key(ctx, set, keyID)
}
func (h hideVerified) KeyCached(set signer.KeySet, keyID string) bool {
	return h.f.KeyCached(set, keyID)
}

// TestAdmissionThroughMiddleware: an agent's request verifies through the
// middleware with a Fetcher against a loopback key-set server; then
// requests name 10,000 other key sets on the same trusted host (each
// fetched, none verifying: their keys never signed); the agent's next
// request verifies from the cache, with no refetch of its key set. The
// middleware reports the verification to the Fetcher, which admits the key
// set where key sets on probation cannot evict it. The control, a Fetcher
// the middleware cannot report to (with 1,000 key sets filling a cache of
// 1,000), refetches.
func TestAdmissionThroughMiddleware(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 key sets through the middleware: skipped with -short")
	}
	t.Parallel()
	agentKey := signertest.Key(0x41)
	attacker := signertest.Key(0x42)
	decoy, _ := json.Marshal(map[string]any{"keys": []signer.JWK{signertest.Key(0x43).Public.JWK}})
	agentDir, _ := json.Marshal(map[string]any{"keys": []signer.JWK{agentKey.Public.JWK}})
	var mu sync.Mutex
	fetches := map[string]int{} // by path
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fetches[r.URL.Path]++
		mu.Unlock()
		w.Header().Set("Content-Type", signer.DirectoryMediaType)
		w.Header().Set("Cache-Control", "max-age=3600")
		if r.URL.Path == signer.DirectoryPath {
			w.Write(agentDir)
			return
		}
		w.Write(decoy)
	}))
	t.Cleanup(srv.Close)
	count := func(prefix string) (n int) {
		mu.Lock()
		defer mu.Unlock()
		for p, c := range fetches {
			if strings.HasPrefix(p, prefix) {
				n += c
			}
		}
		return n
	}
	// The control keeps the flow and shrinks the cache (and the number of
	// key sets with it), to stay cheap under the race detector.
	for _, tc := range []struct {
		name       string
		report     bool
		sets       int
		maxOrigins int // MaxProbation defaults to it
		refetch    int
	}{
		{"verified key sets are admitted", true, 10000, 0, 0},
		{"control: no report, evicted", false, 1000, 1000, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.maxOrigins == 0 && keyfetch.DefaultMaxOrigins > tc.sets {
				t.Fatalf("DefaultMaxOrigins %d: %d key sets would not fill probation", keyfetch.DefaultMaxOrigins, tc.sets)
			}
			prefix := fmt.Sprintf("/%v/", tc.report)
			f := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"127.0.0.1:*"}, AllowHTTP: true, AllowPrivateNetworks: true, MaxOrigins: tc.maxOrigins})
			var keys middleware.KeySource = f
			if !tc.report {
				keys = hideVerified{f}
			}
			h := mustNew(t, middleware.Config{Keys: keys, Authorities: []string{"api.example"}}).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			send := func(key signer.PrivateKey, agent string) int {
				req := httptest.NewRequest(http.MethodGet, "http://api.example/data", nil)
				if err := signer.Sign(req, key, signer.Options{SignatureAgent: agent}); err != nil {
					t.Fatal(err)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec.Code
			}
			agentFetches := count(signer.DirectoryPath)
			if code := send(agentKey, srv.URL); code != http.StatusOK {
				t.Fatalf("the agent's first request: %d, want 200", code)
			}
			for i := range tc.sets {
				if code := send(attacker, fmt.Sprintf("%s%s%d", srv.URL, prefix, i)); code != http.StatusUnauthorized {
					t.Fatalf("request %d naming a new key set: %d, want 401", i, code)
				}
			}
			if n := count(prefix); n != tc.sets {
				t.Fatalf("the server got %d fetches of the %d other key sets, want %d", n, tc.sets, tc.sets)
			}
			if code := send(agentKey, srv.URL); code != http.StatusOK {
				t.Fatalf("the agent's next request: %d, want 200", code)
			}
			if got := count(signer.DirectoryPath) - agentFetches; got != 1+tc.refetch {
				t.Errorf("the agent's key set was fetched %d times, want %d", got, 1+tc.refetch)
			}
		})
	}
}

// mustNew returns middleware.New(cfg), failing tb on an error.
func mustNew(tb testing.TB, cfg middleware.Config) *middleware.Verifier {
	tb.Helper()
	v, err := middleware.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}
