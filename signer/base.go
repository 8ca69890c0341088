package signer

import (
	"errors"
	"fmt"
	"net/http"
)

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
	// params are all the signature parameters in order, re-serialized for
	// @signature-params (never the raw header text).
	params []param
}

// SignatureParams returns the @signature-params value: the inner list
// re-serialized from its parsed form (never the raw header text).
func (s *Signature) SignatureParams() (string, error) {
	b, err := s.appendSignatureParams(make([]byte, 0, 256))
	return string(b), err
}

func (s *Signature) appendSignatureParams(b []byte) ([]byte, error) {
	b = append(b, '(')
	for i, c := range s.Components {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, c.id...)
	}
	b = append(b, ')')
	b, ok := appendParams(b, s.params)
	if !ok {
		return nil, fmt.Errorf("%w: %s: parameters do not serialize", errInvalidSignatureInput, s.Label)
	}
	return b, nil
}

// Covers reports whether the signature covers a component with this
// serialized identifier, e.g. `"@authority"`.
func (s *Signature) Covers(id string) bool {
	for i := range s.Components {
		if s.Components[i].id == id {
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
	return s.AppendBase(nil, r)
}

// AppendBase appends the signature base for r to dst (which may be a
// reused buffer) and returns the extended slice. Each component's value is
// computed once; the query of r is parsed at most once.
func (s *Signature) AppendBase(dst []byte, r *http.Request) ([]byte, error) {
	m := message{r: r}
	return s.appendBase(dst, &m)
}

// AppendResponseBase appends the signature base of a response signature
// (RFC 9421 §2.4): fields and @status from resp, components marked ;req
// from resp.Request. Key directories sign their responses this way.
func (s *Signature) AppendResponseBase(dst []byte, resp *http.Response) ([]byte, error) {
	m := message{r: resp.Request, resp: resp}
	return s.appendBase(dst, &m)
}

func (s *Signature) appendBase(b []byte, m *message) ([]byte, error) {
	var err error
	for i := range s.Components {
		c := &s.Components[i]
		b = append(b, c.id...)
		b = append(b, ": "...)
		if b, err = c.appendValue(b, m); err != nil {
			return nil, err
		}
		b = append(b, '\n')
	}
	b = append(b, `"@signature-params": `...)
	return s.appendSignatureParams(b)
}

// SignatureBase builds the signature base for r from a Signature-Input inner
// list given as its serialized text (`("@authority");created=…`).
func SignatureBase(r *http.Request, signatureParams string) ([]byte, error) {
	ms, err := parseDict("sig="+signatureParams, 0)
	if err != nil || len(ms) != 1 || !ms[0].inner {
		return nil, fmt.Errorf("%w: signature params do not parse as one inner list", errInvalidSignatureInput)
	}
	sig, err := signatureFromMember(&ms[0], 0, false)
	if err != nil {
		return nil, err
	}
	return sig.Base(r)
}

// Limits bound what a verifier accepts, so that refusing a hostile request
// costs time linear in its size. ParseSignaturesLimited applies the first
// four (a zero field is no limit there); a verifier (the middleware's
// Config.Limits) applies them all, a zero field meaning its default.
type Limits struct {
	// MaxSignatures bounds the labels of Signature-Input (ErrTooManySignatures).
	MaxSignatures int
	// MaxComponents bounds the components of one signature (ErrTooManyComponents).
	MaxComponents int
	// MaxFieldBytes bounds the length of Signature-Input and of Signature,
	// all lines joined (ErrFieldTooLarge); a verifier bounds Signature-Agent
	// by it too.
	MaxFieldBytes int
	// Tag, if set, selects the signatures to validate and return: those
	// whose tag parameter is Tag (others are not looked at beyond their
	// syntax). When none has it, every signature is validated and returned.
	// A verifier takes it from its own configuration.
	Tag string

	// MaxSignatureAgentMembers bounds the members of Signature-Agent.
	MaxSignatureAgentMembers int
	// MaxNonceLength and MaxKeyIDLength bound the nonce and keyid, in bytes.
	MaxNonceLength, MaxKeyIDLength int
	// MaxVerifyCost bounds the signature checks of one request by their
	// price, in units of one Ed25519 verification (PublicKey.VerifyCost).
	MaxVerifyCost int
	// MaxRSABits is the largest RSA modulus a verifier uses, between
	// DefaultMaxRSABits and LimitRSABits (what ParseKeySetJWK accepts).
	// Raising it lets a trusted key set make each check cost several times
	// as much: raise MaxVerifyCost with it, or such keys are refused.
	MaxRSABits int
}

// ParseSignatures parses the Signature-Input and Signature fields (each
// possibly split over several lines) as RFC 8941 dictionaries and pairs the
// members by label. Every Signature-Input member must have a Signature
// member and vice versa. A signature covering one component twice is
// refused (ErrDuplicateComponent).
func ParseSignatures(signatureInput, signature []string) ([]Signature, error) {
	return ParseSignaturesLimited(signatureInput, signature, Limits{})
}

// ParseSignaturesLimited is ParseSignatures with limits, checked before
// anything else is done (field sizes) and while parsing (counts), so the
// work done on an oversized field is bounded by the limits.
func ParseSignaturesLimited(signatureInput, signature []string, lim Limits) ([]Signature, error) {
	if lim.MaxFieldBytes > 0 {
		if n := fieldLen(signatureInput); n > lim.MaxFieldBytes {
			return nil, fmt.Errorf("%w: %w: Signature-Input is %d bytes, more than %d", errInvalidSignatureInput, ErrFieldTooLarge, n, lim.MaxFieldBytes)
		}
		if n := fieldLen(signature); n > lim.MaxFieldBytes {
			return nil, fmt.Errorf("%w: %w: Signature is %d bytes, more than %d", errInvalidSignatureInput, ErrFieldTooLarge, n, lim.MaxFieldBytes)
		}
	}
	var inBuf, svBuf [2]member
	in, err := parseDictInto(joinLines(signatureInput), lim.MaxSignatures, inBuf[:0])
	if err != nil {
		if errors.Is(err, errTooManyMembers) {
			return nil, fmt.Errorf("%w: %w: Signature-Input has more than %d labels", errInvalidSignatureInput, ErrTooManySignatures, lim.MaxSignatures)
		}
		return nil, fmt.Errorf("%w: Signature-Input: %v", errInvalidSignatureInput, err)
	}
	if len(in) == 0 {
		return nil, fmt.Errorf("%w: Signature-Input is empty", errInvalidSignatureInput)
	}
	sv, err := parseDictInto(joinLines(signature), len(in), svBuf[:0])
	if err != nil {
		if errors.Is(err, errTooManyMembers) {
			return nil, fmt.Errorf("%w: Signature and Signature-Input name different labels", errInvalidSignatureInput)
		}
		return nil, fmt.Errorf("%w: Signature: %v", errInvalidSignatureInput, err)
	}
	if len(sv) != len(in) {
		return nil, fmt.Errorf("%w: Signature and Signature-Input name different labels", errInvalidSignatureInput)
	}
	selected := 0
	if lim.Tag != "" {
		for i := range in {
			if hasTag(&in[i], lim.Tag) {
				selected++
			}
		}
	}
	out := make([]Signature, 0, max(selected, 1))
	for i := range in {
		if selected > 0 && !hasTag(&in[i], lim.Tag) {
			continue
		}
		s, err := signatureFromMember(&in[i], lim.MaxComponents, true)
		if err != nil {
			return nil, err
		}
		v := findMember(sv, in[i].key)
		if v == nil {
			return nil, fmt.Errorf("%w: no Signature for label %s", errInvalidSignatureInput, in[i].key)
		}
		if v.inner || v.item.val.kind != kindBytes {
			return nil, fmt.Errorf("%w: Signature %s is not a byte sequence", errInvalidSignatureInput, in[i].key)
		}
		s.Value = v.item.val.bytes()
		out = append(out, s)
	}
	return out, nil
}

// hasTag reports whether the Signature-Input member m has tag="tag".
func hasTag(m *member, tag string) bool {
	v, ok := getParam(m.params, "tag")
	return ok && v.kind == kindString && v.s == tag
}

// findMember returns the member of ms named key, or nil. When the lists are
// in the same order (as signers write them) it finds it at once.
func findMember(ms []member, key string) *member {
	for i := range ms {
		if ms[i].key == key {
			return &ms[i]
		}
	}
	return nil
}

// signatureFromMember validates one Signature-Input member: an inner list
// of component identifiers, each once, with the signature parameters.
// named says whether the member's key is a label the sender wrote (a
// Signature-Input header) rather than one made up here to parse an inner
// list given alone ("sig", "dir"): errors name the label only then.
func signatureFromMember(m *member, maxComponents int, named bool) (Signature, error) {
	label := m.key
	if !m.inner {
		return Signature{}, fmt.Errorf("%w: Signature-Input %s is not an inner list", errInvalidSignatureInput, label)
	}
	if maxComponents > 0 && len(m.items) > maxComponents {
		return Signature{}, fmt.Errorf("%w: %s%w: %d, more than %d", errInvalidSignatureInput, labelAt(label, named), ErrTooManyComponents, len(m.items), maxComponents)
	}
	s := Signature{Label: label, params: m.params, Components: make([]Component, 0, len(m.items))}
	for _, it := range m.items {
		if it.val.kind != kindString {
			return Signature{}, fmt.Errorf("%w: %s%w: identifier is not a string", errInvalidSignatureInput, labelAt(label, named), errInvalidComponent)
		}
		c, err := newComponent(it.val.s, it.params)
		if err != nil {
			return Signature{}, fmt.Errorf("%w: %s%w", errInvalidSignatureInput, labelAt(label, named), err)
		}
		s.Components = append(s.Components, c)
	}
	if err := checkDuplicates(s.Components); err != nil {
		return Signature{}, fmt.Errorf("%w: %s%w", errInvalidSignatureInput, labelAt(label, named), err)
	}
	for _, p := range m.params {
		v := p.val
		bad := false
		switch p.key {
		case "created", "expires":
			if bad = v.kind != kindInteger || v.n < 0; !bad {
				if p.key == "created" {
					s.Params.Created, s.Params.HasCreated = v.n, true
				} else {
					s.Params.Expires, s.Params.HasExpires = v.n, true
				}
			}
		case "keyid", "alg", "nonce", "tag":
			if bad = v.kind != kindString; !bad {
				switch p.key {
				case "keyid":
					s.Params.KeyID = v.s
				case "alg":
					s.Params.Alg = v.s
				case "nonce":
					s.Params.Nonce = v.s
				case "tag":
					s.Params.Tag = v.s
				}
			}
		}
		if bad {
			return Signature{}, fmt.Errorf("%w: %sparameter %s has the wrong type", errInvalidSignatureInput, labelAt(label, named), p.key)
		}
	}
	return s, nil
}

// labelAt is how errors name a signature's label: "sig1: ", or "" for a
// label made up by the parser (see signatureFromMember).
func labelAt(label string, named bool) string {
	if !named {
		return ""
	}
	return label + ": "
}

// checkDuplicates refuses a component listed twice.
func checkDuplicates(cs []Component) error {
	if i := duplicateAt(cs, func(c Component) string { return c.id }); i >= 0 {
		return fmt.Errorf("%w %s", ErrDuplicateComponent, cs[i].id)
	}
	return nil
}

// maxLinearDup is the length up to which duplicateAt compares each key
// with every earlier one; above it, it uses a set.
const maxLinearDup = 16

// duplicateAt returns the index of the first element of xs whose key an
// earlier element has, or -1. The cost stays linear in len(xs).
func duplicateAt[T any](xs []T, key func(T) string) int {
	if len(xs) <= maxLinearDup {
		for i := 1; i < len(xs); i++ {
			k := key(xs[i])
			for j := 0; j < i; j++ {
				if key(xs[j]) == k {
					return i
				}
			}
		}
		return -1
	}
	seen := make(map[string]struct{}, len(xs))
	for i := range xs {
		k := key(xs[i])
		if _, dup := seen[k]; dup {
			return i
		}
		seen[k] = struct{}{}
	}
	return -1
}

// newSignature builds a signature for signing: components then parameters
// in the order created, keyid, alg, expires, nonce, tag.
func newSignature(label string, comps []Component, p Params) Signature {
	ps := make([]param, 0, 6)
	for _, q := range [...]struct {
		present bool
		param
	}{
		{p.HasCreated, param{"created", bareItem{kind: kindInteger, n: p.Created}}},
		{p.KeyID != "", param{"keyid", bareItem{kind: kindString, s: p.KeyID}}},
		{p.Alg != "", param{"alg", bareItem{kind: kindString, s: p.Alg}}},
		{p.HasExpires, param{"expires", bareItem{kind: kindInteger, n: p.Expires}}},
		{p.Nonce != "", param{"nonce", bareItem{kind: kindString, s: p.Nonce}}},
		{p.Tag != "", param{"tag", bareItem{kind: kindString, s: p.Tag}}},
	} {
		if q.present {
			ps = append(ps, q.param)
		}
	}
	return Signature{Label: label, Components: comps, Params: p, params: ps}
}
