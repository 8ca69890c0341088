package middleware

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentid/agentid/signer"
)

// verifyRequest runs the policy. Its order keeps the cost of refusing any
// request linear in the request's size: field sizes and counts first (while
// parsing), then each candidate signature's parameters and window, then the
// signature base (so that a request missing a covered component costs no
// key lookup), its signature agent and key, the signature, the body digest
// and, last, the replay store.
func (v *Verifier) verifyRequest(r *http.Request, a *Agent) *Error {
	sigs, err := v.parseSignatures(r, v.cfg.Limits)
	if err != nil {
		return err
	}
	st := requestState{}
	return v.verifySignatures(r, sigs, &st, v.cfg.Keys, a)
}

// parseSignatures is step 1: sizes, counts and syntax of Signature-Input
// and Signature, parsed with lim (with lim.Tag set, only the signatures
// with that tag when any has it; others are not even validated).
func (v *Verifier) parseSignatures(r *http.Request, lim signer.Limits) ([]signer.Signature, *Error) {
	in, sv := r.Header["Signature-Input"], r.Header["Signature"]
	if len(in) == 0 && len(sv) == 0 {
		return nil, Fail(CodeMissingSignature, "the request is not signed: Signature and Signature-Input are required")
	}
	if len(in) == 0 || len(sv) == 0 {
		return nil, Fail(CodeInvalidSignatureInput, "Signature and Signature-Input must both be present")
	}

	// The request must be for an authority this verifier serves: a
	// signature made for another host is refused before anything else.
	if err := v.checkAuthority(r); err != nil {
		return nil, err
	}

	sigs, perr := signer.ParseSignaturesLimited(in, sv, lim)
	if perr != nil {
		return nil, signerError(perr)
	}
	return sigs, nil
}

// verifySignatures runs steps 2–9 on the parsed signatures of r whose tag
// is the configured one, looking keys up in keys.
func (v *Verifier) verifySignatures(r *http.Request, sigs []signer.Signature, st *requestState, keys KeySource, a *Agent) *Error {
	cfg := &v.cfg
	// The work budget is per verification: a caller that checks one
	// request twice (a rotation: the current key, then the new one) gets
	// the bound twice, not a shared one the first check could exhaust.
	st.budget = budget{}
	// sigs holds only the signatures with the tag when any has it.
	cands := sigs
	if sigs[0].Params.Tag != cfg.Tag && (!cfg.AnyTag || len(sigs) != 1) {
		return Fail(CodeInvalidSignatureInput, "no signature has tag=%q", cfg.Tag)
	}

	// 2–8 for each candidate in order; the first that passes decides.
	var first *Error
	for i := range cands {
		err := v.candidate(r, &cands[i], st, keys, a)
		if err == errBudget {
			if first == nil {
				first = err
			}
			break
		}
		if err == nil {
			// 9. Replay, only for a signature that verified.
			if err := v.replay(r, a, cands[i].Params.HasExpires); err != nil {
				*a = Agent{}
				return err
			}
			return nil
		}
		if first == nil {
			first = err
		}
		if err.Code == CodeKeyFetchFailed || err.Code == CodeDatabaseUnavailable {
			break // the first fetch failure ends the request
		}
	}
	return first
}

// requestState is what the candidates of one request share: the parsed
// Signature-Agent, the body read for Content-Digest and the outcome of
// comparing them.
type requestState struct {
	budget     budget // the work of this verification
	agent      *agentField
	agentDone  bool
	body       []byte
	bodyErr    *Error
	bodyDone   bool
	digestErr  *Error
	digestDone bool
}

// basePool holds signature-base buffers.
var basePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// candidate runs steps 2–8 for one signature.
func (v *Verifier) candidate(r *http.Request, sig *signer.Signature, st *requestState, keys KeySource, a *Agent) *Error {
	cfg := &v.cfg
	p := &sig.Params

	// 2. Covered components: @authority or @target-uri and the required ones.
	if !sig.Covers(`"@authority"`) && !sig.Covers(`"@target-uri"`) {
		return Fail(CodeMissingComponents, "the signature must cover @authority or @target-uri")
	}
	for i := range v.required {
		if !covers(sig, &v.required[i]) {
			return Fail(CodeMissingComponents, "the signature must cover %s", v.required[i].ID())
		}
	}

	// 3. Parameters.
	if len(p.KeyID) > cfg.Limits.MaxKeyIDLength {
		return Fail(CodeKeyIDTooLong, "the keyid is %d bytes, more than %d", len(p.KeyID), cfg.Limits.MaxKeyIDLength)
	}
	if len(p.Nonce) > cfg.Limits.MaxNonceLength {
		return Fail(CodeNonceTooLong, "the nonce is %d bytes, more than %d", len(p.Nonce), cfg.Limits.MaxNonceLength)
	}
	if p.Alg != "" && !slices.Contains(cfg.Algorithms, p.Alg) {
		return Fail(CodeUnsupportedAlgorithm, "alg %q is not accepted (accepted: %s)", signer.Truncate(p.Alg), strings.Join(cfg.Algorithms, ", "))
	}
	if !p.HasCreated {
		return Fail(CodeInvalidSignatureInput, "the created parameter is required")
	}
	if !p.HasExpires && !cfg.AllowMissingExpires {
		return Fail(CodeInvalidSignatureInput, "the expires parameter is required")
	}
	if p.KeyID == "" {
		return Fail(CodeInvalidSignatureInput, "the keyid parameter is required")
	}
	if p.Nonce == "" && !cfg.AllowMissingNonce {
		return Fail(CodeMissingNonce, "the nonce parameter is required")
	}

	// 4. Validity window.
	now := cfg.Now()
	created := time.Unix(p.Created, 0)
	expires := created.Add(cfg.MaxWindow)
	if p.HasExpires {
		expires = time.Unix(p.Expires, 0)
	}
	if created.After(now.Add(cfg.Skew)) {
		return Fail(CodeNotYetValid, "signature created at %s, in the future", created.UTC().Format(time.RFC3339))
	}
	if p.HasExpires && p.Expires < p.Created {
		return Fail(CodeInvalidSignatureInput, "expires is before created")
	}
	if (p.HasExpires || cfg.MaxWindow > 0) && now.After(expires.Add(cfg.Skew)) {
		return Fail(CodeExpiredSignature, "signature expired at %s", expires.UTC().Format(time.RFC3339))
	}
	if cfg.MaxWindow > 0 && p.HasExpires && expires.Sub(created) > cfg.MaxWindow {
		return Fail(CodeWindowTooLong, "expires-created is %s, at most %s is accepted", expires.Sub(created), cfg.MaxWindow)
	}

	// The signature base: linear in the request (each component's value
	// computed once, the query parsed once), built before any key lookup so
	// that a request missing a covered component costs no key fetch.
	bp := basePool.Get().(*[]byte)
	defer basePool.Put(bp)
	base, berr := sig.AppendBase((*bp)[:0], r)
	if berr != nil {
		return signerError(berr)
	}
	*bp = base

	// 5. Signature agent → key set.
	set, bound, err := v.keySet(r, sig, st)
	if err != nil {
		return err
	}

	// 6. Key. At a well-known directory (or with no key set at all) the
	// keyid must be the key's thumbprint. A lookup that may fetch counts
	// against the request's budget, and no key is looked up for a
	// signature that could not be checked.
	if !st.budget.canCheck(cfg.Limits.MaxVerifyCost) {
		return errBudget
	}
	if kc, ok := keys.(KeyCache); !ok || !kc.KeyCached(set, p.KeyID) {
		if !st.budget.fetch() {
			return errBudget
		}
	}
	pk, kerr := keys.Key(r.Context(), set, p.KeyID)
	if kerr != nil {
		return keyError(kerr, set, p.KeyID)
	}
	alg := pk.Algorithm()
	switch {
	case alg == "":
		return Fail(CodeUnknownKey, "key %q is not usable", signer.Truncate(p.KeyID))
	case (set.WellKnown || set.IsZero()) && !cfg.AllowAnyKeyID && pk.Thumbprint != p.KeyID:
		return Fail(CodeUnknownKey, "key %q is not the thumbprint of the published key", signer.Truncate(p.KeyID))
	case p.Alg != "" && p.Alg != alg:
		return Fail(CodeUnsupportedAlgorithm, "alg %q does not match key %q (%s)", p.Alg, signer.Truncate(p.KeyID), alg)
	case !slices.Contains(cfg.Algorithms, alg):
		return Fail(CodeUnsupportedAlgorithm, "key %q is for %s, which is not accepted", signer.Truncate(p.KeyID), alg)
	case pk.RSA != nil && pk.RSA.N.BitLen() > cfg.Limits.MaxRSABits:
		// As when a key source skips such a key: it is not one of ours.
		return Fail(CodeUnknownKey, "key %q is a %d-bit RSA key, more than the %d bits accepted", signer.Truncate(p.KeyID), pk.RSA.N.BitLen(), cfg.Limits.MaxRSABits)
	}

	// 7. The signature over the rebuilt base, if its price fits what is
	// left of the request's budget.
	if err := st.budget.check(&pk, p.KeyID, cfg.Limits.MaxVerifyCost); err != nil {
		return err
	}
	if cfg.ExpandedKeys.Verify(pk, alg, base, sig.Value) != nil {
		v.logBaseMismatch(r, sig, base)
		return Fail(CodeInvalidSignature, "the signature does not verify with key %q", signer.Truncate(p.KeyID))
	}

	// 8. Content-Digest, whenever any form of it is covered.
	if _, ok := sig.CoversName("content-digest"); ok {
		if err := v.checkDigest(r, st); err != nil {
			return err
		}
	}

	md, merr := v.agentMetadata(r, sig)
	if merr != nil {
		return merr
	}
	// A key source that protects the key sets of verified agents (keyfetch's
	// cache admission) hears of this one.
	if vr, ok := keys.(VerifiedReporter); ok && !set.IsZero() {
		vr.Verified(set)
	}

	*a = Agent{
		Metadata:   md,
		KeyID:      p.KeyID,
		Thumbprint: thumbprintOf(&pk),
		Alg:        alg,
		JWK:        pk.JWK.Public(),
		Created:    created,
		Nonce:      p.Nonce,
		Label:      sig.Label,
		Tag:        p.Tag,
		Bound:      bound,
		Components: make([]string, len(sig.Components)),
	}
	if p.HasExpires {
		a.Expires = expires
	}
	for i, c := range sig.Components {
		a.Components[i] = c.ID()
	}
	if !set.IsZero() {
		a.ID = set.Identity()
		a.SignatureAgent = set.Origin()
		a.DirectoryURL = set.URL
		a.UID = signer.UIDFromOrigin(a.SignatureAgent)
	}
	return nil
}

// checkDigest reads the body (capped, then put back for the handler) once
// per request and compares it with Content-Digest.
func (v *Verifier) checkDigest(r *http.Request, st *requestState) *Error {
	if !st.bodyDone {
		st.bodyDone = true
		body, err := signer.ReadBody(r, v.cfg.MaxBodyBytes)
		switch {
		case errors.Is(err, signer.ErrBodyTooLarge):
			st.bodyErr = Fail(CodePayloadTooLarge, "the body is larger than %d bytes", v.cfg.MaxBodyBytes)
		case err != nil:
			st.bodyErr = &Error{Code: CodeInvalidRequest, Message: "the body could not be read", Err: err}
		}
		st.body = body
	}
	if st.bodyErr != nil {
		return st.bodyErr
	}
	if !st.digestDone { // once per request, however many signatures cover it
		st.digestDone = true
		if err := signer.VerifyContentDigest(r.Header["Content-Digest"], st.body); err != nil {
			st.digestErr = &Error{Code: CodeDigestMismatch, Message: "Content-Digest does not match the body", Err: err}
		}
	}
	return st.digestErr
}

// thumbprintOf returns the RFC 7638 thumbprint of a verified key: the one
// the key source computed, else computed from its public JWK.
func thumbprintOf(pk *signer.PublicKey) string {
	if pk.Thumbprint != "" {
		return pk.Thumbprint
	}
	if len(pk.Key) != 0 {
		return signer.Thumbprint(pk.Key)
	}
	if p, err := signer.ParseKeySetJWK(pk.JWK.Public().MarshalPublic()); err == nil {
		return p.Thumbprint
	}
	return ""
}

// covers reports whether sig covers the required component c: the same
// identifier, or the same name when c carries no parameters.
func covers(sig *signer.Signature, c *signer.Component) bool {
	if c.Key == "" && !c.SF && !c.BS && c.Param == "" {
		_, ok := sig.CoversName(c.Name)
		return ok
	}
	return sig.Covers(c.ID())
}
