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
)

// BenchmarkSeen records distinct keys from 64 concurrent callers (as 64
// busy connections of a server would) and reports keys/s and the mean
// number of keys per statement.
func BenchmarkSeen(b *testing.B) {
	if os.Getenv(dbtest.EnvVar) == "" {
		b.Skip(dbtest.EnvVar + " is not set")
	}
	db := dbtest.Open(b, dbtest.PostgresURL(b))
	s := migratedStore(b, db)
	ctx := context.Background()
	expiry := time.Now().Add(time.Minute)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	stmts0 := s.Statements()
	start := time.Now()
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
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
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "keys/s")
	b.ReportMetric(float64(b.N)/float64(max(s.Statements()-stmts0, 1)), "keys/stmt")
}
