package middleware

import (
	"net/http"

	"github.com/agentid/agentid/signer"
)

// Signed is one request's Signature-Input and Signature, parsed once, and
// its body, read once, for a handler that checks more than one signature
// of the request (with several verifiers, such as an agent's signature and
// a proof of possession of a new key). Build it with Verifier.Parse and
// check it with Verifier.CheckSigned; it is not safe for concurrent use.
type Signed struct {
	r    *http.Request
	sigs []signer.Signature
	err  *Error
	st   requestState
}

// Parse parses r's Signature-Input and Signature once, every label
// whatever its tag, within v's size and count limits. Unlike Check, which
// validates only the signatures with its tag, a malformed signature with
// another tag makes every check of the result fail.
func (v *Verifier) Parse(r *http.Request) *Signed {
	lim := v.cfg.Limits
	lim.Tag = ""
	s := &Signed{r: r}
	s.sigs, s.err = v.parseSignatures(r, lim)
	return s
}

// ParseChecked parses r's Signature-Input and Signature as Check does:
// within v's limits, and only the signatures with v's tag (when any has
// it) are parsed and validated. It is for a caller that inspects the
// signatures (Covers) before checking them with CheckSigned, which then
// answers as Check would have, without parsing the fields again.
func (v *Verifier) ParseChecked(r *http.Request) *Signed {
	s := &Signed{r: r}
	s.sigs, s.err = v.parseSignatures(r, v.cfg.Limits)
	return s
}

// Covers reports whether a signature that CheckSigned would check in s
// covers the component name, in any form (with any parameters). A request
// whose fields did not parse covers nothing: CheckSigned refuses it.
func (v *Verifier) Covers(s *Signed, name string) bool {
	if s.err != nil {
		return false
	}
	for _, sig := range s.tagged(v.cfg.Tag) {
		for _, c := range sig.Components {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}

// SetBody gives the request body the caller has already read (at most
// the verifiers' MaxBodyBytes): Content-Digest is then checked against
// body and the request's Body is not read again.
func (s *Signed) SetBody(body []byte) {
	s.st.body, s.st.bodyErr, s.st.bodyDone = body, nil, true
	s.st.digestErr, s.st.digestDone = nil, false
}

// CheckSigned is Check for a request parsed by Parse: it checks the
// signatures with v's tag (or, with AnyTag, the only signature) without
// parsing the fields or reading the body again. The key is looked up in
// keys, or in Config.Keys when keys is nil (a handler that learns the key
// from the request itself, such as a proof of possession of a key in the
// body, passes a KeySource holding it).
func (v *Verifier) CheckSigned(s *Signed, keys KeySource) *Result {
	res := &Result{Request: s.r}
	if keys == nil {
		keys = v.cfg.Keys
	}
	v.decide(res, v.observed(s.r, &res.Agent, s, keys))
	return res
}

// tagged returns the signatures with tag when any has it, else all of them
// (as signer.ParseSignaturesLimited selects with Limits.Tag).
func (s *Signed) tagged(tag string) []signer.Signature {
	n := 0
	for i := range s.sigs {
		if s.sigs[i].Params.Tag == tag {
			n++
		}
	}
	if n == 0 || n == len(s.sigs) {
		return s.sigs
	}
	out := make([]signer.Signature, 0, n)
	for _, sig := range s.sigs {
		if sig.Params.Tag == tag {
			out = append(out, sig)
		}
	}
	return out
}
