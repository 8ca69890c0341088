// Package caddyagentid is the Caddy module http.handlers.agentid: the
// agentid verifier (package middleware) inside Caddy, with the route modes
// and allow and deny lists of package rules, so that a Caddy site verifies
// web-bot-auth signatures itself instead of asking a forward-auth endpoint
// over another HTTP hop. Its Caddyfile directive, agentid, takes the keys
// of idcli proxy's YAML file as subdirectives (package proxyconfig builds
// the verifier and the rules from them):
//
//	app.example.com {
//		agentid {
//			authorities app.example.com
//			trust *.agentid.example
//			agentid_services https://agentid.example
//			mode required
//			route /public/ optional
//		}
//		reverse_proxy 127.0.0.1:8000
//	}
//
// A request let through goes on with idcli proxy's X-Agent-* headers
// (proxy.SetAgentHeaders); the client's own are removed, in any spelling,
// from every request, matched or not (http.handlers.agentid_strip). A
// refused one gets the verifier's JSON error. docs/caddy.md has the
// details and the build (this module's cmd/caddy, or xcaddy).
package caddyagentid

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/middleware/proxy/proxyconfig"
	"github.com/agentid/agentid/signer"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler is the module http.handlers.agentid. Its settings are those of
// `idcli proxy --config FILE` (package proxyconfig), under the same names:
// ConfigFile names such a file, and the fields below, when set, replace
// its values.
type Handler struct {
	// ConfigFile, if set, is read first: a YAML file of idcli proxy (its
	// listen, upstream, forward_auth, metrics_listen and access_log keys
	// do not apply here).
	ConfigFile string `json:"config_file,omitempty"`
	// Authorities are the host[:port] (or *.suffix) this site answers
	// for; a signature made for any other host is refused with 421
	// misdirected_request. At least one, here or in ConfigFile.
	Authorities []string `json:"authorities,omitempty"`
	// Trust lists the hosts whose agents' key sets may be fetched: exact
	// host[:port], host:* or *.suffix. At least one, here or in
	// ConfigFile.
	Trust []string `json:"trust,omitempty"`
	// AllowHTTP fetches key sets of http:// signature agents, and
	// AllowPrivate from loopback and private addresses (with *.localhost
	// resolved to loopback): local development only.
	AllowHTTP    bool `json:"allow_http,omitempty"`
	AllowPrivate bool `json:"allow_private,omitempty"`
	// Registries are URLs of plain-text lists of Signature Agent Card
	// URLs whose agents are trusted too; their hosts must be trusted.
	Registries []string `json:"registries,omitempty"`
	// AgentidServices are base URLs of agentid services whose agents get
	// X-Agent-Uid, such as https://agentid.example.
	AgentidServices []string `json:"agentid_services,omitempty"`
	// Mode applies to paths no route names: required (the default),
	// optional or observe.
	Mode string `json:"mode,omitempty"`
	// Profile is deployed (the default) or strict-01.
	Profile string `json:"profile,omitempty"`
	// RefusalStatus is 401 (the default) or 403.
	RefusalStatus int `json:"refusal_status,omitempty"`
	// RedisURL, if set, keeps the nonces (and the limits' buckets) in
	// Redis, shared by every instance. Without it the nonces are kept in
	// this process's memory, shared by every agentid handler and kept
	// across config reloads.
	RedisURL string `json:"redis_url,omitempty"`
	// Routes give path prefixes their own mode; the longest prefix wins.
	Routes []Route `json:"routes,omitempty"`
	// Allow, if set, lists the only verified agents let through (403
	// forbidden for others); Deny lists those refused with 403.
	Allow *Policy `json:"allow,omitempty"`
	Deny  *Policy `json:"deny,omitempty"`
	// Limits are the per-agent and per-address rate limits.
	Limits *Limits `json:"limits,omitempty"`
	// Cache sizes the verifier's caches (each handler its own); a field
	// left 0 keeps ConfigFile's value or the default.
	Cache *Cache `json:"cache,omitempty"`

	proxy    *proxyconfig.Proxy
	chain    http.Handler
	services []signer.ServiceURL
	release  func()
}

// Route is an entry of the proxy's routes: Prefix's mode.
type Route struct {
	Prefix string `json:"prefix"`
	Mode   string `json:"mode"`
}

// Policy is the proxy's allow or deny list.
type Policy struct {
	Identities []string `json:"identities,omitempty"`
	Hosts      []string `json:"hosts,omitempty"`
	UIDs       []string `json:"uids,omitempty"`
	Cards      []string `json:"cards,omitempty"`
}

// Limits are the proxy's limits (the keys of its limits block).
type Limits struct {
	Agent            string   `json:"agent,omitempty"`
	Address          string   `json:"address,omitempty"`
	KeyHeader        string   `json:"key_header,omitempty"`
	BucketsPerAgent  int      `json:"buckets_per_agent,omitempty"`
	RedisPrefix      string   `json:"redis_prefix,omitempty"`
	TrustedProxies   []string `json:"trusted_proxies,omitempty"`
	ClientAddrHeader string   `json:"client_addr_header,omitempty"`
}

// Cache is the proxy's cache sizes (the keys of its cache block).
type Cache struct {
	KeySets            int `json:"key_sets,omitempty"`
	KeySetsOnProbation int `json:"key_sets_on_probation,omitempty"`
	KeySetsPerSite     int `json:"key_sets_per_site,omitempty"`
	SignatureAgents    int `json:"signature_agents,omitempty"`
	ExpandedKeys       int `json:"expanded_keys,omitempty"`
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

// config returns the proxy configuration: ConfigFile's, or the defaults,
// with the fields that are set replacing its values.
func (h *Handler) config() (*proxyconfig.Config, error) {
	cfg := proxyconfig.Default()
	if h.ConfigFile != "" {
		var err error
		if cfg, err = proxyconfig.Load(h.ConfigFile); err != nil {
			return nil, err
		}
	}
	set := func(dst *[]string, v []string) {
		if v != nil {
			*dst = v
		}
	}
	set(&cfg.Authorities, h.Authorities)
	set(&cfg.Trust.Hosts, h.Trust)
	set(&cfg.Trust.Registries, h.Registries)
	set(&cfg.AgentidServices, h.AgentidServices)
	cfg.Trust.AllowHTTP = cfg.Trust.AllowHTTP || h.AllowHTTP
	cfg.Trust.AllowPrivate = cfg.Trust.AllowPrivate || h.AllowPrivate
	for dst, v := range map[*string]string{&cfg.Mode: h.Mode, &cfg.Profile: h.Profile, &cfg.RedisURL: h.RedisURL} {
		if v != "" {
			*dst = v
		}
	}
	if h.RefusalStatus != 0 {
		cfg.RefusalStatus = h.RefusalStatus
	}
	if h.Routes != nil {
		cfg.Routes = make([]proxyconfig.Route, len(h.Routes))
		for i, r := range h.Routes {
			cfg.Routes[i] = proxyconfig.Route(r)
		}
	}
	if h.Allow != nil {
		cfg.Allow = proxyconfig.Policy(*h.Allow)
	}
	if h.Deny != nil {
		cfg.Deny = proxyconfig.Policy(*h.Deny)
	}
	if h.Limits != nil {
		cfg.Limits = proxyconfig.Limits(*h.Limits)
	}
	if h.Cache != nil { // 0 is the default: a field left 0 keeps the file's value
		c := proxyconfig.Cache(*h.Cache)
		cfg.Cache.KeySets = cmp.Or(c.KeySets, cfg.Cache.KeySets)
		cfg.Cache.KeySetsOnProbation = cmp.Or(c.KeySetsOnProbation, cfg.Cache.KeySetsOnProbation)
		cfg.Cache.KeySetsPerSite = cmp.Or(c.KeySetsPerSite, cfg.Cache.KeySetsPerSite)
		cfg.Cache.SignatureAgents = cmp.Or(c.SignatureAgents, cfg.Cache.SignatureAgents)
		cfg.Cache.ExpandedKeys = cmp.Or(c.ExpandedKeys, cfg.Cache.ExpandedKeys)
	}
	// What an embedded proxy does not do: no listener, no access log of
	// its own (Caddy's log directive logs requests), no metrics server.
	cfg.Upstream, cfg.ForwardAuth, cfg.MetricsListen, cfg.AccessLog = "", false, "", "off"
	return cfg, nil
}

// Provision builds the verifier and the rules (package proxyconfig, as
// idcli proxy does), and the replay store.
func (h *Handler) Provision(ctx caddy.Context) error {
	cfg, err := h.config()
	if err != nil {
		return fmt.Errorf("agentid: %w", err)
	}
	h.services = nil
	for _, s := range cfg.AgentidServices {
		u, err := signer.ParseServiceURL(s)
		if err != nil {
			return fmt.Errorf("agentid: agentid_services: %s", strings.TrimPrefix(err.Error(), "signer: "))
		}
		h.services = append(h.services, u)
	}
	opts := proxyconfig.Options{Embedded: true, Reloadable: true, Logger: ctx.Slogger(), OnResult: h.setPlaceholders}
	if cfg.RedisURL == "" {
		v, _, err := memoryReplay.LoadOrNew(memoryReplayKey, func() (caddy.Destructor, error) {
			return pooledReplay{middleware.NewMemoryReplayStore()}, nil
		})
		if err != nil {
			return err
		}
		opts.Replay = v.(pooledReplay).MemoryReplayStore
		h.release = func() { memoryReplay.Delete(memoryReplayKey) }
	}
	if h.proxy, err = proxyconfig.Build(ctx, cfg, opts); err != nil {
		h.Cleanup()
		return fmt.Errorf("agentid: %w", err)
	}
	h.chain = h.proxy.Middleware(http.HandlerFunc(h.pass))
	return nil
}

// Cleanup stops the registry watch and releases the replay store.
func (h *Handler) Cleanup() error {
	if h.proxy != nil {
		h.proxy.Close()
		h.proxy = nil
	}
	if h.release != nil {
		h.release()
		h.release = nil
	}
	return nil
}

// passKey carries a request's *passState into the chain.
type passKey struct{}

// passState is what ServeHTTP gives pass: the request as Caddy has it and
// the next handler, and what the next handler returned.
type passState struct {
	r    *http.Request
	next caddyhttp.Handler
	err  error
}

// ServeHTTP verifies r, applies the rules, and passes a request they let
// through on to next with the X-Agent-* headers.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	proxy.StripAgentHeaders(r.Header)
	st := &passState{r: r, next: next}
	vr := verifiedRequest(r)
	h.chain.ServeHTTP(w, vr.WithContext(context.WithValue(vr.Context(), passKey{}, st)))
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		if _, set := repl.Get("http.agentid.outcome"); !set {
			// Refused before verification: the path is not normal.
			if err := middleware.CheckPath(vr.URL); err != nil {
				placeholders(repl, &middleware.Result{Outcome: err.Outcome(), Reason: err.Code.Reason(), Err: err}, "")
			}
		}
	}
	return st.err
}

// pass is the end of the chain, for a request the rules let through: vr
// is the verified request (its context holds the outcome, its Body what
// the verifier left to read).
func (h *Handler) pass(w http.ResponseWriter, vr *http.Request) {
	st := vr.Context().Value(passKey{}).(*passState)
	res, _ := middleware.ResultFrom(vr.Context())
	r := st.r.WithContext(vr.Context())
	r.Body = vr.Body
	stripClient(r)
	proxy.SetAgentHeaders(r.Header, &res, h.services)
	st.err = st.next.ServeHTTP(w, r)
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

// setPlaceholders is the verifier's OnResult hook: it makes every
// request's outcome, whatever the mode and whether the rules then let it
// through, available to the rest of the site (routes, matchers, log,
// header) as placeholders in the request's Replacer (docs/caddy.md).
func (h *Handler) setPlaceholders(res middleware.Result) {
	repl, ok := res.Request.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return
	}
	uid := ""
	if res.Outcome == middleware.OutcomeVerified && len(h.services) > 0 {
		// The uid X-Agent-Uid would carry: an agent of agentid_services.
		hd := make(http.Header, 4)
		proxy.SetAgentHeaders(hd, &res, h.services)
		uid = hd.Get(proxy.HeaderUID)
	}
	placeholders(repl, &res, uid)
}

// placeholders sets {http.agentid.outcome} and {http.agentid.reason}
// (docs/outcomes.md; reason "verified" when verified), and for a verified
// request {http.agentid.agent}, {http.agentid.keyid} and
// {http.agentid.uid} (empty otherwise, so a matcher never reads another
// request's or a client's value); and the older names
// {http.agentid.verdict} (proxy.Verdict), {http.agentid.id} and
// {http.agentid.key_id}. Every value is the verifier's: an outcome and a
// reason of fixed sets, a verified identity and keyid.
func placeholders(repl *caddy.Replacer, res *middleware.Result, uid string) {
	reason := res.Reason
	if reason == "" && res.Err != nil {
		reason = res.Err.Code.Reason()
	}
	agent, keyID := "", ""
	if res.Outcome == middleware.OutcomeVerified {
		agent, keyID = res.Agent.ID, res.Agent.KeyID
	}
	repl.Set("http.agentid.outcome", string(res.Outcome))
	repl.Set("http.agentid.reason", reason)
	repl.Set("http.agentid.agent", agent)
	repl.Set("http.agentid.keyid", keyID)
	repl.Set("http.agentid.uid", uid)
	repl.Set("http.agentid.verdict", proxy.Verdict(res.Outcome))
	repl.Set("http.agentid.id", agent)
	repl.Set("http.agentid.key_id", keyID)
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
