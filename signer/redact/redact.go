// Package redact hides what may be a credential in a URL before the URL
// is printed, logged or put in an error, shared by every tree (signer,
// keyfetch, the proxy, the Redis and database stores, idcli): the module's
// one rule for that, used wherever a configured URL (a database, Redis, a
// registry, an upstream, an agentid service) can be shown.
//
//	redact.URL("https://u:pw@registry.example/list?token=abc&v=2#k")
//	// "https://xxxxx@registry.example/list?token=xxxxx&v=xxxxx#xxxxx"
//
// A URL whose path may itself be the secret (a webhook) is named by
// HostOnly instead. docs/security.md ("The verifying proxy") says why the
// rule hides every value rather than those of known names.
package redact

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Mask stands in for a hidden part; it is what url.URL.Redacted writes in
// place of a password.
const Mask = "xxxxx"

// URL returns s with its user information, the value of every query
// parameter and its fragment replaced by Mask. Scheme, host, port, path and
// the parameter names stay readable; a query item without "=" is a value
// and is hidden, an empty value stays empty.
//
// s is read as net/url splits a URL — the fragment from the first '#', the
// query from the first '?' before it, the user information up to the last
// '@' of the authority (after "scheme://" or "//", else from the start up
// to the first '/') — but without parsing it, so a string net/url refuses,
// a URL without a scheme and a list of host:port addresses are all
// handled: nothing that net/url (or a server) could read as user
// information, a query value or a fragment is shown. Items are separated by
// '&' and by ';', which some servers also read as a separator. Names are
// not decoded: every value is hidden whatever its name's spelling.
//
// URL does not hide a secret written in the path (a capability URL: name
// it with HostOnly) or in a parameter's name. It is idempotent, and the cost is linear in len(s); a
// string without '@', '?' or '#' is returned as is, without allocating.
func URL(s string) string {
	if !strings.ContainsAny(s, "@?#") {
		return s
	}
	rest, fragment, hasFragment := strings.Cut(s, "#")
	rest, query, hasQuery := strings.Cut(rest, "?")
	var b strings.Builder
	b.Grow(len(s) + len(Mask))
	writeUserinfoHidden(&b, rest)
	if hasQuery {
		b.WriteByte('?')
		writeQueryHidden(&b, query)
	}
	if hasFragment {
		b.WriteByte('#')
		if fragment != "" {
			b.WriteString(Mask)
		}
	}
	return b.String()
}

// writeUserinfoHidden writes rest (a URL without query and fragment) with
// the user information of its authority replaced by Mask.
func writeUserinfoHidden(b *strings.Builder, rest string) {
	start := 0
	if c := strings.IndexByte(rest, ':'); c > 0 && isScheme(rest[:c]) && strings.HasPrefix(rest[c+1:], "//") {
		start = c + 3
	} else if strings.HasPrefix(rest, "//") {
		start = 2
	}
	authority := rest[start:]
	if end := strings.IndexByte(authority, '/'); end >= 0 {
		authority = authority[:end]
	}
	at := strings.LastIndexByte(authority, '@')
	if at < 0 {
		b.WriteString(rest)
		return
	}
	b.WriteString(rest[:start])
	b.WriteString(Mask)
	b.WriteString(rest[start+at:])
}

// writeQueryHidden writes the query q with every value replaced by Mask.
func writeQueryHidden(b *strings.Builder, q string) {
	for q != "" {
		item, sep := q, ""
		if i := strings.IndexAny(q, "&;"); i >= 0 {
			item, sep, q = q[:i], q[i:i+1], q[i+1:]
		} else {
			q = ""
		}
		if name, value, ok := strings.Cut(item, "="); ok {
			b.WriteString(name)
			b.WriteByte('=')
			if value != "" {
				b.WriteString(Mask)
			}
		} else if item != "" {
			b.WriteString(Mask)
		}
		b.WriteString(sep)
	}
}

// HostOnly names s, a URL whose path or query may be the secret itself (a
// capability URL: Slack's /services/T…/B…/SECRET, Discord's
// /api/webhooks/ID/TOKEN), without showing anything after its host: the
// scheme, "://", the host and port, "/…" when more than "/" followed
// them, then '#' and the first 8 hex digits of the SHA-256 of the whole of
// s, which tell URLs of one host apart and are the start of the hex
// SHA-256 a store keys s by.
//
//	redact.HostOnly("https://hooks.slack.com/services/T0/B0/abc")
//	// "https://hooks.slack.com/…#" and 8 hex digits
//
// s is split as URL splits it, without parsing: the authority follows
// "scheme://" (or "//") up to the first '/', '\', '?' or '#', and its user
// information, up to its last '@', is dropped. Without "scheme://" or
// "//", or with an authority holding a byte no host name, IP literal or
// port holds, nothing of s is shown but the digest. HostOnly("") is "".
func HostOnly(s string) string {
	if s == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(s))
	digest := "#" + hex.EncodeToString(sum[:4])
	start := 0
	if c := strings.IndexByte(s, ':'); c > 0 && isScheme(s[:c]) && strings.HasPrefix(s[c+1:], "//") {
		start = c + 3
	} else if strings.HasPrefix(s, "//") {
		start = 2
	} else {
		return "…" + digest
	}
	authority, rest := s[start:], ""
	if end := strings.IndexAny(authority, "/\\?#"); end >= 0 {
		authority, rest = authority[:end], authority[end:]
	}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		authority = authority[at+1:]
	}
	if authority == "" || !isHostPort(authority) {
		return "…" + digest
	}
	switch rest {
	case "":
	case "/":
		digest = "/" + digest
	default:
		digest = "/…" + digest
	}
	return s[:start] + authority + digest
}

// isHostPort reports whether s is a host and an optional port as a
// server reads them: a name or IPv4 address (letters, digits, '.', '-',
// '_') or a bracketed IPv6 literal (hex digits, ':', '.', a '%' zone),
// then ':' and digits, or nothing. User information missing its '@' (a
// password holding a '/') is not: its "port" is not digits.
func isHostPort(s string) bool {
	var host, port string
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return false
		}
		host, port = s[1:end], s[end+1:]
		if port != "" {
			if port[0] != ':' {
				return false
			}
			port = port[1:]
		}
		if !only(host, ":.%-_") {
			return false
		}
	} else {
		host, port, _ = strings.Cut(s, ":")
		if !only(host, ".-_") {
			return false
		}
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
	}
	return host != ""
}

// only reports whether s holds letters, digits and bytes of extra alone.
func only(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(extra, c) >= 0) {
			return false
		}
	}
	return true
}

// isScheme reports whether s is a URL scheme (RFC 3986 §3.1): a letter,
// then letters, digits, '+', '-' or '.'.
func isScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}
