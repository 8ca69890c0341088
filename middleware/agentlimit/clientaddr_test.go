package agentlimit_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/middleware/clientaddr"
)

// TestForwardedClientAddrBudgets: with clientaddr's reader as
// Config.ClientAddr, two clients behind a trusted proxy get two budgets; a
// client reaching the service directly cannot pick one by sending the
// header. (The reader's rules are tested in middleware/clientaddr.)
func TestForwardedClientAddrBudgets(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, agentlimit.Config{
		Address:    agentlimit.Limit{Quota: 1, Window: time.Hour},
		ClientAddr: clientaddr.New([]netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}, "").Key,
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
