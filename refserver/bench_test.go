package refserver_test

import (
	"bytes"
	"crypto/ed25519"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// benchEnv is a migrated SQLite server with one registered agent.
func benchEnv(b *testing.B) (*testEnv, string, signer.PrivateKey) {
	b.Helper()
	e := newTestEnv(b, dbtest.Open(b, "sqlite::memory:"))
	key := signertest.Key(91)
	return e, e.register(key), key
}

// benchServe answers req with e's handler in a loop; every answer must be
// 200.
func benchServe(b *testing.B, e *testEnv, req *http.Request) {
	h := e.srv.Handler()
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}

// BenchmarkHealth is the baseline: routing, logging and JSON, no database.
func BenchmarkHealth(b *testing.B) {
	e, _, _ := benchEnv(b)
	benchServe(b, e, httptest.NewRequest(http.MethodGet, e.base+"/", nil))
}

// BenchmarkDirectory is one key directory, rendered or from the cache.
func BenchmarkDirectory(b *testing.B) {
	e, uid, _ := benchEnv(b)
	benchServe(b, e, httptest.NewRequest(http.MethodGet, e.directoryURL(uid), nil))
}

// BenchmarkDirectorySigned is BenchmarkDirectory for an agent that handed
// over a directory signature: the same path plus its headers.
func BenchmarkDirectorySigned(b *testing.B) {
	e, uid, key := benchEnv(b)
	now := time.Now()
	sig := e.signDir(uid, key, []signer.JWK{key.Public.JWK}, now, time.Hour)
	if r := e.send(e.refreshReq(uid, key, []dirSig{sig}, now)); r.status != http.StatusOK {
		b.Fatalf("refresh: %d %s", r.status, r.body)
	}
	benchServe(b, e, httptest.NewRequest(http.MethodGet, e.directoryURL(uid), nil))
}

// BenchmarkWhoami is a signed request verified with the database key source
// (cached), answered through the whole handler (routing, logging, JSON).
// Requests are signed before the timer, each with its own nonce; compare
// with BenchmarkEd25519Verify, the floor.
func BenchmarkWhoami(b *testing.B) {
	e, uid, key := benchEnv(b)
	h := e.srv.Handler()
	reqs := make([]*http.Request, b.N)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, e.base+"/whoami", nil)
		if err := signer.Sign(reqs[i], key, signer.Options{SignatureAgent: e.origin(uid)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, reqs[i])
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code, rec.Body.String())
		}
	}
}

// BenchmarkEd25519Verify is the baseline of BenchmarkWhoami: one bare
// ed25519.Verify of a signature base of the same size.
func BenchmarkEd25519Verify(b *testing.B) {
	key := signertest.Key(92)
	msg := bytes.Repeat([]byte("x"), 250)
	sig := ed25519.Sign(key.Key, msg)
	b.ReportAllocs()
	for b.Loop() {
		if !ed25519.Verify(key.Public.Key, msg, sig) {
			b.Fatal("verify failed")
		}
	}
}
