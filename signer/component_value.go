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
// for a malformed Host, and another error when the value cannot be
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
		return nil, fmt.Errorf("%w %s: req applies to response signatures only", errInvalidComponent, c.id)
	case m.resp == nil && c.Name == "@status":
		return nil, fmt.Errorf("%w %s: @status applies to response signatures only", errInvalidComponent, c.id)
	case m.resp != nil && c.Name == "@status":
		return strconv.AppendInt(b, int64(m.resp.StatusCode), 10), nil
	case m.resp != nil && !c.Req && c.Name[0] == '@':
		return nil, fmt.Errorf("%w %s: a response signature takes request components with ;req", errInvalidComponent, c.id)
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
		return nil, fmt.Errorf("%w %s: value is not printable ASCII", errInvalidComponent, c.id)
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
		return "", fmt.Errorf("%w @query-param: %v", errInvalidComponent, m.queryErr)
	}
	vals := m.query[name]
	switch {
	case len(vals) == 0:
		return "", fmt.Errorf("%w @query-param %q", ErrMissingComponent, name)
	case len(vals) > 1:
		return "", fmt.Errorf("%w @query-param %q: occurs more than once", errInvalidComponent, name)
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
		return nil, fmt.Errorf("%w %s: value is not printable ASCII", errInvalidComponent, c.id)
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
			return nil, fmt.Errorf("%w %s: not a dictionary: %v", errInvalidComponent, c.id, err)
		}
		m := findMember(ms, c.Key)
		if m == nil {
			return nil, fmt.Errorf("%w %s", ErrMissingComponent, c.id)
		}
		out, ok := appendMemberValue(b[:start], m)
		if !ok {
			return nil, fmt.Errorf("%w %s: the member does not serialize", errInvalidComponent, c.id)
		}
		return out, nil
	case c.SF:
		s, err := reserializeSF(value())
		if err != nil {
			return nil, fmt.Errorf("%w %s: %v", errInvalidComponent, c.id, err)
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

// escapedPath is the @path of r: its escaped path, "/" when empty.
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
