package keyfetch

import (
	"fmt"
	"hash/maphash"
	"testing"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestSiteOf: what a publisher can vary at will (scheme, port, path, query,
// case, the spelling of an IP address, names under its own) is one site;
// what it cannot (another host, another name under a wildcard's suffix)
// is another.
func TestSiteOf(t *testing.T) {
	t.Parallel()
	f := New(Config{TrustedHosts: []string{"*.agentid.example", "*.example:*", "keys.example", "pinned.example:8443", "127.0.0.1:*", "[::1]:*", "[::ffff:127.0.0.2]:*"}, AllowHTTP: true})
	for _, tc := range []struct{ url, want string }{
		{"https://agent-a.agentid.example/.well-known/http-message-signatures-directory", "agent-a.agentid.example"},
		{"http://AGENT-A.agentid.example:8443/x?n=1", "agent-a.agentid.example"},
		{"https://minted.agent-a.agentid.example/", "agent-a.agentid.example"},
		{"https://b.minted.agent-a.agentid.example/", "agent-a.agentid.example"},
		{"https://agent-b.agentid.example/", "agent-b.agentid.example"},
		// the most specific wildcard decides: under *.example alone,
		// evil.example's owner mints names below it
		{"https://evil.example:9/", "evil.example"},
		{"https://n1.evil.example/", "evil.example"},
		{"https://n2.n1.evil.example/?q", "evil.example"},
		// an exact entry makes the host its own site
		{"https://keys.example/agents/1.json", "keys.example"},
		{"https://a.keys.example/", "keys.example"},
		{"https://pinned.example:8443/", "pinned.example"},
		{"https://pinned.example/", "pinned.example"},
		{"https://x.pinned.example/", "pinned.example"},
		{"http://127.0.0.1:1/a", "127.0.0.1"},
		{"http://127.0.0.1:2/b?c", "127.0.0.1"},
		{"http://[::1]:3/", "::1"},
		{"http://[0:0:0:0:0:0:0:1]:3/", "::1"},
		{"http://[::ffff:127.0.0.2]:3/", "127.0.0.2"},
		// trusted only through a registry: the host
		{"https://card.registry.test/c.json", "card.registry.test"},
	} {
		if got := f.siteOf(tc.url); got != tc.want {
			t.Errorf("siteOf(%s) = %q, want %q", tc.url, got, tc.want)
		}
	}
}

// TestSiteQuotaCounts: whatever admits and evicts (a full cache's least
// recently used set, dead sets, a registry's purge), each site's count is
// the number of its admitted sets, never above MaxSetsPerSite, and a site
// whose sets left is admitted again.
func TestSiteQuotaCounts(t *testing.T) {
	t.Parallel()
	clk := signertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	f := New(Config{TrustedHosts: []string{"*.example"}, MaxOrigins: 20, MaxSetsPerSite: 3, Now: clk.Now})
	check := func(step string) {
		t.Helper()
		want := map[uint64]int32{}
		f.entries.RemoveFunc(func(_ cacheKey, e *entry) bool { want[e.site]++; return false })
		// RemoveFunc dropping nothing leaves the counts alone
		if fmt.Sprint(want) != fmt.Sprint(f.sites) {
			t.Fatalf("%s: counts %v, want %v", step, f.sites, want)
		}
		for s, n := range f.sites {
			if n > 3 {
				t.Fatalf("%s: site %x holds %d admitted sets, above MaxSetsPerSite 3", step, s, n)
			}
		}
	}
	admit := func(u string) bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		e := &entry{url: u, has: true, admitted: true, freshUntil: clk.Now().Add(time.Minute), staleUntil: clk.Now().Add(time.Minute)}
		f.storeLocked(cacheKey{url: u}, e, clk.Now())
		return e.admitted
	}
	for i := range 40 {
		u := fmt.Sprintf("https://n%d.s%d.example/?%d", i, i%5, i)
		got := admit(u)
		check(fmt.Sprintf("admit %d", i))
		if i < 15 && !got { // the first three of each of five sites
			t.Fatalf("admit %d (%s) refused while its site held fewer than 3", i, u)
		}
		if i >= 15 && got {
			t.Fatalf("admit %d (%s) admitted a fourth set of its site", i, u)
		}
	}
	if got := admit("https://n99.s0.example/"); got {
		t.Errorf("a fourth set of s0.example admitted")
	}
	// s0's sets leave (dead, then swept on the next admission into a full
	// cache); s0 is admitted again.
	f.mu.Lock()
	f.entries.RemoveFunc(func(_ cacheKey, e *entry) bool { return e.site == maphash.String(f.seed, "s0.example") })
	f.mu.Unlock()
	check("purge of s0")
	if !admit("https://n100.s0.example/") {
		t.Errorf("s0.example refused after its sets left")
	}
	check("readmit")
	for i := range 30 { // full again, the least recently used evicted
		admit(fmt.Sprintf("https://f%d.example/", i))
	}
	check("refill")
	clk.Advance(2 * time.Minute)
	admit("https://fresh.s9.example/")
	check("dead sets swept")
	if n := f.entries.Len(); n != 1 {
		t.Errorf("%d admitted sets after the dead ones were swept, want 1", n)
	}
}

// TestFindLinearMatchesIndex: a small set searched in order and a large
// one looked up in its maps answer every keyid alike — a kid, a
// thumbprint, a kid that is another key's thumbprint, keys sharing a
// thumbprint under two kids, an unknown id — at a well-known directory
// and elsewhere.
func TestFindLinearMatchesIndex(t *testing.T) {
	t.Parallel()
	a, b, c := signertest.Key(1).Public, signertest.Key(2).Public, signertest.Key(3).Public
	withKid := func(k signer.PublicKey, kid string) signer.PublicKey { k.JWK.Kid = kid; return k }
	keys := []signer.PublicKey{
		withKid(a, "a1"),
		withKid(b, c.Thumbprint), // a kid that is c's thumbprint wins over c
		withKid(c, "c"),
		withKid(a, "a2"), // a again: the first with its thumbprint wins
	}
	ids := []string{"a1", "a2", "c", "x", "", a.Thumbprint, b.Thumbprint, c.Thumbprint}
	linear := &entry{list: keys}
	indexed := &entry{list: keys}
	indexed.byThumb, indexed.byID = index(keys)
	for _, id := range ids {
		for _, wk := range []bool{false, true} {
			k1, ok1 := linear.find(id, wk)
			k2, ok2 := indexed.find(id, wk)
			if ok1 != ok2 || k1.JWK.Kid != k2.JWK.Kid || k1.Thumbprint != k2.Thumbprint {
				t.Errorf("find(%q, wellKnown=%v): in order %v %q, indexed %v %q", id, wk, ok1, k1.JWK.Kid, ok2, k2.JWK.Kid)
			}
		}
	}
	if k, _ := linear.find(c.Thumbprint, false); k.Thumbprint != b.Thumbprint {
		t.Errorf("a kid naming another key's thumbprint did not win")
	}
	if k, _ := linear.find(a.Thumbprint, true); k.JWK.Kid != "a1" {
		t.Errorf("the first key with a thumbprint did not win: %q", k.JWK.Kid)
	}
}
