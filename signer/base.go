package signer

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/dunglas/httpsfv"
)

// ErrInvalidSignatureInput means Signature-Input or Signature does not parse
// or pair up (RFC 9421 §4).
var ErrInvalidSignatureInput = errors.New("signer: invalid signature input")

// Params are the signature parameters of RFC 9421 §2.3 that this package
// understands. Zero values mean absent (Has* report presence for integers).
type Params struct {
	Created, Expires       int64
	HasCreated, HasExpires bool
	KeyID, Alg, Nonce, Tag string
}

// Signature is one signature of a request: its label, covered components,
// parameters and value, paired from Signature-Input and Signature.
type Signature struct {
	Label      string
	Components []Component
	Params     Params
	// Value is the raw signature bytes (64 for Ed25519).
	Value []byte
	// inner is the parsed inner list, re-serialized for @signature-params.
	inner httpsfv.InnerList
}

// SignatureParams returns the @signature-params value: the inner list
// re-serialized from its parsed form (never the raw header text).
func (s *Signature) SignatureParams() (string, error) {
	return marshalInnerList(s.inner)
}

// Covers reports whether the signature covers a component with this
// serialized identifier, e.g. `"@authority"`.
func (s *Signature) Covers(id string) bool {
	for _, c := range s.Components {
		if c.id == id {
			return true
		}
	}
	return false
}

// CoversName reports whether the signature covers the named component with
// any parameters, returning the first such component.
func (s *Signature) CoversName(name string) (Component, bool) {
	for _, c := range s.Components {
		if c.Name == name {
			return c, true
		}
	}
	return Component{}, false
}

// Base builds the signature base of RFC 9421 §2.5 for r.
func (s *Signature) Base(r *http.Request) ([]byte, error) {
	return buildBase(r, s.Components, s.inner, &s.Params)
}

// SignatureBase builds the signature base for r from a Signature-Input inner
// list given as its serialized text (`("@authority");created=…`).
func SignatureBase(r *http.Request, signatureParams string) ([]byte, error) {
	it, err := httpsfv.UnmarshalList([]string{signatureParams})
	if err != nil || len(it) != 1 {
		return nil, fmt.Errorf("%w: signature params do not parse as one inner list", ErrInvalidSignatureInput)
	}
	il, ok := it[0].(httpsfv.InnerList)
	if !ok {
		return nil, fmt.Errorf("%w: signature params are not an inner list", ErrInvalidSignatureInput)
	}
	sig, err := signatureFromInner("sig", il)
	if err != nil {
		return nil, err
	}
	return sig.Base(r)
}

// buildBase writes the component lines and then the @signature-params
// line, serialized from the parsed inner list (never the raw header text).
// p only sizes the buffer.
func buildBase(r *http.Request, comps []Component, inner httpsfv.InnerList, p *Params) ([]byte, error) {
	var arr [8]string
	vals := arr[:0]
	n := len(`"@signature-params": `) + 2 + 128 + len(p.KeyID) + len(p.Alg) + len(p.Nonce) + len(p.Tag)
	for i, c := range comps {
		for _, prev := range comps[:i] {
			if prev.id == c.id {
				return nil, fmt.Errorf("%w %s", ErrDuplicateComponent, c.id)
			}
		}
		v, err := c.Value(r)
		if err != nil {
			return nil, err
		}
		vals = append(vals, v)
		n += 2*len(c.id) + len(v) + 4
	}
	b := make([]byte, 0, n)
	for i, c := range comps {
		b = append(b, c.id...)
		b = append(b, ": "...)
		b = append(b, vals[i]...)
		b = append(b, '\n')
	}
	b = append(b, `"@signature-params": `...)
	if out, ok := appendInnerList(b, inner); ok {
		return out, nil
	}
	sp, err := httpsfv.Marshal(inner)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSignatureInput, err)
	}
	return append(b, sp...), nil
}

// ParseSignatures parses the Signature-Input and Signature fields (each
// possibly split over several lines) as RFC 8941 dictionaries and pairs the
// members by label. Every Signature-Input member must have a Signature
// member and vice versa.
func ParseSignatures(signatureInput, signature []string) ([]Signature, error) {
	in, err := httpsfv.UnmarshalDictionary(signatureInput)
	if err != nil {
		return nil, fmt.Errorf("%w: Signature-Input: %v", ErrInvalidSignatureInput, err)
	}
	sigs, err := httpsfv.UnmarshalDictionary(signature)
	if err != nil {
		return nil, fmt.Errorf("%w: Signature: %v", ErrInvalidSignatureInput, err)
	}
	labels := in.Names()
	if len(labels) == 0 {
		return nil, fmt.Errorf("%w: Signature-Input is empty", ErrInvalidSignatureInput)
	}
	if len(sigs.Names()) != len(labels) {
		return nil, fmt.Errorf("%w: Signature and Signature-Input name different labels", ErrInvalidSignatureInput)
	}
	out := make([]Signature, 0, len(labels))
	for _, label := range labels {
		m, _ := in.Get(label)
		il, ok := m.(httpsfv.InnerList)
		if !ok {
			return nil, fmt.Errorf("%w: Signature-Input %s is not an inner list", ErrInvalidSignatureInput, label)
		}
		s, err := signatureFromInner(label, il)
		if err != nil {
			return nil, err
		}
		sm, ok := sigs.Get(label)
		if !ok {
			return nil, fmt.Errorf("%w: no Signature for label %s", ErrInvalidSignatureInput, label)
		}
		item, ok := sm.(httpsfv.Item)
		if !ok {
			return nil, fmt.Errorf("%w: Signature %s is not a byte sequence", ErrInvalidSignatureInput, label)
		}
		if s.Value, ok = item.Value.([]byte); !ok {
			return nil, fmt.Errorf("%w: Signature %s is not a byte sequence", ErrInvalidSignatureInput, label)
		}
		out = append(out, s)
	}
	return out, nil
}

func signatureFromInner(label string, il httpsfv.InnerList) (Signature, error) {
	s := Signature{Label: label, inner: il, Components: make([]Component, 0, len(il.Items))}
	for _, it := range il.Items {
		c, err := componentFromItem(it)
		if err != nil {
			return Signature{}, fmt.Errorf("%w: %s: %v", ErrInvalidSignatureInput, label, err)
		}
		for _, prev := range s.Components {
			if prev.id == c.id {
				return Signature{}, fmt.Errorf("%w: %s: %w %s", ErrInvalidSignatureInput, label, ErrDuplicateComponent, c.id)
			}
		}
		s.Components = append(s.Components, c)
	}
	if il.Params == nil {
		return s, nil
	}
	for _, name := range il.Params.Names() {
		v, _ := il.Params.Get(name)
		bad := false
		switch name {
		case "created", "expires":
			n, ok := v.(int64)
			if !ok || n < 0 {
				bad = true
				break
			}
			if name == "created" {
				s.Params.Created, s.Params.HasCreated = n, true
			} else {
				s.Params.Expires, s.Params.HasExpires = n, true
			}
		case "keyid", "alg", "nonce", "tag":
			str, ok := v.(string)
			if !ok {
				bad = true
				break
			}
			switch name {
			case "keyid":
				s.Params.KeyID = str
			case "alg":
				s.Params.Alg = str
			case "nonce":
				s.Params.Nonce = str
			case "tag":
				s.Params.Tag = str
			}
		}
		if bad {
			return Signature{}, fmt.Errorf("%w: %s: parameter %s has the wrong type", ErrInvalidSignatureInput, label, name)
		}
	}
	return s, nil
}

// newInner builds the inner list for signing: components then parameters in
// the order created, keyid, alg, expires, nonce, tag.
func newInner(comps []Component, p Params) httpsfv.InnerList {
	items := make([]httpsfv.Item, len(comps))
	for i, c := range comps {
		items[i] = c.item()
	}
	params := httpsfv.NewParams()
	if p.HasCreated {
		params.Add("created", p.Created)
	}
	if p.KeyID != "" {
		params.Add("keyid", p.KeyID)
	}
	if p.Alg != "" {
		params.Add("alg", p.Alg)
	}
	if p.HasExpires {
		params.Add("expires", p.Expires)
	}
	if p.Nonce != "" {
		params.Add("nonce", p.Nonce)
	}
	if p.Tag != "" {
		params.Add("tag", p.Tag)
	}
	return httpsfv.InnerList{Items: items, Params: params}
}

// SignatureAgent is a parsed Signature-Agent field (web-bot-auth). It holds
// either dictionary members (label → origin) or one legacy string.
type SignatureAgent struct {
	members map[string]string
	order   []string
	legacy  string
}

// ErrInvalidSignatureAgent means Signature-Agent does not parse or names an
// unusable origin.
var ErrInvalidSignatureAgent = errors.New("signer: invalid signature agent")

// ParseSignatureAgent parses the three accepted forms: a dictionary with
// string members (sig1="https://h"), a dictionary with token members
// (sig1=h; no scheme means https), and a legacy sf-string ("https://h").
// Each origin is normalized with NormalizeOrigin.
func ParseSignatureAgent(values []string) (SignatureAgent, error) {
	joined := strings.Join(values, ", ")
	if strings.HasPrefix(strings.TrimSpace(joined), `"`) {
		it, err := httpsfv.UnmarshalItem(values)
		if err != nil {
			return SignatureAgent{}, fmt.Errorf("%w: %v", ErrInvalidSignatureAgent, err)
		}
		s, ok := it.Value.(string)
		if !ok {
			return SignatureAgent{}, fmt.Errorf("%w: not a string", ErrInvalidSignatureAgent)
		}
		o, err := NormalizeOrigin(s)
		if err != nil {
			return SignatureAgent{}, err
		}
		return SignatureAgent{legacy: o}, nil
	}
	d, err := httpsfv.UnmarshalDictionary(values)
	if err != nil {
		return SignatureAgent{}, fmt.Errorf("%w: %v", ErrInvalidSignatureAgent, err)
	}
	sa := SignatureAgent{members: map[string]string{}}
	for _, k := range d.Names() {
		m, _ := d.Get(k)
		it, ok := m.(httpsfv.Item)
		if !ok {
			return SignatureAgent{}, fmt.Errorf("%w: member %s is an inner list", ErrInvalidSignatureAgent, k)
		}
		var raw string
		switch v := it.Value.(type) {
		case string:
			raw = v
		case httpsfv.Token:
			raw = string(v)
		default:
			return SignatureAgent{}, fmt.Errorf("%w: member %s is not a string or token", ErrInvalidSignatureAgent, k)
		}
		o, err := NormalizeOrigin(raw)
		if err != nil {
			return SignatureAgent{}, err
		}
		sa.members[k] = o
		sa.order = append(sa.order, k)
	}
	if len(sa.order) == 0 {
		return SignatureAgent{}, fmt.Errorf("%w: empty", ErrInvalidSignatureAgent)
	}
	return sa, nil
}

// Legacy reports whether the field was a bare sf-string.
func (a SignatureAgent) Legacy() bool { return a.legacy != "" }

// Member returns the origin of the member named key.
func (a SignatureAgent) Member(key string) (string, bool) {
	o, ok := a.members[key]
	return o, ok
}

// Only returns the origin when the field holds exactly one (the legacy string
// or a single member).
func (a SignatureAgent) Only() (string, bool) {
	if a.legacy != "" {
		return a.legacy, true
	}
	if len(a.order) == 1 {
		return a.members[a.order[0]], true
	}
	return "", false
}

// NormalizeOrigin turns a Signature-Agent value into an origin
// scheme://host[:port]: no scheme means https; the scheme must be http or
// https; no user info, query or fragment; the path must be empty or "/";
// the host is lowercased and the default port dropped.
func NormalizeOrigin(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidSignatureAgent)
	}
	scheme, rest := "https", s
	if i := strings.Index(s, "://"); i >= 0 {
		scheme, rest = lower(s[:i]), s[i+3:]
	}
	if scheme != "https" && scheme != "http" {
		return "", fmt.Errorf("%w: scheme %q is not http or https", ErrInvalidSignatureAgent, truncate(scheme))
	}
	rest = strings.TrimSuffix(rest, "/")
	if rest == "" || strings.ContainsAny(rest, "/?#@\\ %") {
		return "", fmt.Errorf("%w: %q is not an origin", ErrInvalidSignatureAgent, truncate(s))
	}
	host := NormalizeAuthority(scheme, rest)
	if !ValidAuthority(host) {
		return "", fmt.Errorf("%w: %q is not an origin", ErrInvalidSignatureAgent, truncate(s))
	}
	return scheme + "://" + host, nil
}

// ValidAuthority reports whether h is a host[:port] authority: a DNS name
// (letters, digits, '-', '_', '.'), an IPv4 address or a bracketed IPv6
// address, then at most one port of 1 to 5 digits. "localhost:1:80" and
// "host:" are not.
func ValidAuthority(h string) bool {
	host, port := h, ""
	if strings.HasPrefix(h, "[") {
		i := strings.IndexByte(h, ']')
		if i < 0 {
			return false
		}
		host, port = h[1:i], strings.TrimPrefix(h[i+1:], ":")
		if h[i+1:] != "" && !strings.HasPrefix(h[i+1:], ":") {
			return false
		}
		for _, c := range host {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == ':' || c == '.') {
				return false
			}
		}
	} else {
		if i := strings.LastIndexByte(h, ':'); i >= 0 {
			host, port = h[:i], h[i+1:]
			if port == "" {
				return false
			}
		}
		if host == "" || len(host) > 253 {
			return false
		}
		for i := 0; i < len(host); i++ {
			c := host[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
				return false
			}
		}
	}
	if len(port) > 5 {
		return false
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
	}
	return true
}

// The functions below serialize parsed structured-field values (RFC 8941
// §4.1) straight into a byte slice, without httpsfv's strings.Builder and
// per-value conversions. They cover the bare item types found in signature
// inputs (strings, integers, booleans, tokens); for anything else, or a
// value httpsfv would refuse to serialize, they report !ok and the caller
// falls back to httpsfv.Marshal, which then yields the same bytes or the
// error. They never parse: the input is always httpsfv's own parse result.

// appendInnerList appends the serialization of il (§4.1.1.1).
func appendInnerList(b []byte, il httpsfv.InnerList) ([]byte, bool) {
	b = append(b, '(')
	for i, it := range il.Items {
		if i > 0 {
			b = append(b, ' ')
		}
		var ok bool
		if b, ok = appendItem(b, it); !ok {
			return b, false
		}
	}
	b = append(b, ')')
	return appendParams(b, il.Params)
}

// appendItem appends the serialization of it (§4.1.3).
func appendItem(b []byte, it httpsfv.Item) ([]byte, bool) {
	b, ok := appendBareItem(b, it.Value)
	if !ok {
		return b, false
	}
	return appendParams(b, it.Params)
}

// appendParams appends the serialization of p (§4.1.1.2). A nil p is not
// serializable (httpsfv reports ErrMissingParameters).
func appendParams(b []byte, p *httpsfv.Params) ([]byte, bool) {
	if p == nil {
		return b, false
	}
	for _, k := range p.Names() {
		if !validKey(k) {
			return b, false
		}
		b = append(b, ';')
		b = append(b, k...)
		v, _ := p.Get(k)
		if v == true {
			continue
		}
		b = append(b, '=')
		var ok bool
		if b, ok = appendBareItem(b, v); !ok {
			return b, false
		}
	}
	return b, true
}

// appendBareItem appends a string (§4.1.6), an integer (§4.1.4), a boolean
// (§4.1.9) or a token (§4.1.7).
func appendBareItem(b []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case string:
		b = append(b, '"')
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c < 0x20 || c > 0x7e {
				return b, false
			}
			if c == '"' || c == '\\' {
				b = append(b, '\\')
			}
			b = append(b, c)
		}
		return append(b, '"'), true
	case int64:
		if v < -999_999_999_999_999 || v > 999_999_999_999_999 {
			return b, false
		}
		return strconv.AppendInt(b, v, 10), true
	case bool:
		if v {
			return append(b, "?1"...), true
		}
		return append(b, "?0"...), true
	case httpsfv.Token:
		if !validToken(string(v)) {
			return b, false
		}
		return append(b, v...), true
	}
	return b, false
}

// validKey reports whether k is an RFC 8941 key: lcalpha or "*", then
// lcalpha, DIGIT, "_", "-", "." or "*".
func validKey(k string) bool {
	if k == "" || !(k[0] >= 'a' && k[0] <= 'z' || k[0] == '*') {
		return false
	}
	for i := 1; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*') {
			return false
		}
	}
	return true
}

// validToken reports whether t is an RFC 8941 token: ALPHA or "*", then
// tchar, ":" or "/".
func validToken(t string) bool {
	if t == "" || !(t[0] >= 'a' && t[0] <= 'z' || t[0] >= 'A' && t[0] <= 'Z' || t[0] == '*') {
		return false
	}
	for i := 1; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0) {
			return false
		}
	}
	return true
}

// marshalInnerList serializes il, through the fast path when it applies.
func marshalInnerList(il httpsfv.InnerList) (string, error) {
	var buf [256]byte
	if b, ok := appendInnerList(buf[:0], il); ok {
		return string(b), nil
	}
	return httpsfv.Marshal(il)
}

// marshalItem serializes it, through the fast path when it applies.
func marshalItem(it httpsfv.Item) (string, error) {
	var buf [128]byte
	if b, ok := appendItem(buf[:0], it); ok {
		return string(b), nil
	}
	return httpsfv.Marshal(it)
}
