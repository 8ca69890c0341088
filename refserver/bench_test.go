package refserver_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer"
)

// benchEnv is a migrated SQLite server with one registered agent.
func benchEnv(b *testing.B) (*testEnv, string, signer.PrivateKey) {
	b.Helper()
	e := newTestEnv(b, dbtest.Open(b, "sqlite::memory:"))
	key := testKey(91)
	return e, e.register(key), key
}

// BenchmarkHealth is the baseline: routing, logging and JSON, no database.
func BenchmarkHealth(b *testing.B) {
	e, _, _ := benchEnv(b)
	h := e.srv.Handler()
	req := httptest.NewRequest(http.MethodGet, e.base+"/", nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}

// BenchmarkDirectory is one key directory read from the database.
func BenchmarkDirectory(b *testing.B) {
	e, uid, _ := benchEnv(b)
	h := e.srv.Handler()
	req := httptest.NewRequest(http.MethodGet, e.directoryURL(uid), nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}

// BenchmarkWhoami is a signed request verified with the database key source
// (signing happens outside the timer).
func BenchmarkWhoami(b *testing.B) {
	e, uid, key := benchEnv(b)
	h := e.srv.Handler()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		req := httptest.NewRequest(http.MethodGet, e.base+"/whoami", nil)
		if err := signer.Sign(req, key, signer.Options{SignatureAgent: e.origin(uid)}); err != nil {
			b.Fatal(err)
		}
		rec := httptest.NewRecorder()
		b.StartTimer()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code, rec.Body.String())
		}
	}
}
