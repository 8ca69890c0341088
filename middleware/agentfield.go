package middleware

import (
	"errors"
	"net/http"

	"github.com/agentid/agentid/signer"
)

// keySet resolves the Signature-Agent member that applies to sig (the one
// named by the covered `"signature-agent";key=…`, else the one keyed by the
// label, else the only one) and reports whether it is covered.
func (v *Verifier) keySet(r *http.Request, sig *signer.Signature, st *requestState) (signer.KeySet, bool, *Error) {
	cfg := &v.cfg
	if cfg.Profile == ProfileStrict01 {
		return v.strictKeySet(r, sig)
	}
	vals := r.Header["Signature-Agent"]
	if len(vals) == 0 {
		if cfg.AllowMissingSignatureAgent {
			return signer.KeySet{}, false, nil
		}
		return signer.KeySet{}, false, Fail(CodeInvalidSignatureAgent, "the Signature-Agent header is required")
	}
	if !st.agentDone {
		st.agentDone = true
		st.agent = v.resolveAgent(vals)
	}
	f := st.agent
	if f.err != nil {
		return signer.KeySet{}, false, f.err
	}
	var (
		i     = -1
		bound bool
	)
	c, covered := sig.CoversName("signature-agent")
	switch {
	case covered && c.Key != "":
		// The covered `"signature-agent";key=…` names the member.
		bound = true
		i = f.member(c.Key)
	default:
		// The whole field is covered (web-bot-auth 0.1.3), or nothing is:
		// the member keyed by the label, else the only one.
		bound = covered
		if i = f.member(sig.Label); i < 0 && len(f.sets) == 1 {
			i = 0
		}
	}
	if i < 0 {
		return signer.KeySet{}, false, Fail(CodeInvalidSignatureAgent, "Signature-Agent has no member for signature %q", sig.Label)
	}
	if cfg.RequireBound && !bound {
		return signer.KeySet{}, false, Fail(CodeMissingComponents, `the signature must cover "signature-agent"`)
	}
	if f.errs[i] != nil {
		return signer.KeySet{}, false, f.errs[i]
	}
	return f.sets[i], bound, nil
}

// agentField is a Signature-Agent value resolved: its members' keys and
// key sets (or why each cannot be used), or why the field is refused. It is
// immutable once made, so the cache shares it between requests.
type agentField struct {
	err  *Error
	keys []string
	sets []signer.KeySet
	errs []*Error
}

func (f *agentField) member(key string) int {
	for i, k := range f.keys {
		if k == key {
			return i
		}
	}
	return -1
}

func resolveAgentField(vals []string, maxMembers, maxBytes int) *agentField {
	sa, err := signer.ParseSignatureAgentLimited(vals, maxMembers, maxBytes)
	switch {
	case errors.Is(err, signer.ErrFieldTooLarge) || errors.Is(err, signer.ErrTooManyAgents):
		return &agentField{err: &Error{Code: CodeSignatureAgentTooLarge, Message: ClientMessage(err), Err: err}}
	case err != nil:
		return &agentField{err: &Error{Code: CodeInvalidSignatureAgent, Message: ClientMessage(err), Err: err}}
	}
	ms := sa.Members()
	f := &agentField{keys: make([]string, len(ms)), sets: make([]signer.KeySet, len(ms)), errs: make([]*Error, len(ms))}
	for i, m := range ms {
		f.keys[i] = m.Key
		if f.sets[i], err = m.KeySet(); err != nil {
			f.errs[i] = &Error{Code: CodeInvalidSignatureAgent, Message: ClientMessage(err), Err: err}
		}
	}
	return f
}

// agentCacheMaxLen is the longest Signature-Agent value cached.
const agentCacheMaxLen = 512

// resolveAgent resolves a Signature-Agent field through the verifier's
// cache: an agent sends the same value on every request, so it is parsed
// and resolved once. Values the limits refuse are resolved again each time
// (cheaply: the limits refuse them first).
func (v *Verifier) resolveAgent(vals []string) *agentField {
	cfg := &v.cfg
	if v.agents == nil || len(vals) != 1 || len(vals[0]) > agentCacheMaxLen {
		return resolveAgentField(vals, cfg.Limits.MaxSignatureAgentMembers, cfg.Limits.MaxFieldBytes)
	}
	if f, ok := v.agents.Get(vals[0]); ok {
		return f
	}
	f := resolveAgentField(vals, cfg.Limits.MaxSignatureAgentMembers, cfg.Limits.MaxFieldBytes)
	v.agents.Add(vals[0], f)
	return f
}
