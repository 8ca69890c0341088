package keyfetch_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestAttackRespelledKeySetsCannotEvictOthers: one verified agent names
// its own key set under many URLs — a new query, a new path, a name it
// mints under its own domain — each of which verifies (every one serves
// its key). Before MaxSetsPerSite every one was admitted to the key cache,
// so MaxOrigins of them pushed out a victim's set, and with the victim's
// directory briefly down the victim went from 200 to 503. Now the
// attacker's sets are charged to its one site, at most MaxSetsPerSite are
// admitted, and the rest churn on probation only: the victim keeps being
// served from the cache while its directory is down. The control (the
// victim's directory down after its set was really evicted) shows the
// test can fail.
func TestAttackRespelledKeySetsCannotEvictOthers(t *testing.T) {
	t.Parallel()
	victim, attacker := signertest.Key(0x51), signertest.Key(0x52)
	serve := func(k signer.PrivateKey, down *atomic.Bool, fetches *atomic.Int64) *httptest.Server {
		doc, _ := json.Marshal(map[string]any{"keys": []signer.JWK{k.Public.JWK}})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fetches.Add(1)
			if down != nil && down.Load() {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", signer.DirectoryMediaType)
			w.Header().Set("Cache-Control", "max-age=60")
			w.Write(doc)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	var victimDown atomic.Bool
	var victimFetches, attackerFetches atomic.Int64
	vsrv, asrv := serve(victim, &victimDown, &victimFetches), serve(attacker, nil, &attackerFetches)
	port := func(s *httptest.Server) string { u, _ := url.Parse(s.URL); return u.Port() }
	victimAgent := "http://victim.localhost:" + port(vsrv)
	aport := port(asrv)
	// Respellings an agent owning attacker.localhost (and every name under
	// it) can make, all of one key.
	respell := func(i int) string {
		switch i % 4 {
		case 0:
			return fmt.Sprintf("http://attacker.localhost:%s/?n=%d", aport, i)
		case 1:
			return fmt.Sprintf("http://attacker.localhost:%s/keys/%d.json", aport, i)
		case 2:
			return fmt.Sprintf("http://a%d.attacker.localhost:%s", i, aport)
		}
		return fmt.Sprintf("http://x.a%d.attacker.localhost:%s/k?%d", i, aport, i)
	}
	const maxOrigins = 200 // the cache under attack; MaxProbation defaults to it
	for _, tc := range []struct {
		name      string
		sets      int // respelled key sets the attacker names
		maxOrigin int
		perSite   int // MaxSetsPerSite (0: the default)
		want      int // the victim's status while its directory is down
	}{
		{"respellings", 3 * maxOrigins, maxOrigins, 0, http.StatusOK},
		{"control: a cache of one set, the victim's evicted by the attacker's first", 1, 1, -1, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			victimDown.Store(false)
			f := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"*.localhost:*"}, AllowHTTP: true, AllowPrivateNetworks: true,
				MaxOrigins: tc.maxOrigin, MaxSetsPerSite: tc.perSite})
			h := mustNew(t, middleware.Config{Keys: f, Authorities: []string{"api.example"}}).Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			send := func(key signer.PrivateKey, agent string) int {
				req := httptest.NewRequest(http.MethodGet, "http://api.example/data", nil)
				if err := signer.Sign(req, key, signer.Options{SignatureAgent: agent}); err != nil {
					t.Fatal(err)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec.Code
			}
			if code := send(victim, victimAgent); code != http.StatusOK {
				t.Fatalf("the victim's first request: %d, want 200", code)
			}
			before := attackerFetches.Load()
			for i := range tc.sets {
				if code := send(attacker, respell(i)); code != http.StatusOK {
					t.Fatalf("the attacker's request %d (%s): %d, want 200 (every respelling verifies)", i, respell(i), code)
				}
			}
			if n := attackerFetches.Load() - before; n != int64(tc.sets) {
				t.Fatalf("the attacker's %d key sets were fetched %d times, want %d", tc.sets, n, tc.sets)
			}
			victimDown.Store(true)
			vf := victimFetches.Load()
			if code := send(victim, victimAgent); code != tc.want {
				t.Errorf("the victim's request with its directory down: %d, want %d", code, tc.want)
			}
			if tc.want == http.StatusOK && victimFetches.Load() != vf {
				t.Errorf("the victim's key set was fetched again: it left the cache")
			}
		})
	}
}
