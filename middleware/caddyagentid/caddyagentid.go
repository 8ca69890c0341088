// Package caddyagentid is the Caddy module http.handlers.agentid: the
// agentid verifier (package middleware) inside Caddy, with the route modes
// and allow and deny lists of package rules, so that a Caddy site verifies
// web-bot-auth signatures itself instead of asking a forward-auth endpoint
// over another HTTP hop.
//
// Its Caddyfile directive is agentid:
//
//	app.example.com {
//		agentid {
//			authority app.example.com
//			trust *.agentid.example
//			agentid_service https://agentid.example
//			mode required
//			route /public/ optional
//		}
//		reverse_proxy 127.0.0.1:8000
//	}
//
// A request the rules let through goes on to the next handler with the
// X-Agent-* headers of `idcli proxy` (package proxy's SetAgentHeaders):
// every X-Agent-* header the client sent, in any spelling, is removed
// first, and a Connection header cannot name ours (reverse_proxy would
// drop them). A refused request gets the verifier's JSON error and
// Accept-Signature, and the next handler never runs.
//
// Build Caddy with it from this module's cmd/caddy (a plain go build), or
// with xcaddy --with github.com/agentid/agentid/middleware/caddyagentid.
package caddyagentid

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/middleware/redisreplay"
	"github.com/agentid/agentid/middleware/rules"
	"github.com/agentid/agentid/signer"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler is the module http.handlers.agentid. Its JSON fields are the
// Caddyfile's subdirectives (see UnmarshalCaddyfile).
type Handler struct {
	// Authorities are the host[:port] (or *.suffix) this site answers
	// for; a signature made for any other host is refused with 421
	// misdirected_request. At least one.
	Authorities []string `json:"authorities,omitempty"`
	// Trust lists the hosts whose agents' key sets may be fetched: exact
	// host[:port], host:* or *.suffix. At least one.
	Trust []string `json:"trust,omitempty"`
	// Mode applies to paths no route names: required (the default),
	// optional or observe.
	Mode string `json:"mode,omitempty"`
	// Routes give path prefixes their own mode; the longest prefix wins.
	Routes []Route `json:"routes,omitempty"`
	// Allow, if set, lists the only verified agents let through (403
	// forbidden for others); Deny lists those refused with 403.
	Allow *Policy `json:"allow,omitempty"`
	Deny  *Policy `json:"deny,omitempty"`
	// AgentidServices are base URLs of agentid services whose agents get
	// X-Agent-Uid, such as https://agentid.example.
	AgentidServices []string `json:"agentid_services,omitempty"`
	// Registries are URLs of plain-text lists of Signature Agent Card
	// URLs whose agents are trusted too; their hosts must be trusted.
	Registries []string `json:"registries,omitempty"`
	// RedisURL, if set, keeps the nonces in Redis, shared by every Caddy
	// instance: redis://[:PASSWORD@]HOST:PORT[/DB] or HOST:PORT,… for a
	// cluster. Without it they are kept in this process's memory, shared
	// by every agentid handler and kept across config reloads.
	RedisURL string `json:"redis_url,omitempty"`
	// RefusalStatus is 401 (the default) or 403.
	RefusalStatus int `json:"refusal_status,omitempty"`
	// Profile is deployed (the default) or strict-01.
	Profile string `json:"profile,omitempty"`
	// AllowHTTP fetches key sets of http:// signature agents, and
	// AllowPrivate from loopback and private addresses (with *.localhost
	// resolved to loopback): local development only.
	AllowHTTP    bool `json:"allow_http,omitempty"`
	AllowPrivate bool `json:"allow_private,omitempty"`

	verifier *middleware.Verifier
	gate     *rules.Gate
	services []signer.ServiceURL
	cleanup  []func()
}

// Route is one path prefix's mode.
type Route struct {
	Prefix string `json:"prefix"`
	Mode   string `json:"mode"`
}

// Policy is a list of verified agents (middleware.Policy): exact
// identities, identity hosts (exact or *.suffix), and uid patterns.
type Policy struct {
	Identities []string `json:"identities,omitempty"`
	Hosts      []string `json:"hosts,omitempty"`
	UIDs       []string `json:"uids,omitempty"`
}

func (p *Policy) policy() middleware.Policy {
	if p == nil {
		return middleware.Policy{}
	}
	return middleware.Policy{Identities: p.Identities, Hosts: p.Hosts, UIDs: p.UIDs}
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.agentid",
		New: func() caddy.Module { return new(Handler) },
	}
}

// memoryReplay is the in-memory replay store every handler of the process
// shares: a config reload makes new handlers, and a store of their own
// would forget the nonces already seen, letting their signatures be
// replayed until they expire.
var memoryReplay = caddy.NewUsagePool()

const memoryReplayKey = "agentid.replay.memory"

type pooledReplay struct{ *middleware.MemoryReplayStore }

func (pooledReplay) Destruct() error { return nil }

// parseMode reads a mode name.
func parseMode(what, s string) (middleware.Mode, error) {
	if s == "" {
		return middleware.Required, nil
	}
	for _, m := range []middleware.Mode{middleware.Required, middleware.Optional, middleware.Observe} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("agentid: %s %q: want required, optional or observe", what, s)
}

// Provision builds the key fetcher, the replay store, the verifier and the
// rules.
func (h *Handler) Provision(ctx caddy.Context) error {
	logger := ctx.Slogger()
	mode, err := parseMode("mode", h.Mode)
	if err != nil {
		return err
	}
	var profile middleware.Profile
	switch h.Profile {
	case "", middleware.ProfileDeployed.String():
	case middleware.ProfileStrict01.String():
		profile = middleware.ProfileStrict01
	default:
		return fmt.Errorf("agentid: profile %q: want deployed or strict-01", h.Profile)
	}
	if len(h.Authorities) == 0 {
		return errors.New("agentid: authority is required: name the host[:port] clients reach this site at; a signature made for any other host is refused")
	}
	if len(h.Trust) == 0 {
		return errors.New("agentid: trust is required: name the hosts whose agents you accept, e.g. trust *.agentid.example")
	}
	if h.RefusalStatus != 0 && h.RefusalStatus != http.StatusUnauthorized && h.RefusalStatus != http.StatusForbidden {
		return fmt.Errorf("agentid: refusal_status %d: want 401 or 403", h.RefusalStatus)
	}
	h.services = nil
	for _, s := range h.AgentidServices {
		u, err := signer.ParseServiceURL(s)
		if err != nil {
			return fmt.Errorf("agentid: agentid_service: %s", strings.TrimPrefix(err.Error(), "signer: "))
		}
		h.services = append(h.services, u)
	}
	kc := keyfetch.Config{
		TrustedHosts:         h.Trust,
		AllowHTTP:            h.AllowHTTP,
		AllowPrivateNetworks: h.AllowPrivate,
		Registries:           h.Registries,
		Logger:               logger.With("component", "keyfetch"),
	}
	if err := kc.Validate(); err != nil {
		return fmt.Errorf("agentid: trust: %s", strings.TrimPrefix(err.Error(), "keyfetch: invalid config: "))
	}
	routes := make([]rules.Route, 0, len(h.Routes))
	for _, r := range h.Routes {
		m, err := parseMode("route "+r.Prefix, r.Mode)
		if err != nil {
			return err
		}
		routes = append(routes, rules.Route{Prefix: r.Prefix, Mode: m})
	}
	keys := keyfetch.New(kc)
	watch, stop := context.WithCancel(context.Background())
	h.cleanup = append(h.cleanup, stop)
	go keys.WatchRegistries(watch) // returns at once without registries

	var replay middleware.ReplayStore
	if h.RedisURL != "" {
		s, err := redisreplay.Dial(ctx, h.RedisURL)
		if err != nil {
			h.Cleanup()
			return fmt.Errorf("agentid: redis_url: %s", strings.TrimPrefix(err.Error(), "redisreplay: "))
		}
		replay = s
		h.cleanup = append(h.cleanup, func() { s.Close() })
	} else {
		v, _, err := memoryReplay.LoadOrNew(memoryReplayKey, func() (caddy.Destructor, error) {
			return pooledReplay{middleware.NewMemoryReplayStore()}, nil
		})
		if err != nil {
			h.Cleanup()
			return err
		}
		replay = v.(pooledReplay).MemoryReplayStore
		h.cleanup = append(h.cleanup, func() { memoryReplay.Delete(memoryReplayKey) })
	}

	// The verifier only observes; the rules decide by the route's mode,
	// the lists, and answer refusals with the verifier's WriteError.
	h.verifier, err = middleware.NewVerifier(middleware.Config{
		Keys:          keys,
		Authorities:   h.Authorities,
		Mode:          middleware.Observe,
		Profile:       profile,
		Replay:        replay,
		RefusalStatus: h.RefusalStatus,
		Logger:        logger.With("component", "verifier"),
	})
	if err != nil {
		h.Cleanup()
		return fmt.Errorf("agentid: %s", strings.TrimPrefix(err.Error(), "middleware: "))
	}
	h.gate, err = rules.New(rules.Config{
		Mode:   mode,
		Routes: routes,
		Allow:  h.Allow.policy(),
		Deny:   h.Deny.policy(),
		Refuse: h.verifier.WriteError,
	})
	if err != nil {
		h.Cleanup()
		return fmt.Errorf("agentid: %s", strings.TrimPrefix(err.Error(), "rules: "))
	}
	return nil
}

// Cleanup stops the registry watch and releases the replay store.
func (h *Handler) Cleanup() error {
	for i := len(h.cleanup) - 1; i >= 0; i-- {
		h.cleanup[i]()
	}
	h.cleanup = nil
	return nil
}

// ServeHTTP verifies r, applies the rules, and passes a request they let
// through on to next with the X-Agent-* headers.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	proxy.StripAgentHeaders(r.Header)
	vr := verifiedRequest(r)
	res := h.verifier.Check(vr)
	r.Body = vr.Body // the verifier may have read the body, and put it back on vr
	if refusal := h.gate.Apply(w, vr, res); refusal != nil {
		return nil // Apply wrote the refusal
	}
	dropConnectionTokens(r.Header)
	proxy.StripAgentHeaders(r.Trailer) // declared, or read with the body
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &trailerStripper{ReadCloser: r.Body, r: r}
	}
	proxy.SetAgentHeaders(r.Header, res, h.services)
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		setPlaceholders(repl, res, r.Header.Get(proxy.HeaderUID))
	}
	return next.ServeHTTP(w, r)
}

// verifiedRequest is r as the client sent it: a rewrite, uri or
// handle_path that ran before this handler changed r's URL, but the
// signature covers the original path and query, and the route modes are
// written for the paths clients ask for.
func verifiedRequest(r *http.Request) *http.Request {
	orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request)
	if !ok || orig.URL == nil || (orig.URL.Path == r.URL.Path && orig.URL.RawPath == r.URL.RawPath && orig.URL.RawQuery == r.URL.RawQuery) {
		return r
	}
	c := *r
	c.URL, c.RequestURI = orig.URL, orig.RequestURI
	return &c
}

// trailerStripper removes the X-Agent-* trailers of r when its body has
// been read to the end, which is when net/http fills in r.Trailer and
// reverse_proxy copies them to the upstream request.
type trailerStripper struct {
	io.ReadCloser
	r *http.Request
}

func (b *trailerStripper) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		proxy.StripAgentHeaders(b.r.Trailer)
	}
	return n, err
}

// dropConnectionTokens removes from Connection the tokens naming X-Agent-*
// headers: reverse_proxy deletes the headers Connection names after this
// handler ran, so a client's "Connection: X-Agent-Uid" would otherwise
// remove the identity this handler sets.
func dropConnectionTokens(h http.Header) {
	values, ok := h["Connection"]
	if !ok {
		return
	}
	kept := values[:0:0]
	for _, v := range values {
		var tokens []string
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" && !proxy.IsAgentHeader(t) {
				tokens = append(tokens, t)
			}
		}
		if len(tokens) > 0 {
			kept = append(kept, strings.Join(tokens, ", "))
		}
	}
	if len(kept) == 0 {
		delete(h, "Connection")
		return
	}
	h["Connection"] = kept
}

// setPlaceholders makes the outcome available to the rest of the site as
// {http.agentid.verdict}, {http.agentid.id}, {http.agentid.key_id},
// {http.agentid.uid} (uid as in X-Agent-Uid) and {http.agentid.reason}.
func setPlaceholders(repl *caddy.Replacer, res *middleware.Result, uid string) {
	repl.Set("http.agentid.verdict", string(res.Outcome()))
	if res.Verdict == middleware.Verified {
		repl.Set("http.agentid.id", res.Agent.ID)
		repl.Set("http.agentid.key_id", res.Agent.KeyID)
		repl.Set("http.agentid.uid", uid)
	}
	if res.Err != nil {
		repl.Set("http.agentid.reason", string(res.Err.Code))
	}
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
