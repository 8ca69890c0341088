package signer

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// AgentMember is one value of a Signature-Agent field (web-bot-auth): the
// whole field when it is one string or token, or one dictionary member.
type AgentMember struct {
	// Key is the dictionary key ("" for the string and token forms).
	Key string
	// Value is the URL as sent: an origin such as "https://chatgpt.com", a
	// key-set URL with a path, or a host without a scheme (https).
	Value string
	// Type is the member's ;type parameter ("directory", "jwks_uri",
	// "cimd"), or "".
	Type string
	// Token reports that the value was an sf-token (an unquoted URL or a
	// host) rather than an sf-string.
	Token bool
	// Params reports that the member carried parameters (a strict
	// protocol-01 verifier ignores such members).
	Params bool
	// badType: the type parameter is neither a token nor a string (KeySet
	// refuses the member).
	badType bool
}

// SignatureAgent is a parsed Signature-Agent field. It holds either
// dictionary members or one item (a string or a token).
type SignatureAgent struct {
	members []AgentMember
	item    bool
}

// ParseSignatureAgent parses the forms deployed signers send: a string
// ("https://chatgpt.com"), a token (https://duckduckgo.com, an unquoted
// URL), or a dictionary whose members are strings or tokens, each with
// optional parameters (sig1="https://h";type=jwks_uri). Values are checked
// when resolved (AgentMember.KeySet), not here.
func ParseSignatureAgent(values []string) (SignatureAgent, error) {
	return ParseSignatureAgentLimited(values, 0, 0)
}

// ParseSignatureAgentLimited is ParseSignatureAgent refusing, before
// parsing, a field longer than maxBytes (ErrFieldTooLarge), and, while
// parsing, more than maxMembers members (ErrTooManyAgents). Zero is no limit.
func ParseSignatureAgentLimited(values []string, maxMembers, maxBytes int) (SignatureAgent, error) {
	if maxBytes > 0 {
		if n := fieldLen(values); n > maxBytes {
			return SignatureAgent{}, fmt.Errorf("%w: %w: %d bytes, more than %d", ErrInvalidSignatureAgent, ErrFieldTooLarge, n, maxBytes)
		}
	}
	s := joinLines(values)
	if t := strings.TrimLeft(s, " "); t == "" {
		return SignatureAgent{}, fmt.Errorf("%w: empty", ErrInvalidSignatureAgent)
	} else if t[0] == '"' {
		return agentItem(s)
	}
	ms, err := parseDict(s, maxMembers)
	if errors.Is(err, errTooManyMembers) {
		return SignatureAgent{}, fmt.Errorf("%w: %w: more than %d", ErrInvalidSignatureAgent, ErrTooManyAgents, maxMembers)
	}
	if err != nil || !urlMembers(ms) {
		// Not a dictionary of strings and tokens: a token such as
		// https://duckduckgo.com is an item (it is no dictionary key).
		if sa, ierr := agentItem(s); ierr == nil {
			return sa, nil
		}
		if err != nil {
			return SignatureAgent{}, fmt.Errorf("%w: %v", ErrInvalidSignatureAgent, err)
		}
		return SignatureAgent{}, fmt.Errorf("%w: members must be strings or tokens", ErrInvalidSignatureAgent)
	}
	sa := SignatureAgent{members: make([]AgentMember, len(ms))}
	for i := range ms {
		sa.members[i] = agentMember(ms[i].key, &ms[i].item)
	}
	return sa, nil
}

// urlMembers reports whether every member is a string or token item.
func urlMembers(ms []member) bool {
	for i := range ms {
		if ms[i].inner || (ms[i].item.val.kind != kindString && ms[i].item.val.kind != kindToken) {
			return false
		}
	}
	return len(ms) > 0
}

func agentItem(s string) (SignatureAgent, error) {
	it, err := parseItem(s)
	if err != nil {
		return SignatureAgent{}, fmt.Errorf("%w: %v", ErrInvalidSignatureAgent, err)
	}
	if it.val.kind != kindString && it.val.kind != kindToken {
		return SignatureAgent{}, fmt.Errorf("%w: not a string or token", ErrInvalidSignatureAgent)
	}
	return SignatureAgent{members: []AgentMember{agentMember("", &it)}, item: true}, nil
}

func agentMember(key string, it *sfItem) AgentMember {
	m := AgentMember{Key: key, Value: it.val.s, Token: it.val.kind == kindToken, Params: len(it.params) > 0}
	if t, ok := getParam(it.params, "type"); ok && (t.kind == kindToken || t.kind == kindString) {
		m.Type = t.s
	} else if ok {
		m.badType = true
	}
	return m
}

// Item reports whether the field was one string or token rather than a
// dictionary.
func (a SignatureAgent) Item() bool { return a.item }

// Members returns the members in field order (one for the item forms).
// The slice must not be modified.
func (a SignatureAgent) Members() []AgentMember { return a.members }

// Member returns the dictionary member named key.
func (a SignatureAgent) Member(key string) (AgentMember, bool) {
	if a.item {
		return AgentMember{}, false
	}
	for _, m := range a.members {
		if m.Key == key {
			return m, true
		}
	}
	return AgentMember{}, false
}

// KeySetKind is the format of a key set.
type KeySetKind uint8

// Key-set formats.
const (
	// KindDirectory is a key directory: {"keys":[JWK…]} (the
	// web-bot-auth directory draft; also ;type=directory).
	KindDirectory KeySetKind = iota
	// KindJWKS is a JSON Web Key Set URL (;type=jwks_uri).
	KindJWKS
	// KindCard is a Signature Agent Card (;type=cimd): a JSON document
	// whose "jwks" member holds the keys or whose "jwks_uri" names them.
	KindCard
)

func (k KeySetKind) String() string {
	switch k {
	case KindJWKS:
		return "jwks_uri"
	case KindCard:
		return "cimd"
	}
	return "directory"
}

// KeySet is where an agent's keys are published, resolved from a
// Signature-Agent member. Its identity (Identity) is what caches and
// policies are keyed by.
type KeySet struct {
	// URL is fetched exactly as it is (normalized scheme and host; the
	// path and query as sent).
	URL string
	// Kind is the document format at URL.
	Kind KeySetKind
	// WellKnown reports that URL is <origin>/.well-known/http-message-
	// signatures-directory: there, a keyid must be the RFC 7638
	// thumbprint of the key.
	WellKnown bool
	// origin is the length of scheme://host[:port] at the start of URL.
	origin int
}

// Origin returns the scheme://host[:port] of the key set ("" for the zero
// KeySet).
func (k KeySet) Origin() string { return k.URL[:k.origin] }

// Identity returns the agent's identity: the origin for the well-known
// directory of an origin, else the key-set URL.
func (k KeySet) Identity() string {
	if k.WellKnown && len(k.URL) == k.origin+len(DirectoryPath) {
		return k.Origin()
	}
	return k.URL
}

// IsZero reports whether k is the zero KeySet (no Signature-Agent).
func (k KeySet) IsZero() bool { return k.URL == "" }

// KeySet resolves the member to the key set it names (web-bot-auth
// protocol-01): a value without a scheme means https; an origin (no path,
// or "/") means its well-known directory; a URL with a path is fetched as
// sent; ;type=jwks_uri names a JWKS and ;type=cimd a Signature Agent Card.
// Errors wrap ErrInvalidSignatureAgent.
func (m AgentMember) KeySet() (KeySet, error) {
	if m.badType {
		return KeySet{}, fmt.Errorf("%w: the type parameter is not a token or string", ErrInvalidSignatureAgent)
	}
	kind := KindDirectory
	switch m.Type {
	case "", "directory":
	case "jwks_uri":
		kind = KindJWKS
	case "cimd":
		kind = KindCard
	default:
		return KeySet{}, fmt.Errorf("%w: type %q is not directory, jwks_uri or cimd", ErrInvalidSignatureAgent, Truncate(m.Type))
	}
	ks, err := ParseKeySetURL(m.Value)
	if err != nil {
		return KeySet{}, err
	}
	ks.Kind = kind
	if kind != KindDirectory {
		ks.WellKnown = false
	}
	return ks, nil
}

// ParseKeySetURL resolves a Signature-Agent URL to a directory key set,
// normalised as RFC 3986 §6.2.2–6.2.3 describe so that every spelling of
// one URL is one identity: a value without a scheme means https; the scheme
// must be http or https; no user information or fragment; scheme and host
// are lowercased and the scheme's default port dropped; in the path and
// query, percent-encoded hex digits are uppercased and percent-encoded
// unreserved characters (letters, digits, "-", ".", "_", "~") decoded;
// dot segments are removed from the path; an empty path is "/" and an
// empty query (a bare "?") is dropped. An origin (path "/" and no query)
// gets the well-known directory path. A query is kept: it is part of the
// URL fetched and of the identity.
func ParseKeySetURL(s string) (KeySet, error) {
	if s == "" {
		return KeySet{}, fmt.Errorf("%w: empty", ErrInvalidSignatureAgent)
	}
	scheme, rest := "https", s
	if i := strings.Index(s, "://"); i >= 0 {
		scheme, rest = lower(s[:i]), s[i+3:]
	}
	if scheme != "https" && scheme != "http" {
		return KeySet{}, fmt.Errorf("%w: scheme %q is not http or https", ErrInvalidSignatureAgent, Truncate(scheme))
	}
	hostport, path := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		hostport, path = rest[:i], rest[i:]
	}
	host, err := ParseAuthority(scheme, hostport)
	if err != nil { // ValidAuthority also refuses userinfo ('@') and zones ('%')
		return KeySet{}, fmt.Errorf("%w: %q has no valid host", ErrInvalidSignatureAgent, Truncate(s))
	}
	origin := len(scheme) + 3 + len(host)
	if path == "" || path == "/" {
		return KeySet{URL: scheme + "://" + host + DirectoryPath, WellKnown: true, origin: origin}, nil
	}
	if path[0] == '?' {
		path = "/" + path
	}
	if path[0] != '/' || strings.ContainsAny(path, "#\\") || !printableString(path) {
		return KeySet{}, fmt.Errorf("%w: %q is not a key-set URL", ErrInvalidSignatureAgent, Truncate(s))
	}
	if _, err := url.ParseRequestURI(path); err != nil {
		return KeySet{}, fmt.Errorf("%w: %q is not a key-set URL", ErrInvalidSignatureAgent, Truncate(s))
	}
	p, q, hasQuery := strings.Cut(path, "?")
	p, ok := normalizePercent(p)
	if ok && hasQuery {
		q, ok = normalizePercent(q)
	}
	if !ok {
		return KeySet{}, fmt.Errorf("%w: %q has a malformed percent-encoding", ErrInvalidSignatureAgent, Truncate(s))
	}
	p = removeDotSegments(p)
	if q == "" && (p == "" || p == "/") {
		return KeySet{URL: scheme + "://" + host + DirectoryPath, WellKnown: true, origin: origin}, nil
	}
	path = p
	if q != "" {
		path += "?" + q
	}
	return KeySet{URL: scheme + "://" + host + path, WellKnown: p == DirectoryPath, origin: origin}, nil
}

// normalizePercent applies RFC 3986 §6.2.2.1–6.2.2.2 to one path or query:
// the hex digits of each percent-encoding are uppercased and an encoded
// unreserved character is decoded. It reports false for a "%" not
// followed by two hex digits.
func normalizePercent(s string) (string, bool) {
	i := strings.IndexByte(s, '%')
	if i < 0 {
		return s, true
	}
	b := make([]byte, 0, len(s))
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			return "", false
		}
		d := unhex(s[i+1])<<4 | unhex(s[i+2])
		if unreserved(d) {
			b = append(b, d)
		} else {
			b = append(b, '%', upperHex(s[i+1]), upperHex(s[i+2]))
		}
		i += 2
	}
	return string(b), true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

func upperHex(c byte) byte {
	if c >= 'a' && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}

// unreserved reports an RFC 3986 §2.3 unreserved character.
func unreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// removeDotSegments is RFC 3986 §5.2.4 for an absolute path.
func removeDotSegments(p string) string {
	if !strings.Contains(p, ".") {
		return p
	}
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	for i, seg := range segs {
		last := i == len(segs)-1
		switch seg {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, seg)
		}
	}
	return "/" + strings.Join(out, "/")
}

func printableString(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
