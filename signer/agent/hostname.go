package agent

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/agentid/agentid/signer"
)

// DefaultHostname is the service base URL used when neither an explicit
// hostname nor AGENT_HOSTNAME is configured (DESIGN §8).
const DefaultHostname = "http://localhost:3000"

// ParseHostname validates and normalises a service base URL. A value without
// a scheme gets "https://" (the spec's rule); the scheme must be http or
// https; a path other than "/", a query, a fragment or user information is an
// error. The result is "<scheme>://<host[:port]>" in lower case, without a
// trailing slash and without the scheme's default port.
func ParseHostname(s string) (string, error) {
	raw := strings.TrimSpace(s)
	if raw == "" {
		return "", fmt.Errorf("agent: invalid hostname %q: empty", s)
	}
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("agent: invalid hostname %q: not a URL", s)
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", fmt.Errorf("agent: invalid hostname %q: scheme must be http or https", s)
	}
	if u.User != nil {
		return "", fmt.Errorf("agent: invalid hostname %q: user information is not allowed", s)
	}
	if u.Path != "" && u.Path != "/" || u.RawPath != "" {
		return "", fmt.Errorf("agent: invalid hostname %q: a path is not allowed (give scheme://host[:port])", s)
	}
	if u.RawQuery != "" || u.ForceQuery {
		return "", fmt.Errorf("agent: invalid hostname %q: a query is not allowed", s)
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return "", fmt.Errorf("agent: invalid hostname %q: a fragment is not allowed", s)
	}
	host := signer.NormalizeAuthority(scheme, u.Host)
	if u.Hostname() == "" {
		return "", fmt.Errorf("agent: invalid hostname %q: no host", s)
	}
	if p := u.Port(); p == "" && strings.HasSuffix(host, ":") {
		return "", fmt.Errorf("agent: invalid hostname %q: empty port", s)
	}
	return scheme + "://" + host, nil
}

// Origin returns the signature agent origin of uid at the service hostname:
// "<scheme>://<uid>.<host[:port]>" (DESIGN §5). hostname is parsed with
// ParseHostname; uid must be a single DNS label.
func Origin(hostname, uid string) (string, error) {
	base, err := ParseHostname(hostname)
	if err != nil {
		return "", err
	}
	if err := checkUID(uid); err != nil {
		return "", err
	}
	scheme, host, _ := strings.Cut(base, "://")
	return scheme + "://" + strings.ToLower(uid) + "." + host, nil
}

// checkUID accepts a single DNS label (letters, digits, hyphens, at most 63
// characters), which is what a uid must be to prefix the service host.
func checkUID(uid string) error {
	if uid == "" {
		return missingError(EnvUID)
	}
	ok := len(uid) <= 63 && uid[0] != '-' && uid[len(uid)-1] != '-'
	for i := 0; ok && i < len(uid); i++ {
		c := uid[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
	}
	if !ok {
		return &credError{kind: ErrInvalid, msg: fmt.Sprintf(
			"agent: invalid AGENT_UID %q: must be a single DNS label such as agent-0123456789abcdef01234567", truncate(uid))}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
