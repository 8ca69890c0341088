package signer

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/dunglas/httpsfv"
)

// Component is one covered component identifier: a name (lowercase; derived
// components start with "@") and its parameters (RFC 9421 §2.1, §2.2).
type Component struct {
	Name string
	// Key is the ;key= parameter: the dictionary member of the field.
	Key string
	// SF is the ;sf parameter: re-serialize the field as a structured field.
	SF bool
	// BS is the ;bs parameter: wrap each field line as a byte sequence.
	BS bool
	// Req is the ;req parameter: in a response signature, the component is
	// taken from the request that caused the response.
	Req bool
	// Param is the ;name= parameter of @query-param.
	Param string
	// id is the serialized identifier, e.g. `"signature-agent";key="sig1"`.
	id string
}

// ID returns the serialized component identifier as it appears in the
// signature base and in Signature-Input, e.g. `"@authority"`.
func (c Component) ID() string { return c.id }

// String returns ID.
func (c Component) String() string { return c.id }

var derived = map[string]bool{
	"@method": true, "@authority": true, "@scheme": true, "@target-uri": true,
	"@request-target": true, "@path": true, "@query": true, "@query-param": true,
	"@status": true, // responses only
}

// ParseComponent parses a component given either as a bare name
// ("@authority", "Content-Digest") or as a serialized sf-item
// (`"signature-agent";key="sig1"`).
func ParseComponent(s string) (Component, error) {
	if !strings.HasPrefix(s, `"`) {
		return newComponent(strings.ToLower(s), nil)
	}
	p := fastScanner{s: s}
	if name, ok := p.str(); ok {
		if ps, ok := p.params(); ok && p.eof() {
			return newComponent(name, ps)
		}
	}
	it, err := httpsfv.UnmarshalItem([]string{s})
	if err != nil {
		return Component{}, fmt.Errorf("%w %s: %v", ErrInvalidComponent, s, err)
	}
	return componentFromItem(it)
}

// componentFromItem validates an inner-list item parsed by httpsfv.
func componentFromItem(it httpsfv.Item) (Component, error) {
	name, ok := it.Value.(string)
	if !ok {
		return Component{}, fmt.Errorf("%w: identifier is not a string", ErrInvalidComponent)
	}
	ps, ok := paramsFromHTTPSFV(it.Params)
	if !ok {
		return Component{}, fmt.Errorf("%w %q: parameters do not serialize", ErrInvalidComponent, name)
	}
	return newComponent(name, ps)
}

// newComponent validates a component name and its parameters and computes
// its serialized identifier.
func newComponent(name string, ps []param) (Component, error) {
	if name == "" || name != lower(name) {
		return Component{}, fmt.Errorf("%w %q: names must be lowercase and non-empty", ErrInvalidComponent, name)
	}
	c := Component{Name: name}
	isDerived := name[0] == '@'
	for _, p := range ps {
		v := p.val
		switch p.key {
		case "key":
			if v.kind != kindString || isDerived {
				return Component{}, fmt.Errorf("%w %q: bad key parameter", ErrInvalidComponent, name)
			}
			c.Key = v.s
		case "sf", "bs", "req":
			if v.kind != kindBoolean || (isDerived && p.key != "req") {
				return Component{}, fmt.Errorf("%w %q: bad %s parameter", ErrInvalidComponent, name, p.key)
			}
			switch p.key {
			case "sf":
				c.SF = v.t
			case "bs":
				c.BS = v.t
			case "req":
				c.Req = v.t
			}
		case "name":
			if v.kind != kindString || name != "@query-param" {
				return Component{}, fmt.Errorf("%w %q: bad name parameter", ErrInvalidComponent, name)
			}
			c.Param = v.s
		default:
			// tr (trailers) and unknown parameters are not supported.
			return Component{}, fmt.Errorf("%w %q: parameter %q is not supported", ErrUnknownComponent, name, p.key)
		}
	}
	if isDerived {
		if !derived[name] {
			return Component{}, fmt.Errorf("%w %q", ErrUnknownComponent, name)
		}
		if name == "@query-param" && c.Param == "" {
			return Component{}, fmt.Errorf("%w %q: needs a name parameter", ErrInvalidComponent, name)
		}
	} else if !validFieldName(name) {
		return Component{}, fmt.Errorf("%w %q: not a field name", ErrInvalidComponent, name)
	}
	if c.Key != "" && c.SF || c.BS && (c.SF || c.Key != "") {
		return Component{}, fmt.Errorf("%w %q: key, sf and bs exclude each other", ErrInvalidComponent, name)
	}
	if len(ps) == 0 {
		// The name is a validated field name or derived component name, so
		// it needs no escaping: the identifier is the name in quotes.
		if id, ok := knownIDs[name]; ok {
			c.id = id
		} else {
			c.id = `"` + name + `"`
		}
		return c, nil
	}
	var buf [96]byte
	b, _ := appendBare(buf[:0], bareItem{kind: kindString, s: name})
	b, ok := appendParams(b, ps)
	if !ok {
		return Component{}, fmt.Errorf("%w %q: parameters do not serialize", ErrInvalidComponent, name)
	}
	if id, ok := knownIDs[string(b)]; ok {
		c.id = id
	} else {
		c.id = string(b)
	}
	return c, nil
}

// canonicalNames maps common covered field names to their canonical
// http.Header keys.
var canonicalNames = map[string]string{
	"content-digest": "Content-Digest", "content-type": "Content-Type", "content-length": "Content-Length",
	"signature-agent": "Signature-Agent", "date": "Date", "authorization": "Authorization",
}

// knownIDs holds the serialized identifiers of common components, by name
// (and of common components with parameters, by identifier), so parsing
// them allocates nothing.
var knownIDs = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{"@method", "@authority", "@scheme", "@target-uri", "@request-target",
		"@path", "@query", "content-digest", "content-type", "content-length", "signature-agent",
		"date", "host", "authorization"} {
		m[n] = `"` + n + `"`
	}
	// With parameters, keyed by the identifier itself (which, unlike a
	// name, starts with a quote): the Signature-Agent member signers cover.
	id := `"signature-agent";key="` + DefaultLabel + `"`
	m[id] = id
	return m
}()

func validFieldName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
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

// Authority returns the @authority value of r: the host (r.Host, else the
// URL's host), lowercase, with the scheme's default port removed (RFC 9421
// §2.2.3). A malformed host is returned as NormalizeAuthority leaves it;
// ParseAuthority refuses it.
func Authority(r *http.Request) string {
	return NormalizeAuthority(Scheme(r), requestHost(r))
}

func requestHost(r *http.Request) string {
	if r.Host == "" && r.URL != nil {
		return r.URL.Host
	}
	return r.Host
}

// ParseAuthority validates host (ValidAuthority, before anything is
// dropped, so "localhost:3000:80" is refused rather than read as
// "localhost:3000") and returns it normalized as NormalizeAuthority does.
func ParseAuthority(scheme, host string) (string, error) {
	h := lower(host)
	if !ValidAuthority(h) {
		return "", fmt.Errorf("%w: %w: %q is not host[:port]", ErrInvalidAuthority, ErrInvalidComponent, Truncate(host))
	}
	return NormalizeAuthority(scheme, h), nil
}

// NormalizeAuthority lowercases host and drops the default port of scheme.
func NormalizeAuthority(scheme, host string) string {
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

func escapedPath(r *http.Request) string {
	if r.URL == nil {
		return "/"
	}
	p := r.URL.EscapedPath()
	if p == "" {
		return "/"
	}
	return p
}

// message is the request (or response) a signature base is built from,
// with what is computed at most once per base: the parsed query.
type message struct {
	r        *http.Request
	resp     *http.Response      // set for a response signature; r is then its request
	query    map[string][]string // re-encoded name → re-encoded values
	queryErr error
	parsed   bool
}

// Value returns the component's value in r (RFC 9421 §2.1–§2.2). It fails
// with ErrMissingComponent when the request lacks it, ErrInvalidAuthority
// for a malformed Host, and ErrInvalidComponent when the value cannot be
// represented (non-ASCII, bad structured field).
func (c Component) Value(r *http.Request) (string, error) {
	m := message{r: r}
	b, err := c.appendValue(nil, &m)
	return string(b), err
}

// appendValue appends the component's value in m to b.
func (c *Component) appendValue(b []byte, m *message) ([]byte, error) {
	r := m.r
	switch {
	case m.resp == nil && c.Req:
		return nil, fmt.Errorf("%w %s: req applies to response signatures only", ErrInvalidComponent, c.id)
	case m.resp == nil && c.Name == "@status":
		return nil, fmt.Errorf("%w %s: @status applies to response signatures only", ErrInvalidComponent, c.id)
	case m.resp != nil && c.Name == "@status":
		return strconv.AppendInt(b, int64(m.resp.StatusCode), 10), nil
	case m.resp != nil && !c.Req && c.Name[0] == '@':
		return nil, fmt.Errorf("%w %s: a response signature takes request components with ;req", ErrInvalidComponent, c.id)
	case m.resp != nil && !c.Req:
		return c.appendFieldLines(b, m.resp.Header[http.CanonicalHeaderKey(c.Name)])
	case m.resp != nil && r == nil:
		return nil, fmt.Errorf("%w %s: the response has no request", ErrMissingComponent, c.id)
	}
	start := len(b)
	switch c.Name {
	case "@method":
		if r.Method == "" {
			b = append(b, http.MethodGet...)
		} else {
			b = append(b, r.Method...)
		}
	case "@authority":
		a, err := ParseAuthority(Scheme(r), requestHost(r))
		if err != nil {
			return nil, err
		}
		b = append(b, a...)
	case "@scheme":
		b = append(b, Scheme(r)...)
	case "@target-uri":
		scheme := Scheme(r)
		a, err := ParseAuthority(scheme, requestHost(r))
		if err != nil {
			return nil, err
		}
		b = append(b, scheme...)
		b = append(b, "://"...)
		b = append(b, a...)
		b = appendRequestTarget(b, r)
	case "@request-target":
		b = appendRequestTarget(b, r)
	case "@path":
		b = append(b, escapedPath(r)...)
	case "@query":
		b = append(b, '?')
		if r.URL != nil {
			b = append(b, r.URL.RawQuery...)
		}
	case "@query-param":
		v, err := m.queryParam(c.Param)
		if err != nil {
			return nil, err
		}
		return append(b, v...), nil
	default:
		return c.appendFieldValue(b, r)
	}
	if !printableASCII(b[start:]) {
		return nil, fmt.Errorf("%w %s: value is not printable ASCII", ErrInvalidComponent, c.id)
	}
	return b, nil
}

func appendRequestTarget(b []byte, r *http.Request) []byte {
	b = append(b, escapedPath(r)...)
	if r.URL != nil && (r.URL.RawQuery != "" || r.URL.ForceQuery) {
		b = append(b, '?')
		b = append(b, r.URL.RawQuery...)
	}
	return b
}

// queryParam returns the re-encoded value of the query parameter whose
// re-encoded name is name (RFC 9421 §2.2.8). The query is parsed once per
// message, so covering many parameters costs time linear in the query.
func (m *message) queryParam(name string) (string, error) {
	if !m.parsed {
		m.parsed = true
		if m.r.URL != nil {
			m.query, m.queryErr = parseQuery(m.r.URL.RawQuery)
		}
	}
	if m.queryErr != nil {
		return "", fmt.Errorf("%w @query-param: %v", ErrInvalidComponent, m.queryErr)
	}
	vals := m.query[name]
	switch {
	case len(vals) == 0:
		return "", fmt.Errorf("%w @query-param %q", ErrMissingComponent, name)
	case len(vals) > 1:
		return "", fmt.Errorf("%w @query-param %q: occurs more than once", ErrInvalidComponent, name)
	}
	return vals[0], nil
}

// parseQuery decodes a query as application/x-www-form-urlencoded and
// re-encodes each name and value (RFC 9421 §2.2.8).
func parseQuery(raw string) (map[string][]string, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]string, len(q))
	for k, vs := range q {
		enc := make([]string, len(vs))
		for i, v := range vs {
			enc[i] = formEncode(v)
		}
		ek := formEncode(k)
		out[ek] = append(out[ek], enc...)
	}
	return out, nil
}

// formEncoder turns url.QueryEscape's output into the application/
// x-www-form-urlencoded percent-encode set of the URL standard, which
// RFC 9421 §2.2.8 uses: space as %20, "~" encoded, "*" left as is.
var formEncoder = strings.NewReplacer("+", "%20", "~", "%7E", "%2A", "*")

func formEncode(s string) string { return formEncoder.Replace(url.QueryEscape(s)) }

// appendFieldValue appends the value of an HTTP field component of r.
func (c *Component) appendFieldValue(b []byte, r *http.Request) ([]byte, error) {
	var vals []string
	switch c.Name {
	case "host":
		if r.Host != "" {
			vals = []string{r.Host}
		}
	default:
		if canon, ok := canonicalNames[c.Name]; ok {
			vals = r.Header[canon] // no canonicalization (and allocation) per request
		} else {
			vals = r.Header.Values(c.Name)
		}
		if len(vals) == 0 && c.Name == "content-length" && r.ContentLength > 0 {
			vals = []string{strconv.FormatInt(r.ContentLength, 10)}
		}
	}
	return c.appendFieldLines(b, vals)
}

// appendFieldLines appends the value of an HTTP field component (RFC 9421
// §2.1) from its field lines: trimmed and joined with ", ", or the member
// named by ;key, or the lines re-serialized (;sf) or wrapped (;bs).
func (c *Component) appendFieldLines(b []byte, vals []string) ([]byte, error) {
	if len(vals) == 0 {
		return nil, fmt.Errorf("%w %s", ErrMissingComponent, c.id)
	}
	if c.BS {
		for i, v := range vals {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, ':')
			b = base64.StdEncoding.AppendEncode(b, []byte(strings.TrimSpace(v)))
			b = append(b, ':')
		}
		return b, nil
	}
	start := len(b)
	for i, v := range vals {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, strings.Trim(v, " \t")...)
	}
	if !printableASCII(b[start:]) {
		return nil, fmt.Errorf("%w %s: value is not printable ASCII", ErrInvalidComponent, c.id)
	}
	// value is what b holds from start, as a string: a single field line
	// needs no copy.
	value := func() string {
		if len(vals) == 1 {
			return strings.Trim(vals[0], " \t")
		}
		return string(b[start:])
	}
	switch {
	case c.Key != "":
		ms, err := parseDict(value(), 0)
		if err != nil {
			return nil, fmt.Errorf("%w %s: not a dictionary: %v", ErrInvalidComponent, c.id, err)
		}
		m := findMember(ms, c.Key)
		if m == nil {
			return nil, fmt.Errorf("%w %s", ErrMissingComponent, c.id)
		}
		out, ok := appendMemberValue(b[:start], m)
		if !ok {
			return nil, fmt.Errorf("%w %s: the member does not serialize", ErrInvalidComponent, c.id)
		}
		return out, nil
	case c.SF:
		s, err := reserializeSF(value())
		if err != nil {
			return nil, fmt.Errorf("%w %s: %v", ErrInvalidComponent, c.id, err)
		}
		return append(b[:start], s...), nil
	}
	return b, nil
}

// reserializeSF parses v as an item, a list or a dictionary (in that order)
// and serializes it canonically.
func reserializeSF(v string) (string, error) {
	if it, err := httpsfv.UnmarshalItem([]string{v}); err == nil {
		return httpsfv.Marshal(it)
	}
	if l, err := httpsfv.UnmarshalList([]string{v}); err == nil {
		return httpsfv.Marshal(l)
	}
	d, err := httpsfv.UnmarshalDictionary([]string{v})
	if err != nil {
		return "", err
	}
	return httpsfv.Marshal(d)
}

func printableASCII(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			if c != '\t' {
				return false
			}
		}
	}
	return true
}
