package middleware_test

import (
	"crypto/ed25519"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/agentid/agentid/signer/signertest/benchtest"
)

// benchNow is the fixed clock of the benchmarks.
var benchNow = time.Unix(1767225600, 0) // 2026-01-01T00:00:00Z

// benchOrigin is the signature agent of the benchmark requests.
const benchOrigin = "https://agent-0123456789abcdef01234567.agentid.example"

// nullWriter is a ResponseWriter that keeps nothing, so the benchmarks
// measure the middleware rather than a recorder.
type nullWriter struct {
	h    http.Header
	code int
}

func (w *nullWriter) Header() http.Header         { return w.h }
func (w *nullWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nullWriter) WriteHeader(code int)        { w.code = code }

// benchRequests signs n requests, each with its own nonce, outside the timer.
func benchRequests(b *testing.B, n int, key signer.PrivateKey, components []string) []*http.Request {
	b.Helper()
	reqs := make([]*http.Request, n)
	for i := range reqs {
		reqs[i] = benchRequest(b, i, n, key, components)
	}
	return reqs
}

// benchRequest signs request i of n (its nonce names both).
func benchRequest(b testing.TB, i, n int, key signer.PrivateKey, components []string) *http.Request {
	var r *http.Request
	if components != nil {
		r = httptest.NewRequest(http.MethodPost, "https://api.example.com/v1/things", strings.NewReader(`{"hello":"world"}`))
	} else {
		r = httptest.NewRequest(http.MethodGet, "https://api.example.com/v1/things", nil)
	}
	err := signer.Sign(r, key, signer.Options{
		Components:     components,
		SignatureAgent: benchOrigin,
		Nonce:          fmt.Sprintf("bench-nonce-%012d-%d", i, n),
		Now:            func() time.Time { return benchNow },
	})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkEd25519Verify is the baseline: one bare ed25519.Verify over a
// typical default-profile signature base.
func BenchmarkEd25519Verify(b *testing.B) {
	key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(benchSeed))
	r := benchRequests(b, 1, key, nil)[0]
	parsed, base := signertest.FirstBase(b, r)
	sig := parsed.Value
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if !ed25519.Verify(key.Public.Key, base, sig) {
			b.Fatal("does not verify")
		}
	}
}

// benchCases are the signature shapes BenchmarkVerify measures.
var benchCases = []struct {
	name       string
	components []string
}{
	{"default", nil},
	{"five-components", []string{"@method", "@authority", "@path", "content-digest", `"signature-agent";key="sig1"`}},
}

var benchSeed = []byte("agentid benchmark seed 32 bytes!")

// BenchmarkVerify is the full middleware path on a key cache hit: parse,
// policy, key lookup (StaticKeys), thumbprint check, base, Ed25519,
// Content-Digest when covered, and recording the nonce in a real
// MemoryReplayStore. Every iteration presents a request with a fresh nonce;
// the requests are signed before the timer starts.
func BenchmarkVerify(b *testing.B) {
	key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(benchSeed))
	for _, bc := range benchCases {
		b.Run(bc.name, func(b *testing.B) {
			keys := middleware.NewStaticKeys()
			keys.Add(benchOrigin, key.Public)
			store := middleware.NewMemoryReplayStore()
			h := mustNew(b, middleware.Config{Authorities: testAuthorities, Keys: keys, Replay: store, Now: func() time.Time { return benchNow }}).Middleware(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if _, ok := middleware.AgentFrom(r.Context()); !ok {
						w.WriteHeader(http.StatusInternalServerError)
					}
				}))
			reqs := benchRequests(b, b.N, key, bc.components)
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
			b.StopTimer()
			if got := middleware.ReplayLen(store); got != b.N {
				b.Fatalf("replay store holds %d nonces, want %d", got, b.N)
			}
		})
	}
}

// BenchmarkVerifyRatio measures the same middleware path as BenchmarkVerify
// against bare ed25519.Verify calls of the standard library over a
// request's base, interleaved in blocks of ratioBlock iterations
// (benchtest.PairedPrepared): x-ed25519 is the cost of one verified
// request in units of one bare Ed25519 check. Each block's requests are
// signed just before it, outside the timed sections, so that they are as
// fresh in the caches as a request a server has just read; every request
// has its own nonce, and the replay store records each. ns/op includes the
// signing; BenchmarkVerify reports the path's allocations.
func BenchmarkVerifyRatio(b *testing.B) {
	key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(benchSeed))
	for _, bc := range benchCases {
		b.Run(bc.name, func(b *testing.B) {
			keys := middleware.NewStaticKeys()
			keys.Add(benchOrigin, key.Public)
			h := mustNew(b, middleware.Config{Authorities: testAuthorities, Keys: keys, Now: func() time.Time { return benchNow }}).Middleware(
				http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			first, base := signertest.FirstBase(b, benchRequest(b, -1, b.N, key, bc.components))
			reqs := make([]*http.Request, ratioBlock)
			w := &nullWriter{h: http.Header{}}
			benchtest.PairedPrepared(b, ratioBlock, "ed25519", "verify",
				func(start, end int) {
					for i := start; i < end; i++ {
						reqs[i-start] = benchRequest(b, i, b.N, key, bc.components)
					}
				},
				func(int) {
					if !ed25519.Verify(key.Public.Key, base, first.Value) {
						b.Fatal("does not verify")
					}
				},
				func(i int) {
					h.ServeHTTP(w, reqs[i%ratioBlock])
					if w.code != 0 {
						b.Fatalf("status = %d", w.code)
					}
				})
		})
	}
}

// ratioBlock is the number of iterations of each side BenchmarkVerifyRatio
// runs in turn.
const ratioBlock = 64
