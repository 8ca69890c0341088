// Package clientaddr reads the address of the client behind trusted
// proxies, and groups addresses for per-address limits. It is the one
// reader of that address: the reference server's registration limit
// (middleware/ratelimit), agentlimit, and the proxy (forward-auth and
// proxyconfig's limits) all use it.
//
//	rd := clientaddr.New(trusted, "")  // "" reads X-Forwarded-For
//	key := rd.Key(r)                   // "203.0.113.9", "2001:db8:1:2::/64"
//
// The rules, and the reason for each, are in docs/security.md ("Client
// address behind trusted proxies"). In short: the peer address of the
// connection is the kernel's; the header is read only when the peer is
// trusted, from the right, and the client is the first entry that is not
// a trusted address (the leftmost trusted-written entry when all are, the
// last readable one when an entry does not parse). IPv6 addresses are
// grouped by /64 for limits.
package clientaddr

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// DefaultHeader is the header New reads when given none.
const DefaultHeader = "X-Forwarded-For"

// Reader reads the client address of requests. The zero Reader trusts no
// proxy. It is safe for concurrent use.
type Reader struct {
	trusted []netip.Prefix
	header  string // canonical
}

// New returns a Reader believing header (DefaultHeader if "") from the
// peers in trusted only. Every trusted proxy must append the address of
// its own peer to header (or set it to that address).
func New(trusted []netip.Prefix, header string) *Reader {
	if header == "" {
		header = DefaultHeader
	}
	return &Reader{trusted: append([]netip.Prefix(nil), trusted...), header: http.CanonicalHeaderKey(header)}
}

// Trusted reports whether a is the address of a trusted proxy.
func (rd *Reader) Trusted(a netip.Addr) bool {
	for _, p := range rd.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Addr returns r's client address. It starts from the peer address and,
// while the address in hand is trusted, steps to the next entry of the
// header to its left (the header's lines in order, each a comma-separated
// list; empty entries are not entries). It stops at an address that is not
// trusted, at the header's leftmost entry, or before an entry that is not
// an address, which it returns as badHop. client is invalid when the peer
// address itself does not parse (a Unix socket).
func (rd *Reader) Addr(r *http.Request) (client netip.Addr, badHop string) {
	client, ok := ParseAddr(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, ""
	}
	if !rd.Trusted(client) {
		return client, ""
	}
	lines := r.Header[rd.header]
	for i := len(lines) - 1; i >= 0; i-- {
		list := lines[i]
		for list != "" {
			entry := list
			if j := strings.LastIndexByte(list, ','); j >= 0 {
				entry, list = list[j+1:], list[:j]
			} else {
				list = ""
			}
			entry = strings.Trim(entry, " \t")
			if entry == "" {
				continue
			}
			a, ok := ParseAddr(entry)
			if !ok {
				return client, entry
			}
			client = a
			if !rd.Trusted(a) {
				return client, ""
			}
		}
	}
	return client, ""
}

// Key returns the name of r's client for per-address limits: Group of
// Addr's address, or RemoteAddr as is when it does not parse.
func (rd *Reader) Key(r *http.Request) string {
	a, _ := rd.Addr(r)
	if !a.IsValid() {
		return r.RemoteAddr
	}
	return Group(a)
}

// Group returns the name limits give a: an IPv4 address as is, an IPv6
// address as its /64 network ("2001:db8:1:2::/64").
func Group(a netip.Addr) string {
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// ParseAddr reads an address as RemoteAddr and the header carry it: "ip",
// "ip:port", "[ipv6]:port" or "[ipv6]"; the zone is dropped and an
// IPv4-mapped IPv6 address unmapped.
func ParseAddr(s string) (netip.Addr, bool) {
	host := s
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 || (end+1 < len(s) && !validPort(s[end+1:])) {
			return netip.Addr{}, false
		}
		host = s[1:end]
	case strings.Count(s, ":") == 1: // IPv4 with a port
		i := strings.IndexByte(s, ':')
		if !validPort(s[i:]) {
			return netip.Addr{}, false
		}
		host = s[:i]
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// validPort reports whether s is ":" followed by a decimal port.
func validPort(s string) bool {
	if len(s) < 2 || len(s) > 6 || s[0] != ':' {
		return false
	}
	for _, c := range []byte(s[1:]) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ParsePrefix reads a trusted-proxy entry, an address or a CIDR, as a
// prefix: a CIDR masked, an address as the prefix of its full length;
// IPv4-mapped forms are unmapped, as ParseAddr unmaps the addresses they
// are compared with. Surrounding space is ignored; a zone is refused. The
// error quotes s, for the caller to say where it came from.
func ParsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked(), nil
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q: want an address or CIDR, such as 10.0.0.5 or 172.16.0.0/12", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}
