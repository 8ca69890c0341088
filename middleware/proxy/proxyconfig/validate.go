package proxyconfig

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/middleware/clientaddr"
	"github.com/agentid/agentid/middleware/policy"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/middleware/rules"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/redact"
)

// Plan is a validated Config's values, parsed.
type Plan struct {
	Mode        middleware.Mode
	Profile     middleware.Profile
	Authorities []string
	Upstream    *url.URL    // nil with ForwardAuth
	Front       proxy.Front // "" without ForwardAuth
	From        []netip.Prefix
	Keys        keyfetch.Config
	// SignatureAgents is the verifier's SignatureAgentCacheSize
	// (cache.signature_agents).
	SignatureAgents int
	// ExpandedKeys is the size of the verifier's signer.ExpandedKeys
	// (cache.expanded_keys; 0: none).
	ExpandedKeys int
	Level        slog.Level
	Rules        Rules
}

// Rules are the reloadable part of a Plan: per-route modes, lists and
// limits.
type Rules struct {
	Mode        middleware.Mode
	Routes      []rules.Route
	Allow, Deny policy.List
	DenyCards   []string
	Agent, Addr agentlimit.Limit
	KeyHeader   string
	BucketsPer  int // limits.buckets_per_agent
	RedisPrefix string
	Trusted     []netip.Prefix
	AddrHeader  string
}

// Active reports whether any rule is set beyond the mode.
func (r Rules) Active() bool {
	return len(r.Routes) > 0 || policySize(r.Allow) > 0 || len(r.DenyCards) > 0 ||
		policySize(r.Deny) > 0 || r.Agent.On() || r.Addr.On()
}

func policySize(p policy.List) int { return len(p.Identities) + len(p.Hosts) + len(p.UIDs) }

// Validate checks every setting without I/O and returns them parsed. Each
// error is one line naming where the bad value came from (FILE:LINE: key,
// or the flag); all of them are reported, joined.
func (c *Config) Validate() (*Plan, error) { return c.validate(false) }

// validate is Validate; embedded needs neither upstream nor forward_auth.
func (c *Config) validate(embedded bool) (*Plan, error) {
	v := &validation{c: c}
	p := &Plan{}
	var err error
	if p.Mode, err = ParseMode(c.Mode); err != nil {
		v.fail("mode", "%q: %v", c.Mode, err)
	}
	switch c.Profile {
	case middleware.ProfileDeployed.String():
	case middleware.ProfileStrict01.String():
		p.Profile = middleware.ProfileStrict01
	default:
		v.fail("profile", "%q: want deployed or strict-01", c.Profile)
	}
	switch {
	case embedded:
	case c.ForwardAuth && c.Upstream != "":
		v.fail("upstream", "excludes %s: a reverse proxy forwards to its upstream, a forward-auth endpoint only answers the auth subrequests of nginx, Traefik or Caddy", v.c.name("forward_auth"))
	case !c.ForwardAuth && c.Upstream == "":
		v.fail("upstream", "is required (the URL of the service to forward verified requests to, such as http://127.0.0.1:8000), or %s", v.c.name("forward_auth"))
	case !c.ForwardAuth:
		u, err := url.Parse(c.Upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "" {
			hint := ""
			if !strings.Contains(c.Upstream, "://") && !strings.HasPrefix(c.Upstream, "/") {
				hint = " (did you mean http://" + c.Upstream + "?)" // the upstream is a service next door
			}
			v.fail("upstream", "%q: want an http:// or https:// URL such as http://127.0.0.1:8000%s", redact.URL(c.Upstream), hint)
		} else {
			p.Upstream = u
		}
		if c.Front != "" {
			v.fail("front", "is for %s: a reverse proxy (%s) has no front proxy to trust", v.c.name("forward_auth"), v.c.name("upstream"))
		}
		if len(c.ForwardAuthFrom) > 0 {
			v.fail("forward_auth_from", "is for %s: a reverse proxy (%s) has no front proxy to trust", v.c.name("forward_auth"), v.c.name("upstream"))
		}
	default:
		switch {
		case c.Front == "":
			v.fail("front", "is required with %s: nginx, traefik or caddy (the original request is read only from the headers that proxy sets)", v.c.name("forward_auth"))
		default:
			for _, f := range proxy.Fronts {
				if strings.EqualFold(c.Front, string(f)) {
					p.Front = f
				}
			}
			if p.Front == "" {
				v.fail("front", "%q: want nginx, traefik or caddy", c.Front)
			}
		}
		for i, s := range c.ForwardAuthFrom {
			pf, err := clientaddr.ParsePrefix(s)
			if err != nil {
				v.fail(index("forward_auth_from", i), "%v", err)
				continue
			}
			p.From = append(p.From, pf)
		}
	}
	for i, s := range c.AgentidServices {
		if _, err := signer.ParseServiceURL(s); err != nil {
			v.fail(index("agentid_services", i), "%s", trim(err, "signer: "))
		}
	}
	if c.UpstreamMaxIdle < 1 {
		v.fail("upstream_max_idle", "%d: want at least 1", c.UpstreamMaxIdle)
	}
	for _, a := range c.Authorities {
		for _, h := range strings.Split(a, ",") {
			if h = strings.TrimSpace(h); h != "" {
				p.Authorities = append(p.Authorities, h)
			}
		}
	}
	if len(p.Authorities) == 0 {
		v.fail("authorities", "is required: name the host[:port] clients reach the service at, such as api.example.com; a signature made for any other host is refused")
	} else if err := (middleware.Config{Keys: middleware.NewStaticKeys(), Authorities: p.Authorities}).Validate(); err != nil {
		v.fail("authorities", "%s", trim(err, "middleware: Config.Authorities: "))
	}
	c.validateCache(v, p)
	p.Keys.TrustedHosts = clone(c.Trust.Hosts)
	p.Keys.AllowHTTP = c.Trust.AllowHTTP
	p.Keys.AllowPrivateNetworks = c.Trust.AllowPrivate
	p.Keys.Registries = clone(c.Trust.Registries)
	if len(c.Trust.Hosts) == 0 {
		v.fail("trust.hosts", "is required: name the hosts whose agents you accept, such as '*.agentid.example'")
	} else {
		c.validateTrust(v, p.Keys)
	}
	if c.RefusalStatus != http.StatusUnauthorized && c.RefusalStatus != http.StatusForbidden {
		v.fail("refusal_status", "%d: want 401 or 403", c.RefusalStatus)
	}
	if err := p.Level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		v.fail("log_level", "%q: want debug, info, warn or error", c.LogLevel)
	}
	switch c.AccessLog {
	case "stdout", "stderr", "off", "":
	default:
		v.fail("access_log", "%q: want stdout, stderr or off", c.AccessLog)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		v.fail("listen", "%q: want host:port, such as 127.0.0.1:8080 or :8080", c.Listen)
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			v.fail("metrics_listen", "%q: want host:port, such as 127.0.0.1:9090", c.MetricsListen)
		}
	}
	if c.RedisURL != "" {
		if err := checkRedisURL(c.RedisURL); err != nil {
			v.fail("redis_url", "%s", err)
		}
	}
	p.Rules = c.rules(v, p.Mode)
	if len(v.errs) > 0 {
		return nil, errors.Join(v.errs...)
	}
	return p, nil
}

// MaxCacheSize bounds each cache.* key: a larger value is more likely a
// typo than a plan (a million parsed Signature-Agent values alone hold
// about 1 GB).
const MaxCacheSize = 1_000_000

// validateCache checks the cache.* keys and puts them in p.
func (c *Config) validateCache(v *validation, p *Plan) {
	k := c.Cache
	within := func(key string, n, low int, want string) bool {
		if n < low || n > MaxCacheSize {
			v.fail("cache."+key, "%d: want 1 to %d%s", n, MaxCacheSize, want)
			return false
		}
		return true
	}
	if within("key_sets", k.KeySets, 0, fmt.Sprintf(" (0: the default, %d)", keyfetch.DefaultMaxOrigins)) {
		p.Keys.MaxOrigins = k.KeySets
	}
	if within("key_sets_on_probation", k.KeySetsOnProbation, 0, " (0: as many as "+c.name("cache.key_sets")+")") {
		p.Keys.MaxProbation = k.KeySetsOnProbation
	}
	if within("key_sets_per_site", k.KeySetsPerSite, -1, fmt.Sprintf(", or -1 for no cap (0: the default, %d)", keyfetch.DefaultMaxSetsPerSite)) {
		p.Keys.MaxSetsPerSite = k.KeySetsPerSite
	}
	if within("signature_agents", k.SignatureAgents, -1, fmt.Sprintf(", or -1 to cache none (0: the default, %d)", middleware.DefaultSignatureAgentCacheSize)) {
		p.SignatureAgents = k.SignatureAgents
	}
	if within("expanded_keys", k.ExpandedKeys, -1, fmt.Sprintf(", or -1 to cache none (0: the default, %d)", signer.DefaultExpandedKeyCacheSize)) {
		switch p.ExpandedKeys = k.ExpandedKeys; p.ExpandedKeys {
		case 0:
			p.ExpandedKeys = signer.DefaultExpandedKeyCacheSize
		case -1:
			p.ExpandedKeys = 0
		}
	}
}

// validateTrust checks each trust.hosts pattern, then each registry of
// trust.registries against them, so that an error names its entry, in the
// user's words for these settings rather than keyfetch.Config's.
func (c *Config) validateTrust(v *validation, kc keyfetch.Config) {
	words := strings.NewReplacer("TrustedHosts entry ", "", "Registries entry ", "", "untrusted signature agent: ", "",
		"TrustedHosts pattern", c.name("trust.hosts")+" pattern")
	check := func(path string, k keyfetch.Config) bool {
		err := k.Validate()
		if err != nil {
			v.fail(path, "%s", words.Replace(trim(err, "keyfetch: invalid config: ")))
		}
		return err == nil
	}
	hostsOK := true
	for i, h := range kc.TrustedHosts {
		one := kc
		one.TrustedHosts, one.Registries = []string{h}, nil
		hostsOK = check(index("trust.hosts", i), one) && hostsOK
	}
	if !hostsOK {
		return // a registry is checked against patterns that parse
	}
	for i, r := range kc.Registries {
		one := kc
		one.Registries = []string{r}
		check(index("trust.registries", i), one)
	}
}

func (c *Config) rules(v *validation, mode middleware.Mode) Rules {
	r := Rules{Mode: mode, DenyCards: clone(c.Deny.Cards)}
	seen := map[string]int{}
	for i, rt := range c.Routes {
		m, err := ParseMode(rt.Mode)
		switch {
		case err != nil:
			v.fail(index("routes", i)+".mode", "%q: %v", rt.Mode, err)
		case !strings.HasPrefix(rt.Prefix, "/"):
			v.fail(index("routes", i)+".prefix", "%q: want a path prefix starting with /, such as /api/", rt.Prefix)
		default:
			if j, dup := seen[rt.Prefix]; dup {
				v.fail(index("routes", i)+".prefix", "%q is also routes[%d]'s", rt.Prefix, j)
			}
			seen[rt.Prefix] = i
		}
		r.Routes = append(r.Routes, rules.Route{Prefix: rt.Prefix, Mode: m})
	}
	r.Allow = v.policy("allow", c.Allow)
	r.Deny = v.policy("deny", c.Deny)
	if len(c.Allow.Cards) > 0 {
		v.fail("allow.cards", "a card's name and purpose are its agent's own claim, so they can refuse agents (deny.cards) but not let one in")
	}
	for i, card := range c.Deny.Cards {
		if _, err := rules.New(rules.Config{DenyCards: []string{card}, AgentCard: noCards}); err != nil {
			v.fail(index("deny.cards", i), "%s", trim(err, "rules: deny card "))
		}
	}
	l := c.Limits
	var err error
	if r.Agent, err = ParseLimit(l.Agent); err != nil {
		v.fail("limits.agent", "%v", err)
	}
	if r.Addr, err = ParseLimit(l.Address); err != nil {
		v.fail("limits.address", "%v", err)
	}
	r.KeyHeader, r.RedisPrefix = strings.TrimSpace(l.KeyHeader), l.RedisPrefix
	r.BucketsPer = l.BucketsPerAgent
	if strings.ContainsAny(l.RedisPrefix, "{}") {
		v.fail("limits.redis_prefix", "%q must not contain a hash tag ({…}): every bucket would land in one Redis Cluster slot", l.RedisPrefix)
	}
	if l.BucketsPerAgent < 0 {
		v.fail("limits.buckets_per_agent", "%d: want a positive number (or 0 for the default, %d)", l.BucketsPerAgent, agentlimit.DefaultBucketsPerAgent)
	}
	if r.KeyHeader != "" && !signer.IsToken(r.KeyHeader) {
		v.fail("limits.key_header", "%q is not a header name", r.KeyHeader)
	}
	for i, s := range l.TrustedProxies {
		pf, err := clientaddr.ParsePrefix(s)
		if err != nil {
			v.fail(index("limits.trusted_proxies", i), "%v", err)
			continue
		}
		r.Trusted = append(r.Trusted, pf)
	}
	r.AddrHeader = strings.TrimSpace(l.ClientAddrHeader)
	switch {
	case r.AddrHeader != "" && len(l.TrustedProxies) == 0:
		v.fail("limits.client_addr_header", "%q needs limits.trusted_proxies: the header is believed only from those addresses", r.AddrHeader)
	case r.AddrHeader != "" && !signer.IsToken(r.AddrHeader):
		v.fail("limits.client_addr_header", "%q is not a header name", r.AddrHeader)
	}
	return r
}

func noCards(string) (string, string) { return "", "" }

// validation gathers the errors of a Config, each naming its key's origin.
type validation struct {
	c    *Config
	errs []error
}

func (v *validation) fail(path, format string, args ...any) {
	where, msg := v.c.where(path), v.c.maskSecrets(fmt.Sprintf(format, args...))
	sep := ": "
	switch {
	case strings.HasPrefix(msg, "is ") || strings.HasPrefix(msg, "excludes "):
		sep = " " // "authorities is required"
	case strings.HasPrefix(where, "--") && msg != "" && strings.ContainsRune("\"-0123456789", rune(msg[0])):
		sep = " " // --mode "strict": want …, as a command line reads
	}
	v.errs = append(v.errs, errors.New(where+sep+msg))
}

// policy checks each entry of an allow or deny list on its own, so that an
// error names the entry.
func (v *validation) policy(name string, p Policy) policy.List {
	check := func(kind string, list []string, one func(string) policy.List) {
		for i, s := range list {
			if err := one(s).Validate(); err != nil {
				v.fail(index(name+"."+kind, i), "%s", strings.Replace(err.Error(), "signer: ", "", 1))
			}
		}
	}
	check("identities", p.Identities, func(s string) policy.List { return policy.List{Identities: []string{s}} })
	check("hosts", p.Hosts, func(s string) policy.List { return policy.List{Hosts: []string{s}} })
	// uids name agents of agentid_services only (policy.List refuses them
	// without one); a bad service URL is agentid_services' own error.
	var services []string
	for _, s := range v.c.AgentidServices {
		if _, err := signer.ParseServiceURL(s); err == nil {
			services = append(services, s)
		}
	}
	if len(p.UIDs) > 0 && len(services) == 0 {
		v.fail(name+".uids", "uids %q need the agentid service they belong to (%s): without one any host named agent-… would match",
			signer.Truncate(strings.Join(p.UIDs, ",")), v.c.name("agentid_services"))
	} else {
		check("uids", p.UIDs, func(s string) policy.List { return policy.List{UIDs: []string{s}, Services: services} })
	}
	return policy.List{Identities: clone(p.Identities), Hosts: clone(p.Hosts), UIDs: clone(p.UIDs), Services: services}
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func trim(err error, prefix string) string { return strings.TrimPrefix(err.Error(), prefix) }

// ParseMode reads a mode: required, optional or observe.
func ParseMode(s string) (middleware.Mode, error) {
	for _, m := range []middleware.Mode{middleware.Required, middleware.Optional, middleware.Observe} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, errors.New("want required, optional or observe")
}

// ParseLimit reads a limit written "N/WINDOW": 100/1m, 10/s, 5000/1h, or
// "" / "off" for none.
func ParseLimit(s string) (agentlimit.Limit, error) {
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

// checkRedisURL checks the form of a redis_url without dialing: a
// redis:// or rediss:// URL, or HOST:PORT,HOST:PORT,… of a cluster. The
// error never repeats a password.
func checkRedisURL(s string) error {
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return errors.New("not a URL: want redis://[:PASSWORD@]HOST:PORT[/DB]")
		}
		if u.Scheme != "redis" && u.Scheme != "rediss" || u.Host == "" {
			return fmt.Errorf("%s: want redis://[:PASSWORD@]HOST:PORT[/DB] or rediss://…", redact.URL(s))
		}
		return nil
	}
	for _, hp := range strings.Split(s, ",") {
		if _, _, err := net.SplitHostPort(strings.TrimSpace(hp)); err != nil {
			return fmt.Errorf("%q: want redis://[:PASSWORD@]HOST:PORT[/DB], or HOST:PORT,HOST:PORT,… for a Redis Cluster", hp)
		}
	}
	return nil
}

// maskSecrets hides the secrets of every URL of c that may carry one
// (upstream, redis_url, registries, agentid_services) wherever msg quotes
// it, whole or cut (signer.Truncate) and with or without Go's quoting: a
// value refused for its credentials must not print them. The messages of
// this package quote redact.URL of a URL already; this catches those of
// the packages it calls.
func (c *Config) maskSecrets(msg string) string {
	urls := append([]string{c.Upstream, c.RedisURL}, c.Trust.Registries...)
	for _, u := range append(urls, c.AgentidServices...) {
		m := redact.URL(u)
		if m == u {
			continue
		}
		for _, form := range []string{u, signer.Truncate(u)} {
			q := strconv.Quote(form)
			msg = strings.ReplaceAll(msg, q[1:len(q)-1], m)
			msg = strings.ReplaceAll(msg, form, m)
		}
	}
	return msg
}
