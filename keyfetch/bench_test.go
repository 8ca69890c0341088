package keyfetch_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/agentid/agentid/signer/signertest/benchtest"
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

// BenchmarkCancelledClient shows that a client hanging up stops its fetch:
// each iteration starts a lookup of an uncached key set whose host never
// answers, cancels the caller once the request arrived, and waits until
// the upstream sees its connection closed (the fetch's Timeout is a
// minute, so an iteration that waited for it would take a minute). The
// same key set is fetched anew each time: an abandoned fetch is not
// remembered. "cached" is a cache hit measured in the same run, the
// baseline.
func BenchmarkCancelledClient(b *testing.B) {
	k := testKey(1)
	entered, closed := make(chan struct{}, 1), make(chan struct{}, 1)
	srv := newDirServer(b, serveKeys("max-age=3600", "", k))
	srv.handle("/slow.json", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done()
		closed <- struct{}{}
	})
	f := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"127.0.0.1:*"}, AllowHTTP: true, AllowPrivateNetworks: true, Timeout: time.Minute})
	ctx := context.Background()
	cached, slow := agentSet(b, srv.URL), agentSet(b, srv.URL+"/slow.json")
	if _, err := f.Key(ctx, cached, k.Thumbprint); err != nil {
		b.Fatal(err)
	}
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.Key(ctx, cached, k.Thumbprint); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cancelled-until-upstream-closed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { _, err := f.Key(cctx, slow, k.Thumbprint); done <- err }()
			<-entered
			cancel()
			<-closed
			if err := <-done; !errors.Is(err, context.Canceled) {
				b.Fatalf("Key error = %v, want context.Canceled", err)
			}
		}
	})
}

// BenchmarkParseRegistry: reading a registry list costs time linear in its
// size, whatever it holds: comment lines, long junk lines, binary data, or
// more URLs than MaxRegistryEntries (refused at the first one too many).
// Each size runs beside a baseline that only counts the list's newlines,
// so the ns/op ratio between sizes shows the growth.
func BenchmarkParseRegistry(b *testing.B) {
	f := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"registry.example"}})
	kinds := map[string]func(n int) []byte{
		"comments": func(n int) []byte { return bytes.Repeat([]byte("# a comment line, ignored\n"), n/26) },
		"junk":     func(n int) []byte { return bytes.Repeat([]byte(strings.Repeat("j", 4095)+"\n"), n/4096) },
		"urls": func(n int) []byte {
			var buf bytes.Buffer
			for i := 0; buf.Len() < n; i++ {
				fmt.Fprintf(&buf, "https://agent-%d.example/card.json\n", i)
			}
			return buf.Bytes()
		},
		"binary": func(n int) []byte { return append(bytes.Repeat([]byte("https://a.example/c.json\n"), n/25), 0) },
	}
	for _, kind := range []string{"comments", "junk", "urls", "binary"} {
		for _, size := range []int{64 << 10, 1 << 20} {
			body := kinds[kind](size)
			b.Run(fmt.Sprintf("%s/%dKiB", kind, size>>10), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					_, _, _ = f.ParseRegistry(body)
				}
			})
			b.Run(fmt.Sprintf("baseline/%s/%dKiB", kind, size>>10), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					_ = bytes.Count(body, []byte("\n"))
				}
			})
		}
	}
}

// BenchmarkKeySetParse times parsing the largest key set a trusted host
// can serve (DefaultMaxKeys keys, or as many as DefaultMaxBodyBytes holds)
// of each key type against one Ed25519 verification in the same run
// (x-ed25519, cpu-x-ed25519): the work a fetch adds beyond its I/O, at
// most once per request. An RSA key costs a base64 decoding and a
// thumbprint, no arithmetic, whatever its length; an Ed25519 key is
// expanded for the backend when parsed.
func BenchmarkKeySetParse(b *testing.B) {
	ed := signertest.Key(40)
	msg := []byte("a signature base of a hundred bytes or so, as a default-profile request has: @authority and params")
	sig := ed25519.Sign(ed.Key, msg)
	rsaJWK := func(bits, i int) string {
		n := bytes.Repeat([]byte{0xa5, byte(i)}, bits/16)
		n[0] |= 0x80
		n[len(n)-1] |= 1
		return `{"kty":"RSA","e":"AQAB","n":"` + base64.RawURLEncoding.EncodeToString(n) + `"}`
	}
	for _, c := range []struct {
		name string
		bits int // 0: Ed25519
	}{{"ed25519", 0}, {"rsa-2048", 2048}, {"rsa-4096", 4096}, {"rsa-8192", 8192}} {
		b.Run(c.name, func(b *testing.B) {
			var jwks []string
			size := len(`{"keys":[]}`)
			for i := 0; len(jwks) < keyfetch.DefaultMaxKeys; i++ {
				j := signertest.Key(byte(i)).Public.JWK.MarshalPublic()
				if c.bits > 0 {
					j = []byte(rsaJWK(c.bits, i))
				}
				if size+len(j)+1 > keyfetch.DefaultMaxBodyBytes {
					break
				}
				size += len(j) + 1
				jwks = append(jwks, string(j))
			}
			body := []byte(`{"keys":[` + strings.Join(jwks, ",") + `]}`)
			b.ReportAllocs()
			benchtest.Paired(b, 1, "ed25519", "parse",
				func(int) {
					if ed.Public.Verify(signer.AlgEd25519, msg, sig) != nil {
						b.Fatal("the baseline did not verify")
					}
				},
				func(int) {
					keys, problems, err := keyfetch.ParseKeySet(body, keyfetch.DefaultMaxKeys)
					if err != nil || len(keys) != len(jwks) {
						b.Fatalf("parsed %d of %d keys: %v %v", len(keys), len(jwks), err, problems)
					}
				})
			b.ReportMetric(float64(len(jwks)), "keys")
			b.ReportMetric(float64(len(body)), "body-bytes")
		})
	}
}
