package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/middleware/agentlimit/redislimit"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/middleware/redisreplay"
	"github.com/agentid/agentid/middleware/rules"
	"github.com/agentid/agentid/middleware/status"
)

// proxyFile is the YAML file `idcli proxy --config FILE` reads. Every key
// is optional; a flag given on the command line wins over the file.
type proxyFile struct {
	Listen        *string    `yaml:"listen"`
	Upstream      *string    `yaml:"upstream"`
	ForwardAuth   *bool      `yaml:"forward_auth"`
	Front         *string    `yaml:"front"`
	Authorities   []string   `yaml:"authorities"`
	Trust         *trustFile `yaml:"trust"`
	Mode          *string    `yaml:"mode"`
	RefusalStatus *int       `yaml:"refusal_status"`
	RedisURL      *string    `yaml:"redis_url"`
	MetricsListen *string    `yaml:"metrics_listen"`
	AccessLog     *string    `yaml:"access_log"`
	LogLevel      *string    `yaml:"log_level"`

	Routes []routeFile `yaml:"routes"`
	Allow  *policyFile `yaml:"allow"`
	Deny   *policyFile `yaml:"deny"`
	Limits *limitsFile `yaml:"limits"`
}

type trustFile struct {
	Hosts        []string `yaml:"hosts"`
	AllowHTTP    *bool    `yaml:"allow_http"`
	AllowPrivate *bool    `yaml:"allow_private"`
}

type routeFile struct {
	Prefix string `yaml:"prefix"`
	Mode   string `yaml:"mode"`
}

type policyFile struct {
	Identities []string `yaml:"identities"`
	Hosts      []string `yaml:"hosts"`
	UIDs       []string `yaml:"uids"`
	// Cards ("name:…", "purpose:…") match the agent's Signature Agent
	// Card; deny only.
	Cards []string `yaml:"cards"`
}

func (p *policyFile) policy() middleware.Policy {
	if p == nil {
		return middleware.Policy{}
	}
	return middleware.Policy{Identities: p.Identities, Hosts: p.Hosts, UIDs: p.UIDs}
}

type limitsFile struct {
	Agent     string `yaml:"agent"`
	Address   string `yaml:"address"`
	KeyHeader string `yaml:"key_header"`
	// RedisPrefix is the key prefix of the buckets in Redis (default
	// agentid:limit:), to keep deployments sharing a Redis apart.
	RedisPrefix string `yaml:"redis_prefix"`
	// TrustedProxies are the load balancers (addresses or CIDRs) whose
	// ClientAddrHeader is believed for the per-address limit.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// ClientAddrHeader is the header they append the client address to
	// (default X-Forwarded-For).
	ClientAddrHeader string `yaml:"client_addr_header"`
}

// proxyRules is what the file adds beyond the flags: per-route modes,
// allow and deny lists, and limits.
type proxyRules struct {
	routes      []rules.Route
	allow, deny middleware.Policy
	denyCards   []string // deny.cards
	agent, addr agentlimit.Limit
	keyHeader   string
	redisPrefix string
	trusted     []netip.Prefix // limits.trusted_proxies
	addrHeader  string         // limits.client_addr_header
}

// active reports whether any rule is set.
func (r *proxyRules) active() bool {
	return r != nil && (len(r.routes) > 0 || policySize(r.allow) > 0 || len(r.denyCards) > 0 ||
		policySize(r.deny) > 0 || r.agent.On() || r.addr.On())
}

// policySize is the number of entries in p.
func policySize(p middleware.Policy) int {
	return len(p.Identities) + len(p.Hosts) + len(p.UIDs)
}

// registerProxyConfig adds --config to the flags of `idcli proxy`.
func registerProxyConfig(fs *flag.FlagSet, f *proxyFlags) {
	fs.StringVar(&f.config, "config", "", "YAML file with the proxy's settings (flags on the command line win), per-route modes, allow and deny lists and per-agent rate limits: see docs/deployment.md")
}

var yamlUnknownKey = regexp.MustCompile(`line (\d+): field (\S+) not found in type \S+`)

// loadProxyConfig reads --config, if set: each setting not given as a flag
// on the command line is applied as that flag, and the rules go to f.rules.
// Errors name the file, and for a bad key its line.
func loadProxyConfig(env *cliEnv, fs *flag.FlagSet, f *proxyFlags) error {
	if f.config == "" {
		return nil
	}
	file := f.config
	if !filepath.IsAbs(file) && env.Dir != "" {
		file = filepath.Join(env.Dir, file)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--config: %v", err)
	}
	var pf proxyFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&pf); err != nil && !errors.Is(err, io.EOF) { // an empty file is an empty configuration
		return fmt.Errorf("--config %s: %s", f.config, yamlMessage(err))
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	apply := func(name string, values ...string) error {
		if set[name] {
			return nil
		}
		if fs.Lookup(name) == nil {
			return fmt.Errorf("--config %s: %s is not supported by this idcli (it has no --%s flag)", f.config, strings.ReplaceAll(name, "-", "_"), name)
		}
		for _, v := range values {
			if err := fs.Set(name, v); err != nil {
				return fmt.Errorf("--config %s: %s: %v", f.config, strings.ReplaceAll(name, "-", "_"), err)
			}
		}
		return nil
	}
	var errs []error
	str := func(name string, v *string) {
		if v != nil {
			errs = append(errs, apply(name, *v))
		}
	}
	boolean := func(name string, v *bool) {
		if v != nil {
			errs = append(errs, apply(name, strconv.FormatBool(*v)))
		}
	}
	str("listen", pf.Listen)
	str("upstream", pf.Upstream)
	boolean("forward-auth", pf.ForwardAuth)
	str("front", pf.Front)
	if len(pf.Authorities) > 0 {
		errs = append(errs, apply("authority", pf.Authorities...))
	}
	if t := pf.Trust; t != nil {
		if len(t.Hosts) > 0 {
			errs = append(errs, apply("trust", t.Hosts...))
		}
		boolean("allow-http", t.AllowHTTP)
		boolean("allow-private", t.AllowPrivate)
	}
	str("mode", pf.Mode)
	if pf.RefusalStatus != nil {
		errs = append(errs, apply("refusal-status", strconv.Itoa(*pf.RefusalStatus)))
	}
	str("redis-url", pf.RedisURL)
	str("metrics-listen", pf.MetricsListen)
	str("access-log", pf.AccessLog)
	str("log-level", pf.LogLevel)
	if err := errors.Join(errs...); err != nil {
		return err
	}

	r := &proxyRules{allow: pf.Allow.policy(), deny: pf.Deny.policy()}
	if pf.Allow != nil && len(pf.Allow.Cards) > 0 {
		return fmt.Errorf("--config %s: allow.cards: a card's name and purpose are its agent's own claim, so they can refuse agents (deny.cards) but not let one in", f.config)
	}
	if pf.Deny != nil {
		r.denyCards = pf.Deny.Cards
	}
	for i, rt := range pf.Routes {
		m, err := parseMode(rt.Mode)
		if err != nil {
			return fmt.Errorf("--config %s: routes[%d] (%q): mode %q: want required, optional or observe", f.config, i, rt.Prefix, rt.Mode)
		}
		r.routes = append(r.routes, rules.Route{Prefix: rt.Prefix, Mode: m})
	}
	if l := pf.Limits; l != nil {
		if r.agent, err = parseLimit(l.Agent); err != nil {
			return fmt.Errorf("--config %s: limits.agent: %v", f.config, err)
		}
		if r.addr, err = parseLimit(l.Address); err != nil {
			return fmt.Errorf("--config %s: limits.address: %v", f.config, err)
		}
		r.keyHeader, r.redisPrefix = l.KeyHeader, l.RedisPrefix
		if r.trusted, err = parseTrustedProxies(l.TrustedProxies); err != nil {
			return fmt.Errorf("--config %s: limits.trusted_proxies: %v", f.config, err)
		}
		r.addrHeader = strings.TrimSpace(l.ClientAddrHeader)
		switch {
		case r.addrHeader != "" && len(r.trusted) == 0:
			return fmt.Errorf("--config %s: limits.client_addr_header %q needs limits.trusted_proxies: the header is believed only from those addresses", f.config, r.addrHeader)
		case r.addrHeader != "" && !isToken(r.addrHeader):
			return fmt.Errorf("--config %s: limits.client_addr_header %q is not a header name", f.config, r.addrHeader)
		}
	}
	// Validate the rules now, so a bad file fails before anything listens.
	noCards := func(string) (string, string) { return "", "" }
	if _, err := rules.New(rules.Config{Routes: r.routes, Allow: r.allow, Deny: r.deny, DenyCards: r.denyCards, AgentCard: noCards}); err != nil {
		return fmt.Errorf("--config %s: %s", f.config, strings.TrimPrefix(err.Error(), "rules: "))
	}
	f.rules = r
	return nil
}

// parseTrustedProxies reads limits.trusted_proxies: addresses or CIDRs.
func parseTrustedProxies(values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range values {
		p, err := agentlimit.ParsePrefix(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// yamlMessage words a decoding error: an unknown key names the key and
// its line.
func yamlMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n")
	msg = yamlUnknownKey.ReplaceAllString(msg, `line $1: unknown key "$2"`)
	var lines []string
	for _, l := range strings.Split(msg, "\n") {
		lines = append(lines, strings.TrimSpace(l))
	}
	return strings.Join(lines, "; ")
}

// parseLimit reads a limit written "N/WINDOW": 100/1m, 10/s, 5000/1h, or
// "" / "off" for none.
func parseLimit(s string) (agentlimit.Limit, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "off" {
		return agentlimit.Limit{}, nil
	}
	num, win, ok := strings.Cut(s, "/")
	n, err := strconv.Atoi(strings.TrimSpace(num))
	if !ok || err != nil || n <= 0 {
		return agentlimit.Limit{}, fmt.Errorf("%q: want REQUESTS/WINDOW such as 100/1m, 10/s or 5000/1h", s)
	}
	win = strings.TrimSpace(win)
	switch win {
	case "s", "m", "h":
		win = "1" + win
	}
	d, err := time.ParseDuration(win)
	if err != nil || d < time.Second {
		return agentlimit.Limit{}, fmt.Errorf("%q: the window %q must be a duration of at least 1s, such as 1m", s, win)
	}
	return agentlimit.Limit{Quota: n, Window: d}, nil
}

// proxyOwner is what the rules and the status page add to a running proxy.
type proxyOwner struct {
	gate    *rules.Gate
	status  *status.Page // with --metrics-listen
	summary string
}

// newProxyOwner builds the status page (with --metrics-listen) and the
// rules of f (none when the file sets none) and hooks them into the
// verifier's config: with rules the verifier runs in Observe mode and the
// rules decide, by route, with mode as the default.
//
// The rules decide through the proxy's Decide hook, so a refusal by them
// is the proxy's own answer: its access-log line and its
// agentid_http_requests_total{route="proxy"} count carry the refusal's
// status and code. Refusals by the rules also go to the status page's
// refusal reasons. The status page names agents by their Signature Agent
// Card (cards, if not nil).
func newProxyOwner(f proxyFlags, p proxyPlan, vc *middleware.Config, cards func(string) (string, string)) (*proxyOwner, error) {
	mode := p.mode
	o := &proxyOwner{}
	if f.metricsListen != "" {
		o.status = status.New(status.Config{Title: "idcli proxy status", AgentName: cards})
		vc.OnResult = chainResults(vc.OnResult, o.status.Observe)
	}
	if !f.rules.active() {
		return o, nil
	}
	r := f.rules
	lcfg := agentlimit.Config{Agent: r.agent, Address: r.addr, KeyHeader: r.keyHeader, Logger: vc.Logger}
	if len(r.trusted) > 0 { // behind load balancers: their header names the client
		lcfg.ClientAddr = agentlimit.ForwardedClientAddr(r.trusted, r.addrHeader)
	}
	where := "memory"
	if s, ok := vc.Replay.(*redisreplay.Store); ok && (r.agent.On() || r.addr.On()) {
		// --redis-url: the buckets share the replay store's client.
		store, err := redislimit.New(redislimit.Config{Client: s.Client(), Prefix: r.redisPrefix})
		if err != nil {
			return nil, fmt.Errorf("--config: limits.redis_prefix: %s", strings.TrimPrefix(err.Error(), "redislimit: "))
		}
		lcfg.Store, where = store, "Redis "+s.Name()
	}
	var lim *agentlimit.Limiter
	if r.agent.On() || r.addr.On() {
		var err error
		if lim, err = agentlimit.New(lcfg); err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
	}
	var onRefuse func(*http.Request, *middleware.Result, *middleware.Error, int)
	if o.status != nil {
		onRefuse = func(_ *http.Request, _ *middleware.Result, e *middleware.Error, _ int) {
			if e.Code == middleware.CodeForbidden || e.Code == middleware.CodeRateLimited {
				o.status.ObserveRefusal(e.Code) // the verifier's own refusals are counted by Observe
			}
		}
	}
	g, err := rules.New(rules.Config{Mode: mode, Routes: r.routes, Allow: r.allow, Deny: r.deny, DenyCards: r.denyCards, AgentCard: cards,
		Limiter: lim, OnRefuse: onRefuse})
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	o.gate = g
	vc.Mode = middleware.Observe // every request reaches the rules
	o.summary = fmt.Sprintf("• rules: %d routes, allow %d, deny %d; limits agent %s, address %s (buckets in %s)",
		len(r.routes), policySize(r.allow), policySize(r.deny)+len(r.denyCards), limitString(r.agent), limitString(r.addr), where)
	if len(r.trusted) > 0 {
		h := r.addrHeader
		if h == "" {
			h = agentlimit.DefaultClientAddrHeader
		}
		o.summary += fmt.Sprintf("; client address from %s when the peer is one of %v", h, r.trusted)
	}
	return o, nil
}

func limitString(l agentlimit.Limit) string {
	if !l.On() {
		return "off"
	}
	return fmt.Sprintf("%d/%s", l.Quota, l.Window)
}

// chainResults returns an OnResult hook calling each non-nil hook in turn.
func chainResults(hooks ...func(middleware.Result)) func(middleware.Result) {
	var hs []func(middleware.Result)
	for _, h := range hooks {
		if h != nil {
			hs = append(hs, h)
		}
	}
	switch len(hs) {
	case 0:
		return nil
	case 1:
		return hs[0]
	}
	return func(r middleware.Result) {
		for _, h := range hs {
			h(r)
		}
	}
}

// decide makes the rules the proxy's last word on each verified request
// (proxy.Config.Decide); refusals the verifier words go out as the
// verifier writes them (refusal status, Accept-Signature).
func (o *proxyOwner) decide(cfg *proxy.Config, v *middleware.Verifier) {
	if o.gate == nil {
		return
	}
	o.gate.SetRefuse(v.WriteError)
	cfg.Decide = o.gate.Apply
}

// routes adds the status page to the metrics listener's mux.
func (o *proxyOwner) routes(mux *http.ServeMux) {
	if o.status != nil {
		mux.Handle("/status", o.status)
	}
}

// banner prints what the rules do, on stderr with the rest of the banner
// (stdout carries the access log alone).
func (o *proxyOwner) banner(env *cliEnv) {
	if o.summary != "" {
		fmt.Fprintln(env.Stderr, o.summary)
	}
}
