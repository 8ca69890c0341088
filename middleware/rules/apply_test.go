package rules_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/middleware/policy"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/middleware/rules"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// countingMetrics is a proxy.Metrics that counts answers by route and
// status.
type countingMetrics struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *countingMetrics) ObserveRequest(route, method string, status int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n[fmt.Sprintf("%s %s %d", route, method, status)]++
}

func (m *countingMetrics) get(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[key]
}

// logLines decodes the JSON log lines written to b so far.
func logLines(t *testing.T, b *signertest.SyncBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(strings.NewReader(b.String()))
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// TestApplyProxyLogsRefusal installs Gate.Apply as the proxy's Decide hook,
// over real HTTP in both of the proxy's shapes: a denied agent and an agent
// over its limit get 403 and 429, never reach the upstream, and the
// proxy's one access-log line and its route's count record that status and
// code, not the answer the proxy would have given.
func TestApplyProxyLogsRefusal(t *testing.T) {
	good, bad := signertest.Key(0x91), signertest.Key(0x92)
	const goodAgent, badAgent = "https://good.example", "https://bad.example"
	keys := middleware.NewStaticKeys()
	keys.Add(goodAgent, good.Public)
	keys.Add(badAgent, bad.Public)
	var upstreamHits atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamHits.Add(1)
		w.Header().Set("X-Upstream", "yes")
	}))
	defer upstream.Close()
	upReq, _ := http.NewRequest("GET", upstream.URL, nil)

	for _, forwardAuth := range []bool{false, true} {
		name, route := "reverse proxy", "proxy"
		if forwardAuth {
			name, route = "forward-auth", "forward-auth"
		}
		t.Run(name, func(t *testing.T) {
			upstreamHits.Store(0)
			var refused []int
			lim, _ := agentlimit.New(agentlimit.Config{Agent: agentlimit.Limit{Quota: 1, Window: time.Hour}})
			g, err := rules.New(rules.Config{
				Deny:    policy.List{Identities: []string{badAgent}},
				Limiter: lim,
				OnRefuse: func(_ *http.Request, _ *middleware.Result, _ *middleware.Error, status int) {
					refused = append(refused, status)
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			var h http.Handler
			front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
			defer front.Close()
			v, err := middleware.New(middleware.Config{Keys: keys, Mode: middleware.Observe, Authorities: []string{front.Listener.Addr().String()}})
			if err != nil {
				t.Fatal(err)
			}
			g.SetRefuse(v.WriteError)
			var logBuf signertest.SyncBuffer
			m := &countingMetrics{n: map[string]int{}}
			cfg := proxy.Config{Verifier: v, Decide: g.Apply, Metrics: m, AccessLog: slog.New(slog.NewJSONHandler(&logBuf, nil))}
			if forwardAuth {
				cfg.ForwardAuth = proxy.FrontTraefik
			} else {
				cfg.Upstream = upReq.URL
			}
			if h, err = proxy.New(cfg); err != nil {
				t.Fatal(err)
			}
			send := func(path string, key signer.PrivateKey, agent string) *http.Response {
				t.Helper()
				r, _ := http.NewRequest("GET", front.URL+path, nil)
				if forwardAuth {
					r.Header.Set("X-Forwarded-Method", "GET")
					r.Header.Set("X-Forwarded-Proto", "http")
					r.Header.Set("X-Forwarded-Host", r.URL.Host)
					r.Header.Set("X-Forwarded-Uri", path)
				}
				if err := signer.Sign(r, key, signer.Options{SignatureAgent: agent}); err != nil {
					t.Fatal(err)
				}
				resp, err := http.DefaultClient.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp
			}
			for _, tc := range []struct {
				path   string
				key    signer.PrivateKey
				agent  string
				status int
				reason string
			}{
				{"/denied", bad, badAgent, 403, "forbidden"},
				{"/ok", good, goodAgent, 200, ""},
				{"/limited", good, goodAgent, 429, "rate_limited"},
			} {
				resp := send(tc.path, tc.key, tc.agent)
				if resp.StatusCode != tc.status {
					t.Errorf("%s: status %d, want %d", tc.path, resp.StatusCode, tc.status)
				}
				if forwardAuth && tc.status != 200 && resp.Header.Get(proxy.HeaderRefusal) == "" {
					t.Errorf("%s: forward-auth refusal without %s", tc.path, proxy.HeaderRefusal)
				}
				if tc.status == 429 && resp.Header.Get("Retry-After") == "" {
					t.Errorf("%s: 429 without Retry-After", tc.path)
				}
			}
			if !forwardAuth && upstreamHits.Load() != 1 {
				t.Errorf("the upstream saw %d requests, want 1 (refusals never leave)", upstreamHits.Load())
			}
			lines := logLines(t, &logBuf)
			if len(lines) != 3 {
				t.Fatalf("%d access-log lines, want one per request: %v", len(lines), lines)
			}
			for i, want := range []struct {
				path, reason, agent string
				status              float64
			}{{"/denied", "forbidden", badAgent, 403}, {"/ok", "", goodAgent, 200}, {"/limited", "rate_limited", goodAgent, 429}} {
				l := lines[i]
				if l["path"] != want.path || l["status"] != want.status || l["agent"] != want.agent || l["verdict"] != "verified" {
					t.Errorf("line %d = %v, want path %s status %v agent %s verdict verified", i, l, want.path, want.status, want.agent)
				}
				if got, _ := l["reason"].(string); got != want.reason {
					t.Errorf("line %d: reason %q, want %q", i, got, want.reason)
				}
				if _, ok := l["upstream_error"]; ok {
					t.Errorf("line %d carries upstream_error: %v", i, l)
				}
			}
			for _, st := range []int{200, 403, 429} {
				if got := m.get(fmt.Sprintf("%s GET %d", route, st)); got != 1 {
					t.Errorf("count of %s GET %d = %d, want 1", route, st, got)
				}
			}
			if fmt.Sprint(refused) != "[403 429]" {
				t.Errorf("OnRefuse saw %v, want [403 429]", refused)
			}
		})
	}
}
