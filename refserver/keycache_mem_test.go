package refserver

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/lru"
	"github.com/agentid/agentid/signer/signertest"
)

// BenchmarkKeyCacheEntryBytes measures the heap one cached key takes in
// the database key source's cache (an Ed25519 key parsed from its stored
// JWK, as query makes it, with its uid, kid and the cache's bookkeeping),
// reported as B/entry; Config.KeyCacheSize refers to it.
func BenchmarkKeyCacheEntryBytes(b *testing.B) {
	const n = 20_000
	jwks := make([][]byte, 256)
	for i := range jwks {
		jwks[i] = signertest.Key(byte(i)).Public.JWK.MarshalPublic()
	}
	var perEntry float64
	for range b.N {
		c := lru.New[string, keyEntry](n, 0, nil)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range n {
			pk, err := signer.ParsePublicJWK(jwks[i%len(jwks)])
			if err != nil {
				b.Fatal(err)
			}
			// Distinct strings, as rows read from the database are.
			kid := pk.JWK.Kid[:40] + strconv.Itoa(1000+i)
			c.Add(kid, keyEntry{uid: "agent-" + strconv.FormatInt(int64(1<<44+i), 16) + "0000000000000", pk: pk})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perEntry = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(c)
	}
	b.ReportMetric(perEntry, "B/entry")
}
