package middleware

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/lru"
)

// Verifier checks signed requests against a policy. It is safe for
// concurrent use; build it once with New.
type Verifier struct {
	cfg             Config
	required        []signer.Component
	acceptSignature string
	agents          *lru.Cache[string, *agentField]
	authorities     []authority
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Keys == nil {
		return errors.New("middleware: Config.Keys is required")
	}
	if c.MaxBodyBytes < 0 {
		return errors.New("middleware: Config.MaxBodyBytes must not be negative")
	}
	l := &c.Limits
	for _, n := range []int{l.MaxFieldBytes, l.MaxSignatures, l.MaxComponents, l.MaxSignatureAgentMembers, l.MaxNonceLength, l.MaxKeyIDLength, l.MaxVerifyCost} {
		if n < 0 {
			return errors.New("middleware: Config.Limits must not be negative")
		}
	}
	if l.MaxRSABits != 0 && (l.MaxRSABits < signer.DefaultMaxRSABits || l.MaxRSABits > signer.LimitRSABits) {
		return fmt.Errorf("middleware: Config.Limits.MaxRSABits %d is not between %d and %d", l.MaxRSABits, signer.DefaultMaxRSABits, signer.LimitRSABits)
	}
	if c.Profile > ProfileStrict01 {
		return fmt.Errorf("middleware: Config.Profile %d is not ProfileDeployed or ProfileStrict01", c.Profile)
	}
	if c.Mode > Observe {
		return fmt.Errorf("middleware: Config.Mode %d is not Required, Optional or Observe", c.Mode)
	}
	if c.RefusalStatus != 0 && c.RefusalStatus != http.StatusUnauthorized && c.RefusalStatus != http.StatusForbidden {
		return fmt.Errorf("middleware: Config.RefusalStatus %d is not 401 or 403", c.RefusalStatus)
	}
	for _, a := range c.Algorithms {
		if a != signer.AlgEd25519 && a != signer.AlgRSAPSSSHA512 && a != signer.AlgECDSAP256SHA256 {
			return fmt.Errorf("middleware: Config.Algorithms: %q is not supported", a)
		}
	}
	if c.MaxWindow < 0 && c.AllowMissingExpires && !c.AllowMissingNonce {
		// A signature without expires would then never expire, while its
		// nonce can only be remembered for a bounded time: a replay after
		// the store forgets it would pass.
		return errors.New("middleware: Config.MaxWindow < 0 with AllowMissingExpires leaves no bound on how long a nonce must be remembered; set MaxWindow or AllowMissingNonce")
	}
	if _, err := parseAuthorities(c.Authorities); err != nil {
		return err
	}
	if c.Algorithms != nil && len(c.Algorithms) == 0 {
		return errors.New("middleware: Config.Algorithms is empty (nil means the default list)")
	}
	for _, n := range c.RequiredComponents {
		if _, err := signer.ParseComponent(n); err != nil {
			return fmt.Errorf("middleware: Config.RequiredComponents: %w", err)
		}
	}
	for i := 0; i < len(c.Tag); i++ {
		if c.Tag[i] < 0x20 || c.Tag[i] > 0x7e {
			return fmt.Errorf("middleware: Config.Tag %q is not printable ASCII", c.Tag)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Replay == nil {
		c.Replay = newMemoryReplayStore(c.Now)
	}
	c.Tag = cmp.Or(c.Tag, signer.DefaultTag)
	if c.Algorithms == nil {
		c.Algorithms = []string{signer.AlgEd25519, signer.AlgRSAPSSSHA512, signer.AlgECDSAP256SHA256}
	}
	c.MaxWindow = cmp.Or(c.MaxWindow, defaultMaxWindow)
	if c.Skew == 0 {
		c.Skew = DefaultSkew
	} else if c.Skew < 0 {
		c.Skew = 0
	}
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, defaultMaxBodyBytes)
	if c.RefusalStatus == 0 && c.Profile == ProfileStrict01 {
		c.RefusalStatus = http.StatusForbidden // protocol-01's refusal
	}
	c.RefusalStatus = cmp.Or(c.RefusalStatus, http.StatusUnauthorized)
	l := &c.Limits
	l.MaxFieldBytes = cmp.Or(l.MaxFieldBytes, defaultMaxHeaderBytes)
	l.MaxSignatures = cmp.Or(l.MaxSignatures, defaultMaxSignatures)
	l.MaxComponents = cmp.Or(l.MaxComponents, defaultMaxComponents)
	l.MaxSignatureAgentMembers = cmp.Or(l.MaxSignatureAgentMembers, defaultMaxSignatureAgentMembers)
	l.MaxNonceLength = cmp.Or(l.MaxNonceLength, defaultMaxNonceLength)
	l.MaxKeyIDLength = cmp.Or(l.MaxKeyIDLength, defaultMaxKeyIDLength)
	l.MaxVerifyCost = cmp.Or(l.MaxVerifyCost, defaultMaxVerifyCost)
	l.MaxRSABits = cmp.Or(l.MaxRSABits, signer.DefaultMaxRSABits)
	l.Tag = c.Tag
	c.SignatureAgentCacheSize = cmp.Or(c.SignatureAgentCacheSize, DefaultSignatureAgentCacheSize)
	if c.ExpandedKeys == nil {
		c.ExpandedKeys = signer.NewExpandedKeys(signer.DefaultExpandedKeyCacheSize)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// New validates cfg (Config.Validate) and returns a Verifier, or the error
// that makes cfg unusable.
func New(cfg Config) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v := &Verifier{cfg: cfg.withDefaults()}
	if v.cfg.SignatureAgentCacheSize > 0 {
		v.agents = lru.New[string, *agentField](v.cfg.SignatureAgentCacheSize, 0, nil)
	}
	v.authorities, _ = parseAuthorities(cfg.Authorities)
	if len(v.authorities) == 0 && !cfg.AnyAuthority {
		v.cfg.Logger.Warn("middleware: Config.Authorities is empty, so every signed request is refused with 421 misdirected_request; set it to the hosts this verifier serves (or AnyAuthority when something in front already pins the host)")
	}
	for _, n := range cfg.RequiredComponents {
		c, _ := signer.ParseComponent(n)
		v.required = append(v.required, c)
	}
	v.acceptSignature = acceptSignature(v.cfg, v.required)
	return v, nil
}

// acceptSignature builds the Accept-Signature field (RFC 9421 §5.1) that
// refusals carry: the components and parameters this verifier requires,
// and alg when only one algorithm is accepted.
func acceptSignature(cfg Config, required []signer.Component) string {
	ids := []string{`"@authority"`}
	add := func(id string) {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	for _, c := range required {
		add(c.ID())
	}
	if cfg.RequireBound || cfg.Profile == ProfileStrict01 {
		add(`"signature-agent";key="` + signer.DefaultLabel + `"`)
	}
	var b strings.Builder
	b.WriteString(signer.DefaultLabel + "=(" + strings.Join(ids, " ") + ")")
	if len(cfg.Algorithms) == 1 {
		b.WriteString(`;alg="` + cfg.Algorithms[0] + `"`)
	}
	b.WriteString(";keyid;created")
	if !cfg.AllowMissingExpires {
		b.WriteString(";expires")
	}
	if !cfg.AllowMissingNonce {
		b.WriteString(";nonce")
	}
	b.WriteString(";tag=" + strconv.Quote(cfg.Tag))
	return b.String()
}

// Mode returns the mode the verifier was configured with.
func (v *Verifier) Mode() Mode { return v.cfg.Mode }

// Middleware verifies each request before next runs, and acts on the
// outcome by Config.Mode: a verified request always goes on, with its Agent
// in the context (AgentFrom); Required refuses every other request,
// Optional lets unsigned ones through, Observe lets everything through. The
// outcome goes to Config.OnResult and, for requests that go on, into the
// context (ResultFrom). Refusals get the JSON error body and
// Accept-Signature.
func (v *Verifier) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res := v.Check(r)
		if !res.Passed {
			v.WriteError(w, res.Err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), resultKey{}, res)))
	})
}

// Check verifies r, decides by Config.Mode whether it may go on
// (Result.Passed), and reports the outcome to Config.OnResult. Handlers
// that answer by themselves (a proxy, a route with its own error shape)
// call it instead of Middleware.
func (v *Verifier) Check(r *http.Request) *Result {
	// Small enough to be inlined: a caller that keeps the result to itself
	// then holds it on its stack.
	res := &Result{Request: r}
	v.check(res)
	return res
}

// check is Check into res, whose Request is set.
func (v *Verifier) check(res *Result) {
	v.decide(res, v.verify(res.Request, &res.Agent))
}

// decide sets res's verdict from err (nil when verified) and whether the
// request may go on by Config.Mode, and reports res to Config.OnResult.
func (v *Verifier) decide(res *Result, err *Error) {
	if err == nil {
		res.Outcome = OutcomeVerified
	} else {
		res.Outcome, res.Err = err.Outcome(), err
	}
	switch v.cfg.Mode {
	case Observe:
		res.Passed = true
	case Optional:
		res.Passed = err == nil || err.Code == CodeMissingSignature
	default:
		res.Passed = err == nil
	}
	if v.cfg.OnResult != nil {
		v.cfg.OnResult(*res)
	}
}

// WriteError writes a verification failure: the JSON error body, with
// Accept-Signature on refusals (401, or 403 by RefusalStatus).
func (v *Verifier) WriteError(w http.ResponseWriter, err error) {
	e := AsError(err)
	status := e.Status()
	if status == http.StatusUnauthorized {
		status = v.cfg.RefusalStatus
	}
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		w.Header().Set("Accept-Signature", v.acceptSignature)
	}
	writeErrorStatus(w, e, status)
}

// Verify checks r against the policy, cheapest step first, and returns the
// verified identity or an *Error with a stable Code. The nonce is recorded
// only after the signature (and digest) verified.
func (v *Verifier) Verify(r *http.Request) (Agent, error) {
	var a Agent
	if err := v.verify(r, &a); err != nil {
		return Agent{}, err
	}
	return a, nil
}

func (v *Verifier) verify(r *http.Request, a *Agent) *Error {
	return v.logRefusal(r, v.verifyRequest(r, a))
}

// logRefusal logs err, if any, at debug level and returns it.
func (v *Verifier) logRefusal(r *http.Request, err *Error) *Error {
	if err != nil && v.cfg.Logger.Enabled(r.Context(), slog.LevelDebug) {
		v.cfg.Logger.LogAttrs(r.Context(), slog.LevelDebug, "signature rejected",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("outcome", string(err.Outcome())), slog.String("error", err.Error()))
	}
	return err
}

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

// signerError maps a failure to parse the signature fields or to build the
// signature base to its code.
func signerError(err error) *Error {
	msg := ClientMessage(err)
	switch {
	case errors.Is(err, signer.ErrFieldTooLarge):
		return &Error{Code: CodeSignatureTooLarge, Message: msg, Err: err}
	case errors.Is(err, signer.ErrTooManySignatures):
		return &Error{Code: CodeTooManySignatures, Message: msg, Err: err}
	case errors.Is(err, signer.ErrTooManyComponents):
		return &Error{Code: CodeTooManyComponents, Message: msg, Err: err}
	case errors.Is(err, signer.ErrDuplicateComponent):
		return &Error{Code: CodeDuplicateComponent, Message: msg, Err: err}
	case errors.Is(err, signer.ErrInvalidAuthority):
		return &Error{Code: CodeInvalidAuthority, Message: msg, Err: err}
	case errors.Is(err, signer.ErrMissingComponent):
		return &Error{Code: CodeMissingComponents, Message: msg, Err: err}
	}
	return &Error{Code: CodeInvalidSignatureInput, Message: msg, Err: err}
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

// replay records the nonce of a verified signature (step 9).
func (v *Verifier) replay(r *http.Request, a *Agent, hasExpires bool) *Error {
	if a.Nonce == "" {
		return nil
	}
	cfg := &v.cfg
	expires := a.Expires
	if !hasExpires {
		expires = a.Created.Add(max(cfg.MaxWindow, 0))
	}
	seen, err := cfg.Replay.Seen(r.Context(), ReplayKey(a.Thumbprint, a.Nonce), expires.Add(cfg.Skew))
	if err != nil {
		return &Error{Code: CodeDatabaseUnavailable, Message: "the replay store is unavailable", Err: fmt.Errorf("%w: %w", ErrReplayStore, err)}
	}
	if seen {
		return Fail(CodeReplayedNonce, "nonce already used with key %q", signer.Truncate(a.KeyID))
	}
	return nil
}

// ReplayKey is the key a Verifier records in its ReplayStore for a
// verified signature: the SHA-256 digest (32 bytes, as a string) of the
// verified key's RFC 7638 thumbprint and the nonce, each length-prefixed
// so that no two pairs share a key. It depends on nothing else — not on
// how Signature-Agent was spelled, the keyid, the route or the instance —
// so a nonce is accepted once per key wherever the signature is sent.
func ReplayKey(thumbprint, nonce string) string {
	var buf [512]byte
	b := buf[:0]
	for _, s := range [2]string{thumbprint, nonce} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	sum := sha256.Sum256(b)
	return string(sum[:])
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

func keyError(err error, set signer.KeySet, keyID string) *Error {
	where := "the key source"
	if !set.IsZero() {
		where = set.Identity()
	}
	switch {
	case errors.Is(err, signer.ErrUnknownKey):
		return &Error{Code: CodeUnknownKey, Message: fmt.Sprintf("key %q is not published by %s", signer.Truncate(keyID), where), Err: err}
	case errors.Is(err, signer.ErrRevokedKey):
		return &Error{Code: CodeRevokedKey, Message: fmt.Sprintf("key %q has been revoked", signer.Truncate(keyID)), Err: err}
	case errors.Is(err, signer.ErrUntrustedAgent):
		return &Error{Code: CodeUntrustedAgent, Message: fmt.Sprintf("signature agent %s is not trusted", where), Err: err}
	case errors.Is(err, context.Canceled):
		return &Error{Code: CodeKeyFetchFailed, Message: "the request was cancelled while fetching the key", Err: err}
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeKeyFetchFailed, Message: fmt.Sprintf("the key set of %s could not be fetched", where), Err: err}
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
