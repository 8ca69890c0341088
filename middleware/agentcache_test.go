package middleware

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer"
)

// newCacheVerifier returns a Verifier of cfg with a key source that knows
// no key (these tests only resolve Signature-Agent values).
func newCacheVerifier(t testing.TB, cfg Config) *Verifier {
	t.Helper()
	cfg.Keys = KeySourceFunc(func(context.Context, signer.KeySet, string) (signer.PublicKey, error) {
		return signer.PublicKey{}, signer.ErrUnknownKey
	})
	cfg.AnyAuthority = true
	v, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSignatureAgentCacheSize checks that Config.SignatureAgentCacheSize
// bounds the cache of parsed Signature-Agent values, that its default is
// DefaultSignatureAgentCacheSize, that a negative size caches nothing, and
// that a cached value resolves as an uncached one does.
func TestSignatureAgentCacheSize(t *testing.T) {
	value := func(i int) []string { return []string{fmt.Sprintf(`sig1="https://agent-%d.example"`, i)} }
	if d := newCacheVerifier(t, Config{}); d.agents == nil || d.cfg.SignatureAgentCacheSize != DefaultSignatureAgentCacheSize {
		t.Fatalf("default size = %d, want %d", d.cfg.SignatureAgentCacheSize, DefaultSignatureAgentCacheSize)
	}
	v := newCacheVerifier(t, Config{SignatureAgentCacheSize: 3})
	for i := range 10 {
		f := v.resolveAgent(value(i))
		if f.err != nil || len(f.sets) != 1 || f.sets[0].URL != fmt.Sprintf("https://agent-%d.example/.well-known/http-message-signatures-directory", i) {
			t.Fatalf("value %d resolved to %+v", i, f)
		}
		if again := v.resolveAgent(value(i)); again != f {
			t.Fatalf("value %d was not served from the cache", i)
		}
	}
	if n := v.agents.Len(); n != 3 {
		t.Fatalf("cache holds %d values, want 3", n)
	}
	// A value longer than agentCacheMaxLen, or sent on two lines, is never cached.
	long := []string{`sig1="https://` + strings.Repeat("a", agentCacheMaxLen) + `.example"`}
	if first, second := v.resolveAgent(long), v.resolveAgent(long); first == second {
		t.Fatal("a value longer than agentCacheMaxLen was cached")
	}
	none := newCacheVerifier(t, Config{SignatureAgentCacheSize: -1})
	if none.agents != nil {
		t.Fatal("a negative size made a cache")
	}
	a, b := none.resolveAgent(value(1)), none.resolveAgent(value(1))
	if a == b || a.err != nil || b.sets[0] != a.sets[0] {
		t.Fatalf("uncached resolutions %+v and %+v differ", a, b)
	}
	bad := none.resolveAgent([]string{`sig1=("x")`})
	if bad.err == nil || bad.err.Code != CodeInvalidSignatureAgent {
		t.Fatalf("malformed value resolved to %+v, want %s", bad, CodeInvalidSignatureAgent)
	}
}

// TestSignatureAgentCacheEntryBytes measures the heap an entry of the
// Signature-Agent cache holds, for the figures in docs/benchmarks.md (a
// typical one-member value, and the longest cached value).
func TestSignatureAgentCacheEntryBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap of 2,000 entries")
	}
	const n = 2000
	for _, c := range []struct {
		name string
		pad  int
		max  float64
	}{{"typical", 0, 500}, {"longest", agentCacheMaxLen - len(`sig1="https://agent-0000.example"`), 1500}} {
		value := func(i int) []string {
			s := fmt.Sprintf(`sig1="https://agent-%04d.example%s"`, i, strings.Repeat("a", max(c.pad, 0)))
			if len(s) > agentCacheMaxLen {
				s = s[:agentCacheMaxLen-1] + `"`
			}
			return []string{s}
		}
		// The values are made after the first reading: the cache keeps
		// each one (as a request's header would be kept).
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		v := newCacheVerifier(t, Config{SignatureAgentCacheSize: n})
		for i := range n {
			v.resolveAgent(value(i))
		}
		if v.agents.Len() != n {
			t.Fatalf("%s: cache holds %d values, want %d", c.name, v.agents.Len(), n)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		per := float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / n
		t.Logf("%s value (%d bytes): %.0f B per entry", c.name, len(value(0)[0]), per)
		if per > c.max {
			t.Errorf("%s: %.0f B per entry, documented at most %.0f", c.name, per, c.max)
		}
		runtime.KeepAlive(v)
	}
}
