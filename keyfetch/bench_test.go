package keyfetch_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
)

// BenchmarkKeyCacheHit measures Key for a cached key set and keyid, with the
// real clock. Compare with BenchmarkBaselineRWMutexMap, the floor for any
// concurrent cache lookup.
func BenchmarkKeyCacheHit(b *testing.B) {
	k := testKey(1)
	srv := newDirServerB(b, serveKeys("max-age=3600", "", k))
	f := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"127.0.0.1:*"}, AllowHTTP: true, AllowPrivateNetworks: true})
	ctx := context.Background()
	set := agentSet(b, srv)
	if _, err := f.Key(ctx, set, k.JWK.Kid); err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.Key(ctx, set, k.JWK.Kid); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := f.Key(ctx, set, k.JWK.Kid); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkBaselineRWMutexMap is a two-level map lookup under a RWMutex.
func BenchmarkBaselineRWMutexMap(b *testing.B) {
	k := testKey(1)
	var mu sync.RWMutex
	m := map[string]map[string]signer.PublicKey{"http://127.0.0.1:1": {k.JWK.Kid: k}}
	get := func(agent, kid string) (signer.PublicKey, bool) {
		mu.RLock()
		defer mu.RUnlock()
		pk, ok := m[agent][kid]
		return pk, ok
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := get("http://127.0.0.1:1", k.JWK.Kid); !ok {
				b.Fatal("miss")
			}
		}
	})
	// Any expiring cache reads the clock once per lookup; on some virtual
	// machines time.Now alone costs a few hundred ns.
	b.Run("serial+clock", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := get("http://127.0.0.1:1", k.JWK.Kid); !ok || time.Now().IsZero() {
				b.Fatal("miss")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, ok := get("http://127.0.0.1:1", k.JWK.Kid); !ok {
					b.Fatal("miss")
				}
			}
		})
	})
}
