// Package rules applies an API owner's rules to verified traffic: a mode per
// route (path prefix → required, optional or observe; the longest prefix
// wins), allow and deny lists of agents, and per-agent rate limits
// (package agentlimit). It reads the verifier's outcome and answers
// refusals itself: the verifier then runs in Observe mode and leaves every
// decision to the rules.
//
// Behind the verifier's middleware:
//
//	g, _ := rules.New(rules.Config{Mode: middleware.Required,
//		Routes: []rules.Route{{Prefix: "/public/", Mode: middleware.Optional}},
//		Deny:   policy.List{Hosts: []string{"*.bad.example"}}})
//	v, _ := middleware.New(middleware.Config{Keys: keys, Mode: middleware.Observe})
//	http.Handle("/", v.Middleware(g.Middleware(handler)))
//
// In package proxy's handler, Gate.Apply is its Config.Decide hook: the
// proxy asks the rules after verifying, and logs and counts their refusal
// as its own answer. Around any other handler that verifies by itself, the
// verifier's Config.OnResult feeds Gate.OnResult, Gate.Wrap goes around the
// handler, and Gate.Transport around its upstream transport: a refused
// request never reaches the upstream, and its client gets the refusal.
package rules

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/middleware/policy"
	"github.com/agentid/agentid/signer"
)

// Route gives the paths under Prefix their own mode.
type Route struct {
	// Prefix is a path prefix such as "/api/" or "/"; it matches the
	// request path (decoded once) byte for byte. Only normal paths are
	// matched (middleware.CheckPath): a request whose path is not normal is
	// refused (400 invalid_request) before any route is looked up, so the
	// path a route matched is the path the service reads.
	Prefix string
	// Mode is what the route requires: Required refuses requests that are
	// not verified, Optional refuses only invalid signatures, Observe
	// refuses nothing (no lists, no limits: the outcome is only recorded).
	Mode middleware.Mode
}

// Config configures a Gate.
type Config struct {
	// Mode applies to paths no route matches. The zero value is Required.
	Mode middleware.Mode
	// Routes give path prefixes their own mode; the longest matching
	// prefix wins.
	Routes []Route
	// Allow, if not empty, lists the only verified agents let through
	// (others get 403 forbidden). Requests that are not verified are left
	// to the route's mode. Its identities match exactly
	// (policy.Allow); its uids only agents of Allow.Services.
	Allow policy.List
	// Deny lists verified agents refused with 403 forbidden, whatever
	// Allow says. Its identities match what their owner cannot vary: an
	// origin denies every key set on its host, a key-set URL every
	// spelling of its host and path (policy.Deny,
	// docs/signature-agent.md); its uids match only agents of
	// Deny.Services.
	Deny policy.List
	// DenyCards lists, as "name:NAME" or "purpose:PURPOSE", the verified
	// agents refused with 403 forbidden by what their Signature Agent Card
	// says (compared case-insensitively), read with AgentCard. A card's
	// name and purpose are its agent's own claim: they serve to refuse
	// agents that declare themselves (a purpose such as ai-training), never
	// to let one in, so there is no allow-list counterpart.
	DenyCards []string
	// AgentCard gives the name and purpose of the card of a verified
	// agent's key set, "" for none ((*keyfetch.Fetcher).AgentName answers
	// without I/O). Required with DenyCards; it must be safe for concurrent
	// use.
	AgentCard func(keySetURL string) (name, purpose string)
	// Limiter, if set, spends each request's budget (its agent's, or its
	// client address's when not verified) once the request would pass;
	// over budget it gets 429 rate_limited.
	Limiter *agentlimit.Limiter
	// Refuse writes a verification refusal (the verifier's error of a
	// request the route's mode refuses). If nil, middleware.WriteError;
	// proxies pass the verifier's WriteError, which adds Accept-Signature
	// and applies its refusal status.
	Refuse func(http.ResponseWriter, *http.Request, error)
	// OnRefuse, if set, is told of each refusal Wrap or Apply writes, with
	// the status sent: a handler wrapped by Wrap records its own intended
	// answer in its logs and metrics, not the refusal, so this is where
	// refusals by the rules are counted. It must be safe for concurrent
	// use.
	// res is the verification outcome (nil if there was none).
	OnRefuse func(r *http.Request, res *middleware.Result, err *middleware.Error, status int)
}

// Gate applies Config to each request. It is safe for concurrent use.
type Gate struct {
	cfg         Config
	routes      []Route // longest prefix first
	allow, deny *policy.Matcher
	// sameServices reports that both lists name the same services, so an
	// agent's policy identity (which depends on them only) is computed
	// once per decision for both.
	sameServices bool
	// denyNames and denyPurposes are DenyCards, lowercase.
	denyNames, denyPurposes map[string]struct{}
}

// New validates cfg and returns a Gate.
func New(cfg Config) (*Gate, error) {
	g := &Gate{cfg: cfg, routes: slices.Clone(cfg.Routes)}
	seen := map[string]bool{}
	for _, r := range cfg.Routes {
		if !strings.HasPrefix(r.Prefix, "/") {
			return nil, fmt.Errorf("rules: route prefix %q must start with /", r.Prefix)
		}
		if err := middleware.CheckPath(&url.URL{Path: r.Prefix}); err != nil {
			return nil, fmt.Errorf("rules: route prefix %q: %s", r.Prefix, err.Message)
		}
		if seen[r.Prefix] {
			return nil, fmt.Errorf("rules: route prefix %q is listed twice", r.Prefix)
		}
		seen[r.Prefix] = true
	}
	slices.SortStableFunc(g.routes, func(a, b Route) int { return len(b.Prefix) - len(a.Prefix) })
	var err error
	if g.allow, err = policy.Allow(cfg.Allow); err != nil {
		return nil, fmt.Errorf("rules: allow: %w", err)
	}
	if g.deny, err = policy.Deny(cfg.Deny); err != nil {
		return nil, fmt.Errorf("rules: deny: %w", err)
	}
	g.sameServices = slices.Equal(cfg.Allow.Services, cfg.Deny.Services)
	for _, c := range cfg.DenyCards {
		kind, v, _ := strings.Cut(c, ":")
		v = strings.ToLower(strings.TrimSpace(v))
		m := &g.denyNames
		switch {
		case v == "" || (kind != "name" && kind != "purpose"):
			return nil, fmt.Errorf("rules: deny card %q: want name:NAME or purpose:PURPOSE", c)
		case kind == "purpose":
			m = &g.denyPurposes
		}
		if *m == nil {
			*m = map[string]struct{}{}
		}
		(*m)[v] = struct{}{}
	}
	if len(cfg.DenyCards) > 0 && cfg.AgentCard == nil {
		return nil, errors.New("rules: DenyCards needs AgentCard, which reads the agents' cards")
	}
	if g.cfg.Refuse == nil {
		g.cfg.Refuse = middleware.WriteError
	}
	return g, nil
}

// SetRefuse replaces Config.Refuse, for a verifier built after the gate
// (its OnResult hook calls the gate). Call it before serving.
func (g *Gate) SetRefuse(refuse func(http.ResponseWriter, *http.Request, error)) {
	if refuse != nil {
		g.cfg.Refuse = refuse
	}
}

// Mode returns the mode of path (a normal path, as Decide checks it): the
// longest matching route's, else Config.Mode.
func (g *Gate) Mode(path string) middleware.Mode {
	for _, r := range g.routes {
		if strings.HasPrefix(path, r.Prefix) {
			return r.Mode
		}
	}
	return g.cfg.Mode
}

// Decision is what the gate decided for one request.
type Decision struct {
	// Err is the refusal, nil when the request may go on.
	Err *middleware.Error
	// Verification reports that Err is the verifier's (written with
	// Config.Refuse); otherwise it is the gate's own (forbidden,
	// rate_limited).
	Verification bool
	// Limit is the rate-limit decision (its headers go on the answer).
	Limit agentlimit.Decision
}

// Decide applies the rules to r, whose verification outcome is res (nil:
// not verified, as unsigned). Checks run in order: the path (one that is
// not normal is refused, 400 invalid_request), the route's mode, the
// deny list, DenyCards, the allow list, then the rate limit (spent only
// by requests that would otherwise pass).
func (g *Gate) Decide(r *http.Request, res *middleware.Result) Decision {
	if res == nil {
		res = &middleware.Result{Outcome: middleware.OutcomeUnverified, Err: middleware.Fail(middleware.CodeMissingSignature, "the request is not signed")}
	}
	if err := middleware.CheckPath(r.URL); err != nil {
		return Decision{Err: err}
	}
	mode := g.Mode(r.URL.Path)
	switch {
	case mode == middleware.Observe:
		return Decision{}
	case res.Outcome != middleware.OutcomeVerified &&
		(mode == middleware.Required || res.Err == nil || res.Err.Code != middleware.CodeMissingSignature):
		return Decision{Err: res.Err, Verification: true}
	}
	if res.Outcome == middleware.OutcomeVerified {
		id := g.deny.Services().Identity(res.Agent)
		if g.deny.Match(id) {
			return Decision{Err: middleware.Fail(middleware.CodeForbidden, "agent %s is not allowed here", signer.Truncate(res.Agent.ID))}
		}
		if g.cardDenied(res.Agent) {
			return Decision{Err: middleware.Fail(middleware.CodeForbidden, "agent %s is not allowed here (its card)", signer.Truncate(res.Agent.ID))}
		}
		if !g.allow.Empty() && !g.allow.Match(g.allowIdentity(res.Agent, id)) {
			return Decision{Err: middleware.Fail(middleware.CodeForbidden, "agent %s is not allowed here", signer.Truncate(res.Agent.ID))}
		}
	}
	var d Decision
	if g.cfg.Limiter != nil {
		d.Limit = g.cfg.Limiter.Take(r, res)
		d.Err = d.Limit.Err()
	}
	return d
}

// allowIdentity returns a's policy identity under the allow list's
// services, given denyID, a's identity under the deny list's.
func (g *Gate) allowIdentity(a middleware.Agent, denyID policy.Identity) policy.Identity {
	if g.sameServices {
		return denyID
	}
	return g.allow.Services().Identity(a)
}

// cardDenied reports whether a's card matches Config.DenyCards.
func (g *Gate) cardDenied(a middleware.Agent) bool {
	if g.denyNames == nil && g.denyPurposes == nil {
		return false
	}
	name, purpose := g.cfg.AgentCard(a.DirectoryURL)
	if name != "" && g.denyNames != nil {
		if _, ok := g.denyNames[strings.ToLower(name)]; ok {
			return true
		}
	}
	if purpose != "" && g.denyPurposes != nil {
		if _, ok := g.denyPurposes[strings.ToLower(purpose)]; ok {
			return true
		}
	}
	return false
}

// write writes d's refusal of r, or sets its rate-limit headers on h.
func (g *Gate) write(w http.ResponseWriter, r *http.Request, d Decision) {
	d.Limit.SetHeaders(w.Header())
	if d.Verification {
		g.cfg.Refuse(w, r, d.Err)
		return
	}
	middleware.WriteError(w, r, d.Err)
}

// Apply decides r, whose verification outcome is res (nil: not verified),
// and writes its part of the answer: the refusal (reported to
// Config.OnRefuse) or, when r may go on, the rate-limit headers on w. It
// returns the refusal, nil when r may go on. It fits package proxy's
// Config.Decide: the proxy then logs and counts the refusal as its own
// answer, and never forwards the request.
func (g *Gate) Apply(w http.ResponseWriter, r *http.Request, res *middleware.Result) *middleware.Error {
	d := g.Decide(r, res)
	if d.Err == nil {
		d.Limit.SetHeaders(w.Header())
		return nil
	}
	sw := &middleware.StatusWriter{ResponseWriter: w}
	g.write(sw, r, d)
	if f := g.cfg.OnRefuse; f != nil {
		f(r, res, d.Err, sw.Status)
	}
	return d.Err
}

// Middleware applies the rules behind the verifier's middleware (which
// should run in Observe mode so that every request reaches the rules),
// reading its outcome with middleware.ResultFrom.
func (g *Gate) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var res *middleware.Result
		if got, ok := middleware.ResultFrom(r.Context()); ok {
			res = &got
		}
		d := g.Decide(r, res)
		if d.Err != nil {
			g.write(w, r, d)
			return
		}
		d.Limit.SetHeaders(w.Header())
		next.ServeHTTP(w, r)
	})
}

// errRefused is what Transport returns for a refused request.
var errRefused = errors.New("rules: request refused before the upstream")
