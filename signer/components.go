package signer

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/dunglas/httpsfv"
)

// Errors about covered components (RFC 9421 §2). They are wrapped with the
// component name.
var (
	ErrUnknownComponent   = errors.New("signer: unknown component")
	ErrMissingComponent   = errors.New("signer: covered component absent from the request")
	ErrDuplicateComponent = errors.New("signer: duplicate covered component")
	ErrInvalidComponent   = errors.New("signer: invalid component")
)

// Component is one covered component identifier: a name (lowercase; derived
// components start with "@") and its parameters (RFC 9421 §2.1, §2.2).
type Component struct {
	Name string
	// Key is the ;key= parameter: the dictionary member of the field.
	Key string
	// SF is the ;sf parameter: re-serialize the field as a structured field.
	SF bool
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
}

// ParseComponent parses a component given either as a bare name
// ("@authority", "Content-Digest") or as a serialized sf-item
// (`"signature-agent";key="sig1"`).
func ParseComponent(s string) (Component, error) {
	if strings.HasPrefix(s, `"`) {
		it, err := httpsfv.UnmarshalItem([]string{s})
		if err != nil {
			return Component{}, fmt.Errorf("%w %s: %v", ErrInvalidComponent, s, err)
		}
		return componentFromItem(it)
	}
	return componentFromItem(httpsfv.Item{Value: strings.ToLower(s), Params: httpsfv.NewParams()})
}

// componentFromItem validates an inner-list item of Signature-Input.
func componentFromItem(it httpsfv.Item) (Component, error) {
	name, ok := it.Value.(string)
	if !ok {
		return Component{}, fmt.Errorf("%w: identifier is not a string", ErrInvalidComponent)
	}
	if name == "" || name != strings.ToLower(name) {
		return Component{}, fmt.Errorf("%w %q: names must be lowercase and non-empty", ErrInvalidComponent, name)
	}
	c := Component{Name: name}
	var pnames []string
	if it.Params != nil {
		pnames = it.Params.Names()
	}
	for _, p := range pnames {
		v, _ := it.Params.Get(p)
		switch p {
		case "key":
			s, ok := v.(string)
			if !ok || name[0] == '@' {
				return Component{}, fmt.Errorf("%w %q: bad key parameter", ErrInvalidComponent, name)
			}
			c.Key = s
		case "sf":
			b, ok := v.(bool)
			if !ok || name[0] == '@' {
				return Component{}, fmt.Errorf("%w %q: bad sf parameter", ErrInvalidComponent, name)
			}
			c.SF = b
		case "name":
			s, ok := v.(string)
			if !ok || name != "@query-param" {
				return Component{}, fmt.Errorf("%w %q: bad name parameter", ErrInvalidComponent, name)
			}
			c.Param = s
		default:
			// bs, req, tr and unknown parameters are not supported.
			return Component{}, fmt.Errorf("%w %q: parameter %q is not supported", ErrUnknownComponent, name, p)
		}
	}
	if name[0] == '@' {
		if !derived[name] {
			return Component{}, fmt.Errorf("%w %q", ErrUnknownComponent, name)
		}
		if name == "@query-param" && c.Param == "" {
			return Component{}, fmt.Errorf("%w %q: needs a name parameter", ErrInvalidComponent, name)
		}
	} else if !validFieldName(name) {
		return Component{}, fmt.Errorf("%w %q: not a field name", ErrInvalidComponent, name)
	}
	if c.Key != "" && c.SF {
		return Component{}, fmt.Errorf("%w %q: key and sf together", ErrInvalidComponent, name)
	}
	if len(pnames) == 0 {
		// The name is a validated field name or derived component name, so
		// it needs no escaping: the identifier is the name in quotes.
		if id, ok := knownIDs[name]; ok {
			c.id = id
		} else {
			c.id = `"` + name + `"`
		}
		return c, nil
	}
	id, err := marshalItem(it)
	if err != nil {
		return Component{}, fmt.Errorf("%w %q: %v", ErrInvalidComponent, name, err)
	}
	c.id = id
	return c, nil
}

// canonicalNames maps common covered field names to their canonical
// http.Header keys.
var canonicalNames = map[string]string{
	"content-digest": "Content-Digest", "content-type": "Content-Type", "content-length": "Content-Length",
	"signature-agent": "Signature-Agent", "date": "Date", "authorization": "Authorization",
}

// memberCache remembers the re-serialized dictionary member of a field value
// (the `;key=` component value, RFC 9421 §2.1.2): an agent sends the same
// Signature-Agent on every request, so it is parsed once. It is bounded
// (emptied when full) and holds only short values and successful results.
type memberCache struct {
	mu sync.RWMutex
	m  map[[2]string]string
}

const (
	memberCacheSize   = 1024
	memberCacheMaxLen = 512
)

var members = memberCache{m: map[[2]string]string{}}

func (c *memberCache) get(field, key string) (string, bool) {
	if len(field) > memberCacheMaxLen {
		return "", false
	}
	c.mu.RLock()
	s, ok := c.m[[2]string{field, key}]
	c.mu.RUnlock()
	return s, ok
}

func (c *memberCache) put(field, key, member string) {
	if len(field) > memberCacheMaxLen {
		return
	}
	c.mu.Lock()
	if len(c.m) >= memberCacheSize {
		clear(c.m)
	}
	c.m[[2]string{field, key}] = member
	c.mu.Unlock()
}

// knownIDs holds the serialized identifiers of common components, so
// parsing them allocates nothing.
var knownIDs = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{"@method", "@authority", "@scheme", "@target-uri", "@request-target",
		"@path", "@query", "content-digest", "content-type", "content-length", "signature-agent",
		"date", "host", "authorization"} {
		m[n] = `"` + n + `"`
	}
	return m
}()

func (c Component) item() httpsfv.Item {
	p := httpsfv.NewParams()
	if c.Key != "" {
		p.Add("key", c.Key)
	}
	if c.SF {
		p.Add("sf", true)
	}
	if c.Param != "" {
		p.Add("name", c.Param)
	}
	return httpsfv.Item{Value: c.Name, Params: p}
}

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
// URL's host), lowercase, with the scheme's default port removed (RFC 9421 §2.2.3).
func Authority(r *http.Request) string {
	host := r.Host
	if host == "" && r.URL != nil {
		host = r.URL.Host
	}
	return NormalizeAuthority(Scheme(r), host)
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

func requestTarget(r *http.Request) string {
	p := escapedPath(r)
	if r.URL != nil && (r.URL.RawQuery != "" || r.URL.ForceQuery) {
		return p + "?" + r.URL.RawQuery
	}
	return p
}

// Value returns the component's value in r (RFC 9421 §2.1–§2.2). It fails
// with ErrMissingComponent when the request lacks it and ErrInvalidComponent
// when the value cannot be represented (non-ASCII, bad structured field).
func (c Component) Value(r *http.Request) (string, error) {
	var v string
	switch c.Name {
	case "@method":
		v = r.Method
		if v == "" {
			v = http.MethodGet
		}
	case "@authority":
		v = Authority(r)
	case "@scheme":
		v = Scheme(r)
	case "@target-uri":
		v = Scheme(r) + "://" + Authority(r) + requestTarget(r)
	case "@request-target":
		v = requestTarget(r)
	case "@path":
		v = escapedPath(r)
	case "@query":
		v = "?"
		if r.URL != nil {
			v += r.URL.RawQuery
		}
	case "@query-param":
		return queryParam(r, c.Param)
	default:
		return c.fieldValue(r)
	}
	if !printableASCII(v) {
		return "", fmt.Errorf("%w %s: value is not printable ASCII", ErrInvalidComponent, c.id)
	}
	return v, nil
}

func queryParam(r *http.Request, name string) (string, error) {
	if r.URL == nil {
		return "", fmt.Errorf("%w @query-param %q", ErrMissingComponent, name)
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "", fmt.Errorf("%w @query-param: %v", ErrInvalidComponent, err)
	}
	// The name parameter is the re-encoded name (RFC 9421 §2.2.8), so
	// compare it with each decoded name re-encoded the same way.
	var vals []string
	for k, vs := range q {
		if formEncode(k) == name {
			vals = append(vals, vs...)
		}
	}
	switch {
	case len(vals) == 0:
		return "", fmt.Errorf("%w @query-param %q", ErrMissingComponent, name)
	case len(vals) > 1:
		return "", fmt.Errorf("%w @query-param %q: occurs more than once", ErrInvalidComponent, name)
	}
	return formEncode(vals[0]), nil
}

// formEncoder turns url.QueryEscape's output into the application/
// x-www-form-urlencoded percent-encode set of the URL standard, which
// RFC 9421 §2.2.8 uses: space as %20, "~" encoded, "*" left as is.
var formEncoder = strings.NewReplacer("+", "%20", "~", "%7E", "%2A", "*")

func formEncode(s string) string { return formEncoder.Replace(url.QueryEscape(s)) }

func (c Component) fieldValue(r *http.Request) (string, error) {
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
			vals = []string{fmt.Sprint(r.ContentLength)}
		}
	}
	if len(vals) == 0 {
		return "", fmt.Errorf("%w %s", ErrMissingComponent, c.id)
	}
	var v string
	if len(vals) == 1 {
		v = strings.TrimSpace(vals[0])
	} else {
		trimmed := make([]string, len(vals))
		for i, s := range vals {
			trimmed[i] = strings.TrimSpace(s)
		}
		v = strings.Join(trimmed, ", ")
	}
	if !printableASCII(v) {
		return "", fmt.Errorf("%w %s: value is not printable ASCII", ErrInvalidComponent, c.id)
	}
	switch {
	case c.Key != "":
		if s, ok := members.get(v, c.Key); ok {
			return s, nil
		}
		d, err := httpsfv.UnmarshalDictionary([]string{v})
		if err != nil {
			return "", fmt.Errorf("%w %s: not a dictionary: %v", ErrInvalidComponent, c.id, err)
		}
		m, ok := d.Get(c.Key)
		if !ok {
			return "", fmt.Errorf("%w %s", ErrMissingComponent, c.id)
		}
		var s string
		switch m := m.(type) {
		case httpsfv.Item:
			s, err = marshalItem(m)
		case httpsfv.InnerList:
			s, err = marshalInnerList(m)
		default:
			s, err = httpsfv.Marshal(m)
		}
		if err != nil {
			return "", fmt.Errorf("%w %s: %v", ErrInvalidComponent, c.id, err)
		}
		members.put(v, c.Key, s)
		return s, nil
	case c.SF:
		s, err := reserializeSF(v)
		if err != nil {
			return "", fmt.Errorf("%w %s: %v", ErrInvalidComponent, c.id, err)
		}
		return s, nil
	}
	return v, nil
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

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			if c != '\t' {
				return false
			}
		}
	}
	return true
}
