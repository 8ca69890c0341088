package rules_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/middleware/rules"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// BenchmarkProxyDecide compares, request by request on one forward-auth
// request, the proxy handler without rules ("off", the baseline), with
// the rules around it (Gate.Wrap, "wrap") and with the rules as its Decide
// hook (Gate.Apply, "apply", what idcli proxy runs): a 10,000-identity
// allow list, 1,000 deny entries, three routes and in-memory limits. The
// metrics are each variant's median and the medians' differences.
func BenchmarkProxyDecide(b *testing.B) {
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

	build := func(b *testing.B, variant string) http.Handler {
		vc := middleware.Config{Keys: keys, Replay: neverSeen{}, Now: func() time.Time { return benchNow }, Authorities: []string{"api.example.com"}}
		var g *rules.Gate
		if variant != "off" {
			g = benchGate(b)
			vc.Mode = middleware.Observe
			if variant == "wrap" {
				vc.OnResult = g.OnResult
			}
		}
		v, err := middleware.New(vc)
		if err != nil {
			b.Fatal(err)
		}
		pc := proxy.Config{Verifier: v, ForwardAuth: proxy.FrontTraefik}
		if g != nil {
			g.SetRefuse(v.WriteError)
			if variant == "apply" {
				pc.Decide = g.Apply
			}
		}
		h, err := proxy.New(pc)
		if err != nil {
			b.Fatal(err)
		}
		if variant == "wrap" {
			return g.Wrap(h)
		}
		return h
	}
	variants := []string{"off", "wrap", "apply"}
	hs := make([]http.Handler, len(variants))
	times := make([][]time.Duration, len(variants))
	w := &nullWriter{h: http.Header{}}
	for i, name := range variants {
		hs[i] = build(b, name)
		hs[i].ServeHTTP(w, req)
		if w.code != http.StatusOK || (name != "off" && w.h.Get("RateLimit") == "") {
			b.Fatalf("%s: status %d, RateLimit %q; want 200 with the limits on", name, w.code, w.h.Get("RateLimit"))
		}
		clear(w.h)
		w.code = 0
		times[i] = make([]time.Duration, 0, b.N/len(variants)+1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		clear(w.h)
		w.code = 0
		k := i % len(variants)
		start := time.Now()
		hs[k].ServeHTTP(w, req)
		times[k] = append(times[k], time.Since(start))
		if w.code != http.StatusOK {
			b.Fatalf("%s: status %d", variants[k], w.code)
		}
	}
	b.StopTimer()
	m := make([]time.Duration, len(variants))
	for i := range variants {
		m[i] = median(times[i])
		b.ReportMetric(float64(m[i].Nanoseconds()), variants[i]+"-median-ns")
	}
	b.ReportMetric(float64((m[1] - m[0]).Nanoseconds()), "wrap-overhead-ns")
	b.ReportMetric(float64((m[2] - m[0]).Nanoseconds()), "apply-overhead-ns")
}
