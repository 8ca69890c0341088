package signer

import (
	"fmt"
	"net/http"
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

// Scheme returns the request's scheme: the URL's when set (client side),
// else "https" when the connection used TLS, else "http".
func Scheme(r *http.Request) string {
	if r.URL != nil && r.URL.Scheme != "" {
		return strings.ToLower(r.URL.Scheme)
	}
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// requestHost is r.Host, else the URL's host.
func requestHost(r *http.Request) string {
	if r.Host == "" && r.URL != nil {
		return r.URL.Host
	}
	return r.Host
}

// ParseAuthority validates host (ValidAuthority, before anything is
// dropped, so "localhost:3000:80" is refused rather than read as
// "localhost:3000") and returns it normalized as normalizeAuthority does.
func ParseAuthority(scheme, host string) (string, error) {
	h := lower(host)
	if !ValidAuthority(h) {
		return "", fmt.Errorf("%w: %w: %q is not host[:port]", ErrInvalidAuthority, errInvalidComponent, Truncate(host))
	}
	return normalizeAuthority(scheme, h), nil
}

// normalizeAuthority lowercases host and drops the default port of scheme.
func normalizeAuthority(scheme, host string) string {
	host = lower(host)
	switch {
	case scheme == "https" && strings.HasSuffix(host, ":443"):
		host = host[:len(host)-4]
	case scheme == "http" && strings.HasSuffix(host, ":80"):
		host = host[:len(host)-3]
	}
	return host
}

// lower is strings.ToLower without an allocation for already-lowercase input.
func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}
