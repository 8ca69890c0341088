//go:build unix

package replaypg_test

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
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
	cpu := processCPU()
	for i := range b.N {
		seen, err := s.Seen(ctx, fmt.Sprint("lone ", i), expiry)
		if err != nil || seen {
			b.Fatalf("Seen = %v, %v; want false, nil", seen, err)
		}
	}
	b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
}

// processCPU returns the user and system CPU time used by this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
