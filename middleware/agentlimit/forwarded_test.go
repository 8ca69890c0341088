package agentlimit_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware/agentlimit"
)

// TestForwardedClientAddr: the header is read only when the peer is a
// trusted proxy, from the right, skipping trusted hops; anything odd falls
// back to the peer.
func TestForwardedClientAddr(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	addr := agentlimit.ForwardedClientAddr(trusted, "")
	for _, tc := range []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"untrusted peer: header ignored", "203.0.113.9:4000", []string{"198.51.100.1"}, "203.0.113.9"},
		{"untrusted peer inside no header", "203.0.113.9:4000", nil, "203.0.113.9"},
		{"trusted peer, one hop", "10.0.0.2:4000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"client-written entries on the left are skipped", "10.0.0.2:4000", []string{"1.1.1.1, 2.2.2.2, 198.51.100.1"}, "198.51.100.1"},
		{"trusted hops on the right are skipped", "10.0.0.2:4000", []string{"1.1.1.1, 198.51.100.1, 10.9.9.9"}, "198.51.100.1"},
		{"several field lines, last line last", "10.0.0.2:4000", []string{"1.1.1.1", "198.51.100.7, 10.1.1.1"}, "198.51.100.7"},
		{"entry with a port", "10.0.0.2:4000", []string{"198.51.100.1:5555"}, "198.51.100.1"},
		{"IPv6 grouped by /64", "[::1]:4000", []string{"[2001:db8:1:2:3::4]:80"}, "2001:db8:1:2::/64"},
		{"only trusted entries: the peer", "10.0.0.2:4000", []string{"10.3.3.3"}, "10.0.0.2"},
		{"no header: the peer", "10.0.0.2:4000", nil, "10.0.0.2"},
		{"garbage at the rightmost untrusted entry: the peer", "10.0.0.2:4000", []string{"198.51.100.1, not-an-ip"}, "10.0.0.2"},
		{"empty entries skipped", "10.0.0.2:4000", []string{"198.51.100.1, ,"}, "198.51.100.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := request(tc.peer)
			for _, v := range tc.xff {
				r.Header.Add("x-forwarded-for", v)
			}
			if got := addr(r); got != tc.want {
				t.Errorf("client = %q, want %q", got, tc.want)
			}
		})
	}
	custom := agentlimit.ForwardedClientAddr(trusted, "x-real-ip")
	r := request("10.0.0.2:1")
	r.Header.Set("X-Forwarded-For", "198.51.100.1")
	r.Header.Set("X-Real-Ip", "198.51.100.2")
	if got := custom(r); got != "198.51.100.2" {
		t.Errorf("custom header: client = %q, want 198.51.100.2", got)
	}
}

// TestForwardedClientAddrBudgets: behind a trusted proxy, two clients get
// two budgets; a client reaching the service directly cannot pick one by
// sending the header.
func TestForwardedClientAddrBudgets(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, agentlimit.Config{
		Address:    agentlimit.Limit{Quota: 1, Window: time.Hour},
		ClientAddr: agentlimit.ForwardedClientAddr([]netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}, ""),
	})
	take := func(peer, xff string) bool {
		r := request(peer)
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		return lim.Take(r, nil).Allowed
	}
	if !take("10.0.0.1:1", "198.51.100.1") || !take("10.0.0.1:2", "198.51.100.2") {
		t.Error("two clients behind the proxy share a budget")
	}
	if take("10.0.0.1:3", "198.51.100.1") {
		t.Error("a client behind the proxy got a second request of a 1/h budget")
	}
	if !take("203.0.113.5:1", "198.51.100.99") {
		t.Error("a direct client was refused at its first request")
	}
	if take("203.0.113.5:2", "198.51.100.100") {
		t.Error("a direct client chose a fresh budget with X-Forwarded-For")
	}
}
