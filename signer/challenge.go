package signer

import (
	"errors"
	"fmt"
)

// This file reads what a refusal asks the next signature to cover: the
// Accept-Signature field (RFC 9421 §5.1) and the Signature-Error field of
// draft-hardt-httpbis-signature-key. Both come from a server the agent
// does not trust, so each is bounded before it is parsed, and anything
// this signer cannot do makes the whole challenge unusable (no retry)
// rather than half-obeyed.

// Bounds on a challenge. A field over them is refused unparsed.
const (
	maxChallengeBytes      = 4096 // one field, its lines joined
	maxChallengeMembers    = 16   // dictionary members of one field
	maxChallengeComponents = 32   // components one challenge may name
	maxChallengeNonce      = 256  // a nonce the server picks
)

// errChallenge is wrapped by every reason a challenge is not acted on.
var errChallenge = errors.New("signer: challenge")

// challenge is what a refusal asks of the next signature.
type challenge struct {
	// found: Accept-Signature has a member for this signer.
	found bool
	// label is the member's key (the label to sign under).
	label string
	// components are the identifiers the server asks to cover, parsed,
	// from Accept-Signature and required_input together.
	components []Component
	// nonce: the member asks for a nonce; nonceValue is the one it gives.
	nonce      bool
	nonceValue string
	// errCode is Signature-Error's error token ("" when absent).
	errCode string
}

// parseChallenge reads Accept-Signature (its member whose key is label,
// else the first one tagged tag) and Signature-Error from h. alg is the
// algorithm this signer signs with. An error means the challenge is
// malformed, over a bound, or asks for what this signer cannot do.
func parseChallenge(acceptSig, sigErr []string, label, tag, alg string) (challenge, error) {
	var ch challenge
	if len(sigErr) > 0 {
		code, required, err := parseSignatureError(sigErr)
		if err != nil {
			return challenge{}, err
		}
		ch.errCode = code
		ch.components = required
	}
	if len(acceptSig) > 0 {
		m, err := pickMember(acceptSig, label, tag)
		if err != nil {
			return challenge{}, err
		}
		if m != nil {
			ch.found, ch.label = true, m.key
			if err := ch.readMember(m, tag, alg); err != nil {
				return challenge{}, err
			}
		}
	}
	if len(ch.components) > maxChallengeComponents {
		return challenge{}, fmt.Errorf("%w: more than %d components", errChallenge, maxChallengeComponents)
	}
	return ch, nil
}

// boundedDict parses a dictionary field from a server, bounded.
func boundedDict(values []string, name string) ([]member, error) {
	if len(values) > maxChallengeMembers || fieldLen(values) > maxChallengeBytes {
		return nil, fmt.Errorf("%w: %s over %d bytes or %d lines", errChallenge, name, maxChallengeBytes, maxChallengeMembers)
	}
	ms, err := parseDict(joinLines(values), maxChallengeMembers)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errChallenge, name, err)
	}
	return ms, nil
}

// parseSignatureError reads Signature-Error: its error token and, for
// invalid_input, the components of required_input. Unknown members are
// ignored, as the draft requires.
func parseSignatureError(values []string) (string, []Component, error) {
	ms, err := boundedDict(values, "Signature-Error")
	if err != nil {
		return "", nil, err
	}
	code := ""
	var required []Component
	for i := range ms {
		m := &ms[i]
		switch m.key {
		case "error":
			if m.inner || m.item.val.kind != kindToken {
				return "", nil, fmt.Errorf("%w: Signature-Error: error is not a token", errChallenge)
			}
			code = m.item.val.s
		case "required_input":
			if !m.inner {
				return "", nil, fmt.Errorf("%w: Signature-Error: required_input is not an inner list", errChallenge)
			}
			if len(m.items) > maxChallengeComponents {
				return "", nil, fmt.Errorf("%w: required_input names more than %d components", errChallenge, maxChallengeComponents)
			}
			for _, it := range m.items {
				if it.val.kind != kindString {
					return "", nil, fmt.Errorf("%w: required_input holds a non-string", errChallenge)
				}
				c, err := requestComponent(it.val.s)
				if err != nil {
					return "", nil, fmt.Errorf("%w: required_input: %v", errChallenge, err)
				}
				required = append(required, c)
			}
		}
	}
	if code == "" {
		return "", nil, fmt.Errorf("%w: Signature-Error has no error", errChallenge)
	}
	if code != "invalid_input" {
		required = nil // required_input belongs to invalid_input only
	}
	return code, required, nil
}

// pickMember returns Accept-Signature's member whose key is label, else
// the first tagged tag, else nil.
func pickMember(values []string, label, tag string) (*member, error) {
	ms, err := boundedDict(values, "Accept-Signature")
	if err != nil {
		return nil, err
	}
	var tagged *member
	for i := range ms {
		m := &ms[i]
		if m.key == label {
			return m, nil
		}
		if v, ok := getParam(m.params, "tag"); ok && m.inner && tagged == nil && v.kind == kindString && v.s == tag {
			tagged = m
		}
	}
	return tagged, nil
}

// readMember adds the member's components and reads its parameters. The
// tag must be the signer's own and alg its algorithm; keyid is ignored
// (the signer has one key), created, expires and keyid are always sent,
// and unknown parameters are ignored.
func (ch *challenge) readMember(m *member, tag, alg string) error {
	if !m.inner {
		return fmt.Errorf("%w: Accept-Signature member %s is not an inner list", errChallenge, m.key)
	}
	if len(m.items) > maxChallengeComponents {
		return fmt.Errorf("%w: Accept-Signature names more than %d components", errChallenge, maxChallengeComponents)
	}
	for _, it := range m.items {
		if it.val.kind != kindString {
			return fmt.Errorf("%w: Accept-Signature holds a non-string component", errChallenge)
		}
		b, _ := appendBare(nil, it.val)
		b, ok := appendParams(b, it.params)
		if !ok {
			return fmt.Errorf("%w: Accept-Signature component does not serialize", errChallenge)
		}
		c, err := requestComponent(string(b))
		if err != nil {
			return fmt.Errorf("%w: Accept-Signature: %v", errChallenge, err)
		}
		ch.components = append(ch.components, c)
	}
	for _, p := range m.params {
		switch p.key {
		case "tag":
			if p.val.kind != kindString || p.val.s != tag {
				return fmt.Errorf("%w: Accept-Signature asks for another tag", errChallenge)
			}
		case "alg":
			if p.val.kind != kindString || p.val.s != alg {
				return fmt.Errorf("%w: Accept-Signature asks for another algorithm", errChallenge)
			}
		case "nonce":
			ch.nonce = true
			switch {
			case p.val.kind == kindBoolean && p.val.t:
			case p.val.kind == kindString && p.val.s != "" && len(p.val.s) <= maxChallengeNonce:
				ch.nonceValue = p.val.s
			default:
				return fmt.Errorf("%w: Accept-Signature nonce is neither true nor a short string", errChallenge)
			}
		}
	}
	return nil
}

// requestComponent parses a component a request signature can cover: not
// @status, and nothing taken from a request with ;req.
func requestComponent(s string) (Component, error) {
	c, err := ParseComponent(s)
	if err != nil {
		return Component{}, err
	}
	if c.Name == "@status" || c.Req {
		return Component{}, fmt.Errorf("%w %s: applies to responses only", errUnknownComponent, c.ID())
	}
	return c, nil
}
