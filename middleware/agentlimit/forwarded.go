package agentlimit

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// DefaultClientAddrHeader is the header ForwardedClientAddr reads when
// given none.
const DefaultClientAddrHeader = "X-Forwarded-For"

// ForwardedClientAddr returns a Config.ClientAddr for a service behind load
// balancers or reverse proxies at the addresses of trusted. For a request
// whose peer is in trusted, the client is the rightmost address of header
// (DefaultClientAddrHeader if "": a comma-separated list, every field
// line read in order, each proxy appending the address it was reached
// from) that is not itself in trusted; the peer address when the header
// is absent, lists trusted addresses only, or its rightmost untrusted
// entry is not an address. For a request from any other peer the header is
// never read: the peer address limits it, so a client cannot pick its own
// budget. Addresses are grouped as PeerAddr groups them (IPv6 by /64).
func ForwardedClientAddr(trusted []netip.Prefix, header string) func(*http.Request) string {
	if header == "" {
		header = DefaultClientAddrHeader
	}
	header = http.CanonicalHeaderKey(header)
	trusted = append([]netip.Prefix(nil), trusted...)
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) string {
		peer, ok := ParseAddr(r.RemoteAddr)
		if !ok || !isTrusted(peer) {
			return PeerAddr(r)
		}
		lines := r.Header[header]
		for i := len(lines) - 1; i >= 0; i-- {
			list := lines[i]
			for list != "" {
				entry := list
				if j := strings.LastIndexByte(list, ','); j >= 0 {
					entry, list = list[j+1:], list[:j]
				} else {
					list = ""
				}
				entry = strings.TrimSpace(entry)
				if entry == "" {
					continue
				}
				a, ok := ParseAddr(entry)
				if !ok {
					return PeerAddr(r)
				}
				if !isTrusted(a) {
					return addrKey(a)
				}
			}
		}
		return PeerAddr(r)
	}
}

// ParseAddr reads a client address as RemoteAddr and X-Forwarded-For
// carry it: "ip", "ip:port", "[ipv6]:port" or "[ipv6]"; the zone is dropped
// and an IPv4-mapped IPv6 address unmapped.
func ParseAddr(s string) (netip.Addr, bool) {
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// ParsePrefix reads a trusted-proxy entry, an address or a CIDR, as a
// prefix: a CIDR masked, an address as the prefix of its full length
// (IPv4-mapped addresses unmapped). Surrounding space is ignored; a zone is
// refused.
func ParsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q: want an address or CIDR, such as 10.0.0.5 or 172.16.0.0/12", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// addrKey is the bucket name of an address: IPv4 as is, IPv6 by its /64.
func addrKey(a netip.Addr) string {
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
