package bench

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/agentid/agentid/cmd/idcli/internal/bench/proccpu"
	"github.com/agentid/agentid/cmd/idcli/internal/hint"
)

// findServerProcess returns a probe of the process listening on addr's
// port when addr is on this host, or why there is none.
func findServerProcess(addr string) (*proccpu.Probe, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("port %q is not a number", port)
	}
	if !isThisHost(host) {
		return nil, fmt.Errorf("%s is not an address of this host", host)
	}
	return proccpu.Listening(p)
}

// isThisHost reports whether host (a name or address) is this host:
// localhost, a loopback address or one of the interfaces' addresses.
func isThisHost(host string) bool {
	if hint.IsLocalHost(strings.Trim(strings.ToLower(host), "[]")) {
		return true
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return false
	}
	addrs, _ := net.InterfaceAddrs()
	for _, ip := range ips {
		if ip.IsLoopback() || ip.IsUnspecified() {
			return true
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}
