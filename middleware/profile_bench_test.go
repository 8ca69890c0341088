package middleware_test

import (
	"crypto/ed25519"
	"net/http"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest/benchtest"
)

// BenchmarkVerifyProfile is BenchmarkVerify's default case (agentid's
// protocol-01 headers) in each profile: the strict profile resolves
// Signature-Agent per request, the deployed one through its cache. Compare
// both with BenchmarkEd25519Verify from the same run.
func BenchmarkVerifyProfile(b *testing.B) {
	key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(benchSeed))
	for _, p := range []middleware.Profile{middleware.ProfileDeployed, middleware.ProfileStrict01} {
		b.Run(p.String(), func(b *testing.B) {
			keys := middleware.NewStaticKeys()
			keys.Add(benchOrigin, key.Public)
			keys.Add(benchOrigin+"/", key.Public)
			h := mustNew(b, middleware.Config{Authorities: testAuthorities, Keys: keys, Profile: p, Now: func() time.Time { return benchNow }}).Middleware(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if _, ok := middleware.AgentFrom(r.Context()); !ok {
						w.WriteHeader(http.StatusInternalServerError)
					}
				}))
			reqs := benchRequests(b, b.N, key, nil)
			w := &nullWriter{h: http.Header{}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				w.code = 0
				h.ServeHTTP(w, reqs[i])
				if w.code != 0 {
					b.Fatalf("status = %d, want 200", w.code)
				}
			}
		})
	}
}

// BenchmarkVerifyProfileRatio times the strict profile against the deployed
// one on the same default headers, interleaved (benchtest.PairedPrepared),
// so x-deployed is the strict profile's cost in units of the deployed
// profile's on a loaded machine. Both verifiers see each request once.
func BenchmarkVerifyProfileRatio(b *testing.B) {
	key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(benchSeed))
	handler := func(p middleware.Profile) http.Handler {
		keys := middleware.NewStaticKeys()
		keys.Add(benchOrigin, key.Public)
		keys.Add(benchOrigin+"/", key.Public)
		return mustNew(b, middleware.Config{Authorities: testAuthorities, Keys: keys, Profile: p, Now: func() time.Time { return benchNow }}).Middleware(
			http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	}
	deployed, strict := handler(middleware.ProfileDeployed), handler(middleware.ProfileStrict01)
	reqs := make([]*http.Request, ratioBlock)
	w := &nullWriter{h: http.Header{}}
	benchtest.PairedPrepared(b, ratioBlock, "deployed", "strict-01",
		func(start, end int) {
			for i := start; i < end; i++ {
				reqs[i-start] = benchRequest(b, i, b.N, key, nil)
			}
		},
		func(i int) {
			deployed.ServeHTTP(w, reqs[i%ratioBlock])
			if w.code != 0 {
				b.Fatalf("deployed: status = %d", w.code)
			}
		},
		func(i int) {
			strict.ServeHTTP(w, reqs[i%ratioBlock])
			if w.code != 0 {
				b.Fatalf("strict-01: status = %d", w.code)
			}
		})
}
