package proxyconfig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/middleware/clientaddr"
	"github.com/agentid/agentid/middleware/metrics"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/middleware/redisstore"
	"github.com/agentid/agentid/middleware/rules"
	"github.com/agentid/agentid/middleware/status"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/asynclog"
)

// Options are what Build takes beyond the configuration.
type Options struct {
	// Stdout and Stderr are where access_log "stdout" and "stderr" write
	// (default os.Stdout, os.Stderr); the operational log goes to Stderr
	// unless Logger is set.
	Stdout, Stderr io.Writer
	// Logger, if set, receives the operational log (its level is the
	// caller's; log_level then only applies to a Logger Build makes).
	Logger *slog.Logger
	// AccessLogHandler makes the access log's handler on its writer. If
	// nil, slog's JSON handler.
	AccessLogHandler func(io.Writer) slog.Handler
	// Reloadable makes Reload possible even when the configuration has no
	// rules yet: the rules (with mode) then decide every request, the
	// verifier reporting its outcome only. Without it, a configuration
	// without routes, lists or limits runs the verifier in its mode.
	Reloadable bool
	// Embedded builds no reverse proxy or forward-auth endpoint: neither
	// upstream nor forward_auth is needed, and Middleware wraps the
	// caller's handler. Handler is then nil.
	Embedded bool
	// StatusTitle is the status page's title (default "agentid proxy
	// status").
	StatusTitle string
	// Replay, if set, keeps the nonces when redis_url is not set, instead
	// of a store of this proxy's own: an embedding server that rebuilds
	// the proxy on each reload of its configuration passes one store, so
	// that no reload forgets the nonces already seen.
	Replay middleware.ReplayStore
	// OnResult, if set, is told every verification's outcome after the
	// proxy's own hooks (metrics, status page), as the verifier's
	// Config.OnResult: an embedding server reads res.Request's context
	// (the Caddy module sets its placeholders from it).
	OnResult func(res middleware.Result)
}

// Proxy is a configuration built: the verifier, the rules and the proxy
// handler, with what they need (key fetcher, replay store, access log,
// metrics and status page). Reload swaps its rules atomically.
type Proxy struct {
	opts     Options
	logger   *slog.Logger
	keys     *keyfetch.Fetcher
	verifier *middleware.Verifier
	expanded *signer.ExpandedKeys // the verifier's, this proxy's own
	handler  *proxy.Handler
	metrics  *http.ServeMux // nil without metrics_listen
	status   *status.Page
	redis    *redisstore.Conn // nil: nonces and buckets in memory
	replayAt string

	gate atomic.Pointer[rules.Gate] // nil: the verifier's mode decides

	mu      sync.Mutex // serializes Reload; guards the fields below
	cfg     *Config
	plan    *Plan
	limiter *agentlimit.Limiter
	limits  Limits // what limiter was built from
	where   string // where the buckets are
	closers []func()
}

// Build validates cfg and assembles the proxy; nothing listens yet. ctx
// bounds the first contact with Redis and the registries' refreshes
// (until Close). Errors name the key (and file line, or flag) at fault.
func Build(ctx context.Context, cfg *Config, opts Options) (*Proxy, error) {
	plan, err := cfg.validate(opts.Embedded)
	if err != nil {
		return nil, err
	}
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	p := &Proxy{opts: opts, cfg: cfg.Clone(), plan: plan, logger: opts.Logger}
	if p.logger == nil {
		p.logger = slog.New(slog.NewTextHandler(opts.Stderr, &slog.HandlerOptions{Level: plan.Level}))
	}
	ok := false
	defer func() {
		if !ok {
			p.Close()
		}
	}()
	p.replayAt = "memory (this process only; redis_url shares them)"
	replay := opts.Replay
	if cfg.RedisURL != "" {
		routeRedisLog(p.logger)
		conn, err := redisstore.Dial(ctx, cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("%s: %s", cfg.where("redis_url"), strings.TrimPrefix(err.Error(), "redisstore: "))
		}
		p.closers = append(p.closers, func() { conn.Close() })
		s, err := redisstore.NewReplay(redisstore.Config{Client: conn.Client()})
		if err != nil {
			return nil, err
		}
		p.redis, replay, p.replayAt = conn, s, "Redis "+conn.Name()
	}
	p.expanded = signer.NewExpandedKeys(plan.ExpandedKeys)
	kc := plan.Keys
	kc.Logger = p.logger.With("component", "keyfetch")
	p.keys = keyfetch.New(kc)
	watch, stop := context.WithCancel(context.WithoutCancel(ctx))
	p.closers = append(p.closers, stop)
	go p.keys.WatchRegistries(watch) // returns at once without registries

	vc := middleware.Config{
		Keys:          p.keys,
		Authorities:   plan.Authorities,
		Mode:          plan.Mode,
		Profile:       plan.Profile,
		Replay:        replay,
		RefusalStatus: cfg.RefusalStatus,
		Logger:        p.logger.With("component", "verifier"),

		SignatureAgentCacheSize: plan.SignatureAgents,
		ExpandedKeys:            p.expanded,
	}
	hints := &trustHints{logger: p.logger.With("component", "verifier"), key: cfg.name("trust.hosts"), seen: map[string]bool{}}
	vc.OnResult = hints.observe
	var reg *metrics.Registry
	if cfg.MetricsListen != "" {
		reg = metrics.NewRegistry()
		title := opts.StatusTitle
		if title == "" {
			title = "agentid proxy status"
		}
		p.status = status.New(status.Config{Title: title, AgentName: p.keys.AgentName, UID: p.uid})
		vc.OnResult = func(r middleware.Result) {
			hints.observe(r)
			reg.ObserveResult(r)
			p.status.Observe(r)
		}
		p.metrics = http.NewServeMux()
		p.metrics.Handle("/metrics", reg.Handler())
		p.metrics.Handle("/status", p.status)
	}
	if f := opts.OnResult; f != nil {
		own := vc.OnResult
		vc.OnResult = func(r middleware.Result) { own(r); f(r) }
	}
	gated := opts.Reloadable || plan.Rules.Active()
	if gated {
		vc.Mode = middleware.Observe // every request reaches the rules
	}
	if p.verifier, err = middleware.New(vc); err != nil {
		return nil, err
	}
	if gated {
		g, err := p.newGate(plan.Rules, cfg.Limits)
		if err != nil {
			return nil, err
		}
		p.gate.Store(g)
	}
	if opts.Embedded {
		ok = true
		return p, nil
	}
	pc := proxy.Config{
		Verifier: p.verifier, Upstream: plan.Upstream, ForwardAuth: plan.Front, ForwardAuthFrom: plan.From,
		Services: clone(cfg.AgentidServices),
		// The default transport reaches the upstream directly, never
		// through an HTTP_PROXY meant for outbound traffic, and keeps
		// this many connections to it for reuse.
		MaxIdleConnsPerHost: cfg.UpstreamMaxIdle,
		AgentCard:           p.keys.AgentName, // agent_name, agent_purpose in the access log
	}
	if p.status != nil { // refusals before verification, on the status page
		pc.OnRefuse = func(res *middleware.Result) { p.status.ObserveRefusal(res.Outcome, res.Err.Code) }
	}
	if reg != nil {
		pc.Metrics = reg
	}
	if w := map[string]io.Writer{"stdout": opts.Stdout, "stderr": opts.Stderr}[cfg.AccessLog]; w != nil {
		// Formatted and written by a goroutine of its own, off the request
		// path; lines that find its queue full are dropped and counted in
		// /metrics. Close writes out what is queued.
		mk := opts.AccessLogHandler
		if mk == nil {
			mk = func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, nil) }
		}
		logs := asynclog.New(w, asynclog.DefaultQueue, mk)
		p.closers = append(p.closers, func() { logs.Close() })
		pc.AccessLog = slog.New(logs)
		if reg != nil {
			reg.CountLogDrops(logs.Dropped)
		}
	}
	if gated {
		pc.Decide = func(w http.ResponseWriter, r *http.Request, res *middleware.Result) *middleware.Error {
			return p.gate.Load().Apply(w, r, res)
		}
	}
	if p.handler, err = proxy.New(pc); err != nil {
		return nil, err
	}
	ok = true
	return p, nil
}

// newGate builds the rules of r; limits is what r's limits were read
// from: when it is what the current limiter was built from, that limiter
// (and its buckets) is kept.
func (p *Proxy) newGate(r Rules, limits Limits) (*rules.Gate, error) {
	lim, where := p.limiter, p.where
	if lim == nil || !reflect.DeepEqual(limits, p.limits) {
		lim, where = nil, "memory"
		if r.Agent.On() || r.Addr.On() {
			lcfg := agentlimit.Config{Agent: r.Agent, Address: r.Addr, KeyHeader: r.KeyHeader, BucketsPerAgent: r.BucketsPer, Services: r.Allow.Services, Logger: p.logger.With("component", "limits")}
			if len(r.Trusted) > 0 { // behind load balancers: their header names the client
				lcfg.ClientAddr = clientaddr.New(r.Trusted, r.AddrHeader).Key
			}
			if p.redis != nil { // the buckets share the replay store's client
				store, err := redisstore.NewLimits(redisstore.Config{Client: p.redis.Client(), Prefix: r.RedisPrefix})
				if err != nil {
					return nil, fmt.Errorf("%s: %s", p.cfg.where("limits.redis_prefix"), strings.TrimPrefix(err.Error(), "redisstore: "))
				}
				lcfg.Store, where = store, p.replayAt
			}
			var err error
			if lim, err = agentlimit.New(lcfg); err != nil {
				return nil, fmt.Errorf("limits: %s", strings.TrimPrefix(err.Error(), "agentlimit: "))
			}
		}
	}
	var onRefuse func(*http.Request, *middleware.Result, *middleware.Error, int)
	if p.status != nil {
		// The rules make every refusal (the verifier runs in Observe
		// mode): each is counted here, the verifier's outcomes by Observe.
		onRefuse = func(_ *http.Request, res *middleware.Result, e *middleware.Error, _ int) {
			o := e.Outcome()
			if res != nil {
				o = res.Outcome
			}
			p.status.ObserveRefusal(o, e.Code)
		}
	}
	g, err := rules.New(rules.Config{Mode: r.Mode, Routes: r.Routes, Allow: r.Allow, Deny: r.Deny, DenyCards: r.DenyCards,
		AgentCard: p.keys.AgentName, Limiter: lim, Refuse: p.verifier.WriteError, OnRefuse: onRefuse})
	if err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "rules: "))
	}
	p.limiter, p.limits, p.where = lim, limits, where
	return g, nil
}

// Handler is the reverse proxy or forward-auth endpoint (nil when built
// Embedded).
func (p *Proxy) Handler() http.Handler {
	if p.handler == nil {
		return nil
	}
	return p.handler
}

// Middleware verifies each request and applies the rules before next
// (for an Embedded proxy): next sees the outcome with
// middleware.ResultFrom; X-Agent-* headers are the caller's to set. With
// rules, a request whose path is not normal (middleware.CheckPath) is
// refused with 400 invalid_request before any verification work, as the
// proxy refuses it: no key set is fetched and no nonce spent for a request
// that cannot pass.
func (p *Proxy) Middleware(next http.Handler) http.Handler {
	verify := p.verifier.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g := p.gate.Load(); g != nil {
			var res *middleware.Result
			if got, ok := middleware.ResultFrom(r.Context()); ok {
				res = &got
			}
			if g.Apply(w, r, res) != nil {
				return
			}
		}
		next.ServeHTTP(w, r)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.gate.Load() != nil {
			if err := middleware.CheckPath(r.URL); err != nil {
				p.verifier.WriteError(w, r, err)
				if p.status != nil {
					p.status.ObserveRefusal(err.Outcome(), err.Code)
				}
				return
			}
		}
		verify.ServeHTTP(w, r)
	})
}

// uid is the uid of an agentid service's agent (agentid_services), for
// the status page.
func (p *Proxy) uid(id string) string {
	if p.handler == nil {
		return ""
	}
	return p.handler.UID(id)
}

// Verifier is the proxy's verifier.
func (p *Proxy) Verifier() *middleware.Verifier { return p.verifier }

// Metrics serves GET /metrics and GET /status (the status page), or is nil
// without metrics_listen.
func (p *Proxy) Metrics() http.Handler {
	if p.metrics == nil {
		return nil
	}
	return p.metrics
}

// Logger is the operational log.
func (p *Proxy) Logger() *slog.Logger { return p.logger }

// Config returns the configuration in force (after the last Reload).
func (p *Proxy) Config() *Config {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg.Clone()
}

// Summary describes the proxy in a few lines, for a banner: the mode,
// what it serves and trusts, where nonces are kept, and the rules.
func (p *Proxy) Summary() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, pl := p.cfg, p.plan
	local := ""
	if c.Trust.AllowHTTP {
		local += "; http:// key sets allowed"
	}
	if c.Trust.AllowPrivate {
		local += "; private addresses allowed"
	}
	if len(c.AgentidServices) > 0 {
		local += "; X-Agent-Uid for agents of " + strings.Join(c.Masked().AgentidServices, ", ")
	}
	if pl.Front != "" {
		from := "loopback"
		if len(pl.From) > 0 {
			from = fmt.Sprint(pl.From)
		}
		local += "; subrequests from " + from
	}
	out := []string{fmt.Sprintf("• mode %s; serving %s; trusting %s; nonces in %s%s", pl.Mode, strings.Join(pl.Authorities, ", "), strings.Join(c.Trust.Hosts, ", "), p.replayAt, local)}
	if r := pl.Rules; p.gate.Load() != nil && (r.Active() || p.opts.Reloadable) {
		s := fmt.Sprintf("• rules: %d routes, allow %d, deny %d; limits agent %s, address %s (buckets in %s)",
			len(r.Routes), policySize(r.Allow), policySize(r.Deny)+len(r.DenyCards), limitString(r.Agent), limitString(r.Addr), p.where)
		if len(r.Trusted) > 0 {
			h := r.AddrHeader
			if h == "" {
				h = clientaddr.DefaultHeader
			}
			s += fmt.Sprintf("; client address from %s when the peer is one of %v", h, r.Trusted)
		}
		out = append(out, s)
	}
	return out
}

func limitString(l agentlimit.Limit) string {
	if !l.On() {
		return "off"
	}
	return fmt.Sprintf("%d/%s", l.Quota, l.Window)
}

// Close stops the registries' refreshes, writes out the queued access log
// and releases Redis. Call it once the servers have stopped.
func (p *Proxy) Close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
}
