package rules_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
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

var benchNow = time.Unix(1767225600, 0)

const benchOrigin = "https://agent-0123456789abcdef01234567.agentid.example"

// neverSeen is a ReplayStore that has seen nothing, so one signed request
// can be sent b.N times.
type neverSeen struct{}

func (neverSeen) Seen(context.Context, string, time.Time) (bool, error) { return false, nil }

// nullWriter keeps nothing, so the benchmark measures the handler.
type nullWriter struct {
	h    http.Header
	code int
}

func (w *nullWriter) Header() http.Header         { return w.h }
func (w *nullWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nullWriter) WriteHeader(code int)        { w.code = code }

// median returns the median of ds (which it sorts).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// BenchmarkProxyRules measures the forward-auth proxy handler answering a
// verified request: "off" is the plain handler (verifier in Required
// mode), "on" the same handler behind a gate with a 10,000-identity allow
// list, a 1,000-entry deny list, three routes and per-agent and
// per-address limits (in memory). The difference is the rules' cost.
func BenchmarkProxyRules(b *testing.B) {
	key := signertest.Key(0x61)
	keys := middleware.NewStaticKeys()
	keys.Add(benchOrigin, key.Public)
	signed := httptest.NewRequest(http.MethodGet, "https://api.example.com/v1/things", nil)
	if err := signer.Sign(signed, key, signer.Options{SignatureAgent: benchOrigin, Nonce: "bench-nonce", Now: func() time.Time { return benchNow }}); err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "http://auth.internal/", nil)
	req.RemoteAddr = "127.0.0.1:40000" // the front proxy, on loopback
	for k, v := range signed.Header {
		req.Header[k] = v
	}
	req.Header.Set("X-Forwarded-Method", "GET")
	req.Header.Set("X-Forwarded-Proto", "https")
	req.Header.Set("X-Forwarded-Host", "api.example.com")
	req.Header.Set("X-Forwarded-Uri", "/v1/things")

	build := func(b *testing.B, withRules bool) http.Handler {
		vc := middleware.Config{Keys: keys, Replay: neverSeen{}, Now: func() time.Time { return benchNow }, Authorities: []string{"api.example.com"}}
		var g *rules.Gate
		if withRules {
			g = benchGate(b)
			vc.Mode, vc.OnResult = middleware.Observe, g.OnResult
		}
		v, err := middleware.New(vc)
		if err != nil {
			b.Fatal(err)
		}
		h, err := proxy.New(proxy.Config{Verifier: v, ForwardAuth: proxy.FrontTraefik})
		if err != nil {
			b.Fatal(err)
		}
		if g == nil {
			return h
		}
		g.SetRefuse(v.WriteError)
		return g.Wrap(h)
	}
	b.Run("interleaved", func(b *testing.B) {
		// Both handlers alternate request by request, so the machine's
		// load affects them alike; the metrics are the median time of
		// each (robust to the pauses of a shared machine) and their
		// difference.
		off, on := build(b, false), build(b, true)
		w := &nullWriter{h: http.Header{}}
		tOff := make([]time.Duration, 0, b.N/2+1)
		tOn := make([]time.Duration, 0, b.N/2+1)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			clear(w.h)
			w.code = 0
			h, acc := off, &tOff
			if i%2 == 1 {
				h, acc = on, &tOn
			}
			start := time.Now()
			h.ServeHTTP(w, req)
			*acc = append(*acc, time.Since(start))
			if w.code != http.StatusOK {
				b.Fatalf("status %d", w.code)
			}
		}
		b.StopTimer()
		mOff, mOn := median(tOff), median(tOn)
		b.ReportMetric(float64(mOff.Nanoseconds()), "off-median-ns")
		b.ReportMetric(float64(mOn.Nanoseconds()), "on-median-ns")
		b.ReportMetric(float64((mOn - mOff).Nanoseconds()), "overhead-ns")
	})
	for _, tc := range []struct {
		name  string
		rules bool
	}{{"off", false}, {"on", true}} {
		b.Run(tc.name, func(b *testing.B) {
			h := build(b, tc.rules)
			w := &nullWriter{h: http.Header{}}
			h.ServeHTTP(w, req)
			if w.code != http.StatusOK || w.h.Get("X-Agent-Verdict") != "verified" {
				b.Fatalf("status %d, verdict %q; want 200 verified", w.code, w.h.Get("X-Agent-Verdict"))
			}
			if tc.rules && w.h.Get("RateLimit") == "" {
				b.Fatal("no RateLimit header: the limits are not on")
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				clear(w.h)
				w.code = 0
				h.ServeHTTP(w, req)
			}
			if w.code != http.StatusOK {
				b.Fatalf("status %d", w.code)
			}
		})
	}
}

// benchGate is the gate the benchmarks measure: an allow-list of 10,001
// identities and a host pattern, a deny-list of 1,000, a per-agent and a
// per-address limit, and three routes.
func benchGate(b *testing.B) *rules.Gate {
	b.Helper()
	allow := policy.List{Hosts: []string{"*.partner.example"}}
	for i := range 10_000 {
		allow.Identities = append(allow.Identities, fmt.Sprintf("https://agent-%024x.agentid.example", i))
	}
	allow.Identities = append(allow.Identities, benchOrigin)
	var deny policy.List
	for i := range 1_000 {
		deny.Identities = append(deny.Identities, fmt.Sprintf("https://bad-%d.example", i))
	}
	lim, err := agentlimit.New(agentlimit.Config{
		Agent:   agentlimit.Limit{Quota: 1 << 30, Window: time.Hour},
		Address: agentlimit.Limit{Quota: 100, Window: time.Minute},
	})
	if err != nil {
		b.Fatal(err)
	}
	g, err := rules.New(rules.Config{Allow: allow, Deny: deny, Limiter: lim, Routes: []rules.Route{
		{Prefix: "/public/", Mode: middleware.Optional}, {Prefix: "/v1/", Mode: middleware.Required}, {Prefix: "/debug/", Mode: middleware.Observe},
	}})
	if err != nil {
		b.Fatal(err)
	}
	return g
}
