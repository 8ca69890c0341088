package signer

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"strings"
)

// The protocol's vocabulary: every package that needs one of these names
// imports it from here.
const (
	// Version is agentid's version, reported by the service's health route
	// and by `idcli version`.
	Version = "1.0.0"

	// DirectoryPath is the well-known path of an agent's key directory
	// (web-bot-auth directory draft).
	DirectoryPath = "/.well-known/http-message-signatures-directory"

	// DirectoryMediaType is the media type of a key directory.
	DirectoryMediaType = "application/http-message-signatures-directory+json"

	// DirectoryTag is the tag of the signature a key directory puts on its
	// own responses (web-bot-auth protocol-01).
	DirectoryTag = "http-message-signatures-directory"

	// KeyPossessionTag is the tag of the second signature of a key
	// rotation, made with the new key to prove its possession.
	KeyPossessionTag = "agentid-key-possession"

	// UIDPrefix starts every agent uid; 24 lowercase hex characters follow.
	UIDPrefix = "agent-"
)

// uidHexLen is the number of hex characters after UIDPrefix (12 random bytes).
const uidHexLen = 24

// ValidUID reports whether s has the uid form agent-<24 lowercase hex>.
func ValidUID(s string) bool {
	if len(s) != len(UIDPrefix)+uidHexLen || !strings.HasPrefix(s, UIDPrefix) {
		return false
	}
	for i := len(UIDPrefix); i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// NewUID returns a new agent uid: UIDPrefix and 12 random bytes from r
// (crypto/rand.Reader if nil) in lowercase hex.
func NewUID(r io.Reader) (string, error) {
	if r == nil {
		r = rand.Reader
	}
	var b [uidHexLen / 2]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("signer: new uid: %w", err)
	}
	return UIDPrefix + hex.EncodeToString(b[:]), nil
}

// UIDFromOrigin returns the agent uid that is the first label of origin's
// host (origin is scheme://host[:port], or a URL whose host is taken), or ""
// when that label is not a valid uid.
func UIDFromOrigin(origin string) string {
	h := origin
	if i := strings.Index(h, "://"); i >= 0 {
		h = h[i+3:]
	}
	i := strings.IndexByte(h, '.')
	if i < 0 {
		return ""
	}
	if h = h[:i]; ValidUID(h) {
		return h
	}
	return ""
}

// ServiceURL is a service's base URL: scheme (http or https) and host
// (lowercase host[:port], the scheme's default port dropped). Agents of the
// service live on <uid>.<Host>.
type ServiceURL struct {
	Scheme string
	Host   string
}

// ParseServiceURL validates and normalises a service base URL such as
// "https://agentid.example" or "http://localhost:3000". A value without a
// scheme gets "https://". A path other than "/", a query, a fragment, user
// information or an empty port is an error, and so is a host that is not a
// valid host[:port] (ValidAuthority). Errors wrap ErrInvalidServiceURL.
func ParseServiceURL(s string) (ServiceURL, error) {
	bad := func(why string) (ServiceURL, error) {
		return ServiceURL{}, fmt.Errorf("%w %q: %s", ErrInvalidServiceURL, Truncate(s), why)
	}
	raw := strings.TrimSpace(s)
	if raw == "" {
		return bad("empty")
	}
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("not a URL")
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme != "http" && scheme != "https":
		return bad("scheme must be http or https")
	case u.Opaque != "":
		return bad("not a URL")
	case u.User != nil:
		return bad("user information is not allowed")
	case u.Path != "" && u.Path != "/" || u.RawPath != "":
		return bad("a path is not allowed (give scheme://host[:port])")
	case u.RawQuery != "" || u.ForceQuery:
		return bad("a query is not allowed")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return bad("a fragment is not allowed")
	case u.Hostname() == "":
		return bad("no host")
	}
	host := NormalizeAuthority(scheme, u.Host)
	if !ValidAuthority(host) {
		return bad("the host is not host[:port]")
	}
	return ServiceURL{Scheme: scheme, Host: host}, nil
}

// String returns scheme://host.
func (s ServiceURL) String() string { return s.Scheme + "://" + s.Host }

// AgentHost returns <uid>.<Host>, the host of uid's key directory.
func (s ServiceURL) AgentHost(uid string) string { return uid + "." + s.Host }

// AgentOrigin returns <scheme>://<uid>.<Host>, the Signature-Agent of uid.
func (s ServiceURL) AgentOrigin(uid string) string { return s.Scheme + "://" + s.AgentHost(uid) }

// DirectoryURL returns the URL of uid's key directory.
func (s ServiceURL) DirectoryURL(uid string) string { return s.AgentOrigin(uid) + DirectoryPath }

// UIDOfHost returns the uid whose agent host is host (lowercase
// host[:port], as NormalizeAuthority returns), or "" when host is not
// <uid>.<Host> for a valid uid.
func (s ServiceURL) UIDOfHost(host string) string {
	label, ok := strings.CutSuffix(host, s.Host)
	if !ok || !strings.HasSuffix(label, ".") {
		return ""
	}
	if label = label[:len(label)-1]; ValidUID(label) {
		return label
	}
	return ""
}

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
