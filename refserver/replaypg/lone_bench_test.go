//go:build unix

package replaypg_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer/signertest/benchtest"
)

// BenchmarkSeenLone records distinct keys one call at a time (a server
// with one request in flight) and reports the Go CPU of this process per
// call (cpu-µs/op, from getrusage: thread wakeups and goroutine switches
// count, the database's CPU does not).
func BenchmarkSeenLone(b *testing.B) {
	if os.Getenv(dbtest.EnvVar) == "" {
		b.Skip(dbtest.EnvVar + " is not set")
	}
	db := dbtest.Open(b, dbtest.PostgresURL(b))
	s := migratedStore(b, db)
	ctx := context.Background()
	expiry := time.Now().Add(time.Minute)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := benchtest.ProcessCPU()
	for i := range b.N {
		seen, err := s.Seen(ctx, fmt.Sprint("lone ", i), expiry)
		if err != nil || seen {
			b.Fatalf("Seen = %v, %v; want false, nil", seen, err)
		}
	}
	b.ReportMetric(float64((benchtest.ProcessCPU()-cpu).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
}
