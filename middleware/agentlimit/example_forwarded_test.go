package agentlimit_test

import (
	"fmt"
	"net/http/httptest"
	"net/netip"

	"github.com/agentid/agentid/middleware/agentlimit"
)

// Behind a load balancer at 10.0.0.0/8, unsigned clients are limited by
// the address the balancer appended to X-Forwarded-For; a client reaching
// the service directly is limited by its own address, whatever it sends.
func ExampleForwardedClientAddr() {
	addr := agentlimit.ForwardedClientAddr([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, "")
	// Install it as the limiter's client address:
	// agentlimit.New(agentlimit.Config{Address: …, ClientAddr: addr})

	viaBalancer := httptest.NewRequest("GET", "/", nil)
	viaBalancer.RemoteAddr = "10.0.0.7:51000"
	viaBalancer.Header.Set("X-Forwarded-For", "192.0.2.1, 198.51.100.23") // the client wrote 192.0.2.1
	direct := httptest.NewRequest("GET", "/", nil)
	direct.RemoteAddr = "203.0.113.5:40000"
	direct.Header.Set("X-Forwarded-For", "198.51.100.23")
	fmt.Println(addr(viaBalancer))
	fmt.Println(addr(direct))
	// Output:
	// 198.51.100.23
	// 203.0.113.5
}
