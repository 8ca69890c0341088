package replaypg_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/replaypg"
	"github.com/agentid/agentid/signer/signertest/benchtest"
)

// BenchmarkSeen records distinct keys from 64 concurrent callers (as 64
// busy connections of a server would) and reports keys/s, the mean number
// of keys per statement and the Go CPU of this process per key
// (cpu-µs/op, from getrusage where available; the database's CPU does not
// count).
func BenchmarkSeen(b *testing.B) { benchSeen(b, false) }

// BenchmarkSeenGorm is BenchmarkSeen with the statements sent through
// gorm and database/sql (the path for a PostgreSQL pool that is not
// pgx's, and SQLite's), for a comparison in one run.
func BenchmarkSeenGorm(b *testing.B) { benchSeen(b, true) }

func benchSeen(b *testing.B, viaGorm bool) {
	if os.Getenv(dbtest.EnvVar) == "" {
		b.Skip(dbtest.EnvVar + " is not set")
	}
	db := dbtest.Open(b, dbtest.PostgresURL(b))
	s := migratedStore(b, db)
	if viaGorm {
		s.DisablePgx()
	}
	ctx := context.Background()
	expiry := time.Now().Add(time.Minute)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	stmts := s.Statements()
	cpu := benchtest.ProcessCPU()
	start := time.Now()
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seenLoop(b, s, ctx, &next, expiry)
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "keys/s")
	b.ReportMetric(float64(b.N)/float64(max(s.Statements()-stmts, 1)), "keys/stmt")
	b.ReportMetric(float64((benchtest.ProcessCPU()-cpu).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
}

// seenLoop records distinct keys until b.N have been taken from next.
func seenLoop(b *testing.B, s *replaypg.Store, ctx context.Context, next *atomic.Int64, expiry time.Time) {
	for {
		i := next.Add(1)
		if i > int64(b.N) {
			return
		}
		seen, err := s.Seen(ctx, fmt.Sprint("bench ", i), expiry)
		if err != nil || seen {
			b.Errorf("Seen = %v, %v; want false, nil", seen, err)
			return
		}
	}
}
