package middleware

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/lru"
)

// Verifier checks signed requests against a policy. It is safe for
// concurrent use; build it once with New.
type Verifier struct {
	cfg             Config
	required        []signer.Component
	acceptSignature string
	inputError      string // Signature-Error of invalid_input, with required_input
	agents          *lru.Cache[string, *agentField]
	authorities     []authority
	otel            instruments
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
	ids := requiredIDs(v.cfg, v.required)
	v.acceptSignature = acceptSignature(v.cfg, ids)
	v.inputError = signatureErrorField("invalid_input", ids)
	v.otel = newInstruments(cfg.TracerProvider, cfg.MeterProvider)
	return v, nil
}

// requiredIDs returns the identifiers of the components this verifier
// requires a signature to cover: @authority (or @target-uri, which the
// verifier also takes), the configured ones, and the bound Signature-Agent
// member when one is required. Accept-Signature and invalid_input's
// required_input list them.
func requiredIDs(cfg Config, required []signer.Component) []string {
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
	return ids
}

// acceptSignature builds the Accept-Signature field (RFC 9421 §5.1) that
// refusals carry: the components (ids) and parameters this verifier
// requires, and alg when only one algorithm is accepted.
func acceptSignature(cfg Config, ids []string) string {
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
			v.WriteError(w, r, res.Err)
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
		res.Outcome, res.Reason = OutcomeVerified, reasonVerified
	} else {
		res.Outcome, res.Reason, res.Err = err.Outcome(), err.Code.Reason(), err
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

// WriteError writes a verification failure as a refusal to r, as the
// package's WriteError does (the body r's Accept prefers, Signature-Error,
// Vary: Accept), with the verifier's additions: Accept-Signature on 401
// and 403 (RefusalStatus), required_input listing the components it
// requires on invalid_input, and Date from Config.Now, the clock that
// judged created, from which an agent refused with clock_skew computes its
// wait. r may be nil (the JSON body).
func (v *Verifier) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	e := AsError(err)
	status := e.Status()
	if status == http.StatusUnauthorized {
		status = v.cfg.RefusalStatus
	}
	h := w.Header()
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		h.Set("Accept-Signature", v.acceptSignature)
	}
	if _, ok := h["Date"]; !ok {
		h.Set("Date", v.cfg.Now().UTC().Format(http.TimeFormat))
	}
	writeRefusal(w, r, e, status, v.inputError)
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
	return v.observed(r, a, nil, nil)
}

// observed verifies r (or, when s is not nil, the parsed s with keys),
// observed by a span and a metric when a provider records them, and logs
// the refusal.
func (v *Verifier) observed(r *http.Request, a *Agent, s *Signed, keys KeySource) *Error {
	tracing, timing := v.otel.tracer.On(), v.otel.duration.Enabled(r.Context())
	if tracing || timing {
		return v.verifyObserved(r, a, s, keys, tracing, timing)
	}
	return v.logRefusal(r.Context(), r, v.run(r, a, s, keys))
}

// run verifies r, or the parsed s with keys when s is not nil.
func (v *Verifier) run(r *http.Request, a *Agent, s *Signed, keys KeySource) *Error {
	if s == nil {
		return v.verifyRequest(r, a)
	}
	if s.err != nil {
		return s.err
	}
	return v.verifySignatures(r, s.tagged(v.cfg.Tag), &s.st, keys, a)
}
