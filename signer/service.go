package signer

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/agentid/agentid/signer/redact"
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

	// InviteHeader carries the invitation token of a registration (POST
	// /agents) on a service whose registration needs one; the
	// registration's signature covers it (component "agentid-invite").
	InviteHeader = "Agentid-Invite"

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
		return ServiceURL{}, fmt.Errorf("%w %q: %s", ErrInvalidServiceURL, Truncate(redact.URL(s)), why)
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
	host := normalizeAuthority(scheme, u.Host)
	if !ValidAuthority(host) {
		return bad("the host is not host[:port]")
	}
	return ServiceURL{Scheme: scheme, Host: host}, nil
}

// String returns scheme://host.
func (s ServiceURL) String() string { return s.Scheme + "://" + s.Host }

// AgentOrigin returns <scheme>://<uid>.<Host>, the Signature-Agent of uid.
func (s ServiceURL) AgentOrigin(uid string) string { return s.Scheme + "://" + uid + "." + s.Host }

// DirectoryURL returns the URL of uid's key directory.
func (s ServiceURL) DirectoryURL(uid string) string { return s.AgentOrigin(uid) + DirectoryPath }

// UIDOfHost returns the uid whose agent host is host (lowercase
// host[:port], as normalizeAuthority returns), or "" when host is not
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
