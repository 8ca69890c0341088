package refserver_test

import (
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer"
)

// BenchmarkRegister is one registration (POST /agents, signed by the new
// key) through the whole handler, one at a time, on each database: the
// write path the audit trail and the outbox add to (an audit row, an
// outbox row and the change log's lock in the same transaction).
// Requests are signed before the timer. Compare with BenchmarkWhoami.
func BenchmarkRegister(b *testing.B) {
	for _, be := range dbtest.Backends() {
		b.Run(be.Name, func(b *testing.B) {
			e := newTestEnv(b, dbtest.Open(b, be.URL(b)))
			h := e.srv.Handler()
			reqs := make([]*http.Request, b.N)
			for i := range reqs {
				key, err := signer.GenerateKey(rand.Reader)
				if err != nil {
					b.Fatal(err)
				}
				reqs[i] = e.registerReq(key)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, reqs[i])
				if rec.Code != http.StatusCreated {
					b.Fatal(rec.Code, rec.Body.String())
				}
			}
		})
	}
}
