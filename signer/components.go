package signer

import (
	"fmt"
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
		return Component{}, fmt.Errorf("%w %s: %v", errInvalidComponent, s, err)
	}
	return componentFromItem(it)
}

// componentFromItem validates an inner-list item parsed by httpsfv.
func componentFromItem(it httpsfv.Item) (Component, error) {
	name, ok := it.Value.(string)
	if !ok {
		return Component{}, fmt.Errorf("%w: identifier is not a string", errInvalidComponent)
	}
	ps, ok := paramsFromHTTPSFV(it.Params)
	if !ok {
		return Component{}, fmt.Errorf("%w %q: parameters do not serialize", errInvalidComponent, name)
	}
	return newComponent(name, ps)
}

// newComponent validates a component name and its parameters and computes
// its serialized identifier.
func newComponent(name string, ps []param) (Component, error) {
	if name == "" || name != lower(name) {
		return Component{}, fmt.Errorf("%w %q: names must be lowercase and non-empty", errInvalidComponent, name)
	}
	c := Component{Name: name}
	isDerived := name[0] == '@'
	for _, p := range ps {
		v := p.val
		switch p.key {
		case "key":
			if v.kind != kindString || isDerived {
				return Component{}, fmt.Errorf("%w %q: bad key parameter", errInvalidComponent, name)
			}
			c.Key = v.s
		case "sf", "bs", "req":
			if v.kind != kindBoolean || (isDerived && p.key != "req") {
				return Component{}, fmt.Errorf("%w %q: bad %s parameter", errInvalidComponent, name, p.key)
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
				return Component{}, fmt.Errorf("%w %q: bad name parameter", errInvalidComponent, name)
			}
			c.Param = v.s
		default:
			// tr (trailers) and unknown parameters are not supported.
			return Component{}, fmt.Errorf("%w %q: parameter %q is not supported", errUnknownComponent, name, p.key)
		}
	}
	if isDerived {
		if !derived[name] {
			return Component{}, fmt.Errorf("%w %q", errUnknownComponent, name)
		}
		if name == "@query-param" && c.Param == "" {
			return Component{}, fmt.Errorf("%w %q: needs a name parameter", errInvalidComponent, name)
		}
	} else if !validFieldName(name) {
		return Component{}, fmt.Errorf("%w %q: not a field name", errInvalidComponent, name)
	}
	if c.Key != "" && c.SF || c.BS && (c.SF || c.Key != "") {
		return Component{}, fmt.Errorf("%w %q: key, sf and bs exclude each other", errInvalidComponent, name)
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
		return Component{}, fmt.Errorf("%w %q: parameters do not serialize", errInvalidComponent, name)
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
