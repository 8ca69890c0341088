package clientaddr_test

import (
	"fmt"
	"net/http/httptest"
	"net/netip"

	"github.com/agentid/agentid/middleware/clientaddr"
)

// Behind a load balancer at 10.0.0.0/8, a client is named by the address
// the balancer appended to X-Forwarded-For; a client reaching the service
// directly is named by its own address, whatever it sends.
func ExampleReader_Key() {
	rd := clientaddr.New([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, "")

	viaBalancer := httptest.NewRequest("GET", "/", nil)
	viaBalancer.RemoteAddr = "10.0.0.7:51000"
	viaBalancer.Header.Set("X-Forwarded-For", "192.0.2.1, 198.51.100.23") // the client wrote 192.0.2.1
	direct := httptest.NewRequest("GET", "/", nil)
	direct.RemoteAddr = "203.0.113.5:40000"
	direct.Header.Set("X-Forwarded-For", "198.51.100.23")
	v6 := httptest.NewRequest("GET", "/", nil)
	v6.RemoteAddr = "[2001:db8:1:2:3:4:5:6]:40000"
	fmt.Println(rd.Key(viaBalancer))
	fmt.Println(rd.Key(direct))
	fmt.Println(rd.Key(v6))
	// Output:
	// 198.51.100.23
	// 203.0.113.5
	// 2001:db8:1:2::/64
}
