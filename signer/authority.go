package signer

import (
	"net/netip"
	"strings"
)

// ValidAuthority reports whether h is a lowercase host[:port] authority: a
// DNS name (ValidHostname; an IPv4 address is one) or a bracketed IPv6
// address, then at most one port of 1 to 5 digits. "localhost:1:80",
// "host:", "[::1]:" and "a..b" are not.
func ValidAuthority(h string) bool {
	host, port, hasPort := h, "", false
	if strings.HasPrefix(h, "[") {
		i := strings.IndexByte(h, ']')
		if i < 0 {
			return false
		}
		a, err := netip.ParseAddr(h[1:i])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return false
		}
		rest := h[i+1:]
		if rest != "" {
			if port, hasPort = strings.CutPrefix(rest, ":"); !hasPort {
				return false
			}
		}
	} else {
		if i := strings.LastIndexByte(h, ':'); i >= 0 {
			host, port, hasPort = h[:i], h[i+1:], true
		}
		if !ValidHostname(host) {
			return false
		}
	}
	if hasPort && (port == "" || len(port) > 5) {
		return false
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
	}
	return true
}

// ValidHostname reports whether h is a lowercase DNS name of at most 253
// bytes: dot-separated labels of 1 to 63 bytes of [a-z0-9-_], so no empty
// label and no trailing dot.
func ValidHostname(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	n := 0 // length of the current label
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case c == '.':
			if n == 0 {
				return false
			}
			n = 0
		case 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_':
			if n++; n > 63 {
				return false
			}
		default:
			return false
		}
	}
	return n > 0
}
