// Package proxyconfig is the configuration of a verifying proxy (package
// middleware/proxy) and its assembly: the settings `idcli proxy` takes as
// flags or from a YAML file, their validation with errors that name the
// file, line and key (or the flag) of each bad value, and Build, which
// turns them into a running proxy whose rules, lists and limits can be
// reloaded atomically. An embedded proxy (a Go program, a web server
// module) uses the same model without the command line:
//
//	cfg, err := proxyconfig.Load("proxy.yaml")
//	if err != nil {
//		log.Fatal(err) // proxy.yaml:7: routes[1].mode: "requierd": want required, optional or observe
//	}
//	p, err := proxyconfig.Build(ctx, cfg, proxyconfig.Options{})
//	...
//	http.ListenAndServe(cfg.Listen, p.Handler())
//
// Every setting is a YAML key; those a command line can give also have a
// flag (Keys lists both), and a flag given wins over the file.
package proxyconfig

import (
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/signer"
)

// Defaults of the settings not given.
const (
	DefaultListen    = ":8080"
	DefaultMode      = "required"
	DefaultProfile   = "deployed"
	DefaultAccessLog = "stdout"
	DefaultLogLevel  = "info"
)

// Config is a proxy's configuration: every key of the YAML file. The zero
// value is not valid; start from Default, Parse or Load.
type Config struct {
	// Listen is the address to listen on, host:port.
	Listen string `yaml:"listen" flag:"listen"`
	// Upstream is the URL verified requests are forwarded to; it excludes
	// ForwardAuth.
	Upstream string `yaml:"upstream" flag:"upstream"`
	// ForwardAuth answers the auth subrequests of the Front proxy instead
	// of forwarding.
	ForwardAuth bool `yaml:"forward_auth" flag:"forward-auth"`
	// Front is the proxy in front of a forward-auth endpoint: nginx,
	// traefik or caddy.
	Front string `yaml:"front" flag:"front"`
	// ForwardAuthFrom lists the addresses or CIDRs whose subrequests are
	// answered (default loopback).
	ForwardAuthFrom []string `yaml:"forward_auth_from" flag:"forward-auth-from"`
	// Authorities are the host[:port] (or *.suffix) the service answers
	// for; at least one.
	Authorities []string `yaml:"authorities" flag:"authority"`
	// Trust says whose key sets may be fetched.
	Trust Trust `yaml:"trust"`
	// AgentidServices are the base URLs of agentid services whose agents
	// get X-Agent-Uid.
	AgentidServices []string `yaml:"agentid_services" flag:"agentid-service"`
	// Mode is required, optional or observe; with Routes, the mode of the
	// paths no route names.
	Mode string `yaml:"mode" flag:"mode"`
	// Profile is how Signature-Agent is read: deployed or strict-01.
	Profile string `yaml:"profile" flag:"profile"`
	// RefusalStatus is the status of refused requests: 401 or 403.
	RefusalStatus int `yaml:"refusal_status" flag:"refusal-status"`
	// RedisURL, if set, keeps nonces (and the limits' buckets) in Redis.
	// It may hold a password: Masked hides it.
	RedisURL string `yaml:"redis_url" flag:"redis-url"`
	// MetricsListen, if set, serves /metrics and /status there.
	MetricsListen string `yaml:"metrics_listen" flag:"metrics-listen"`
	// AccessLog is stdout, stderr or off.
	AccessLog string `yaml:"access_log" flag:"access-log"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `yaml:"log_level" flag:"log-level"`
	// UpstreamMaxIdle is the number of idle upstream connections kept.
	UpstreamMaxIdle int `yaml:"upstream_max_idle" flag:"upstream-max-idle"`
	// Cache sizes the verifier's caches.
	Cache Cache `yaml:"cache"`

	// Routes give path prefixes their own mode (reloadable).
	Routes []Route `yaml:"routes"`
	// Allow lists the only verified agents let through (reloadable).
	Allow Policy `yaml:"allow"`
	// Deny lists verified agents refused with 403 (reloadable).
	Deny Policy `yaml:"deny"`
	// Limits are the per-agent and per-address budgets (reloadable).
	Limits Limits `yaml:"limits"`

	// origins maps a key path ("routes[1].mode") to where its value came
	// from: "FILE:LINE" or "--flag". Keys set in Go have none.
	origins map[string]string
	// file is the file the configuration was read from, "" if none;
	// display is how errors name it.
	file, display string
	// unterminated: the file does not end with a newline (CheckComplete).
	unterminated bool
	// flagNames names keys that came from nowhere by their flag.
	flagNames bool
}

// Trust says whose key sets may be fetched.
type Trust struct {
	// Hosts are exact host[:port] or *.suffix patterns; at least one.
	Hosts []string `yaml:"hosts" flag:"trust"`
	// AllowHTTP fetches key sets of http:// agents (local development).
	AllowHTTP bool `yaml:"allow_http" flag:"allow-http"`
	// AllowPrivate fetches from loopback and private addresses and
	// resolves *.localhost to loopback (local development).
	AllowPrivate bool `yaml:"allow_private" flag:"allow-private"`
	// Registries are URLs of plain-text lists of Signature Agent Card
	// URLs whose agents are trusted too.
	Registries []string `yaml:"registries" flag:"registry"`
}

// Cache sizes the caches of the verifier and its key fetcher: each bounds
// memory (and what requests naming ever new agents can push out) against
// work redone for agents that no longer fit. 0 is the default (what
// Default sets, written out); each needs a restart.
type Cache struct {
	// KeySets caps the admitted key sets held (keyfetch.Config.MaxOrigins):
	// those a signature verified with. Default keyfetch.DefaultMaxOrigins.
	KeySets int `yaml:"key_sets" flag:"cache-key-sets"`
	// KeySetsOnProbation caps the key sets fetched but not yet admitted
	// (keyfetch.Config.MaxProbation). If 0, as many as KeySets.
	KeySetsOnProbation int `yaml:"key_sets_on_probation" flag:"cache-key-sets-on-probation"`
	// KeySetsPerSite caps the admitted key sets charged to one site
	// (keyfetch.Config.MaxSetsPerSite); -1: no cap. Default
	// keyfetch.DefaultMaxSetsPerSite.
	KeySetsPerSite int `yaml:"key_sets_per_site" flag:"cache-key-sets-per-site"`
	// SignatureAgents caps the parsed Signature-Agent values held
	// (middleware.Config.SignatureAgentCacheSize); -1: none. Default
	// middleware.DefaultSignatureAgentCacheSize.
	SignatureAgents int `yaml:"signature_agents" flag:"cache-signature-agents"`
	// ExpandedKeys caps the expanded Ed25519 keys the verifier holds
	// (middleware.Config.ExpandedKeys); -1: none. Each proxy has its own.
	// Default signer.DefaultExpandedKeyCacheSize.
	ExpandedKeys int `yaml:"expanded_keys" flag:"cache-expanded-keys"`
}

// Route gives the paths under Prefix their own mode.
type Route struct {
	Prefix string `yaml:"prefix"`
	Mode   string `yaml:"mode"`
}

// Policy lists agents by identity, host, uid or (deny only) card.
type Policy struct {
	Identities []string `yaml:"identities"`
	Hosts      []string `yaml:"hosts"`
	UIDs       []string `yaml:"uids"`
	// Cards ("name:…", "purpose:…") match the agent's Signature Agent
	// Card; deny only, since a card is its agent's own claim.
	Cards []string `yaml:"cards"`
}

// Limits are the rate limits.
type Limits struct {
	// Agent is each verified agent's budget, "N/WINDOW" such as 100/1m.
	Agent string `yaml:"agent"`
	// Address is each client address's budget for unverified requests.
	Address string `yaml:"address"`
	// KeyHeader splits an agent's budget by this covered header's value.
	KeyHeader string `yaml:"key_header"`
	// BucketsPerAgent caps the key_header budgets of one agent (default
	// agentlimit.DefaultBucketsPerAgent): the header's values are hashed
	// onto that many.
	BucketsPerAgent int `yaml:"buckets_per_agent"`
	// RedisPrefix is the key prefix of the buckets in Redis.
	RedisPrefix string `yaml:"redis_prefix"`
	// TrustedProxies are the load balancers whose ClientAddrHeader is
	// believed for the per-address limit.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// ClientAddrHeader is the header they append the client address to.
	ClientAddrHeader string `yaml:"client_addr_header"`
}

// Default returns the configuration of a proxy given no settings (not yet
// valid: it needs an upstream or forward_auth, authorities and trust).
func Default() *Config {
	return &Config{
		Listen:          DefaultListen,
		Mode:            DefaultMode,
		Profile:         DefaultProfile,
		RefusalStatus:   http.StatusUnauthorized,
		AccessLog:       DefaultAccessLog,
		LogLevel:        DefaultLogLevel,
		UpstreamMaxIdle: proxy.DefaultMaxIdleConnsPerHost,
		Cache: Cache{
			KeySets:         keyfetch.DefaultMaxOrigins,
			KeySetsPerSite:  keyfetch.DefaultMaxSetsPerSite,
			SignatureAgents: middleware.DefaultSignatureAgentCacheSize,
			ExpandedKeys:    signer.DefaultExpandedKeyCacheSize,
		},
	}
}

// File returns the file c was read from (an absolute path after Load),
// "" if none.
func (c *Config) File() string { return c.file }

// Key is one setting.
type Key struct {
	// Name is its YAML path, such as "trust.hosts" or "routes".
	Name string
	// Flag is the flag of `idcli proxy` that sets it, "" for keys only a
	// file sets (routes, lists, limits).
	Flag string
	// Reloadable keys take effect on Reload; the others need a restart
	// (Reload refuses a configuration that changes one).
	Reloadable bool
}

// reloadable are the top-level keys Reload applies: Keys marks the keys
// under them Reloadable, and Reload copies them from the new file.
var reloadable = []string{"mode", "routes", "allow", "deny", "limits"}

// Keys lists every key, in file order, nested keys as "a.b".
func Keys() []Key {
	var out []Key
	var walk func(t reflect.Type, prefix string, top string)
	walk = func(t reflect.Type, prefix, top string) {
		for i := range t.NumField() {
			f := t.Field(i)
			name := f.Tag.Get("yaml")
			if name == "" {
				continue
			}
			path, root := prefix+name, top
			if root == "" {
				root = name
			}
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, path+".", root)
				continue
			}
			out = append(out, Key{Name: path, Flag: f.Tag.Get("flag"), Reloadable: slices.Contains(reloadable, root)})
		}
	}
	walk(reflect.TypeFor[Config](), "", "")
	return out
}

// keyNames returns the names of the keys of struct type t, for "did you
// mean" and the list of keys.
func keyNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if n := t.Field(i).Tag.Get("yaml"); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// field returns the field of c at the key path "a.b" (no indexes).
func (c *Config) field(path string) (reflect.Value, bool) {
	v := reflect.ValueOf(c).Elem()
	for _, part := range strings.Split(path, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, false
		}
		found := false
		for i := range v.NumField() {
			if v.Type().Field(i).Tag.Get("yaml") == part {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return reflect.Value{}, false
		}
	}
	return v, true
}

// KeyOfFlag returns the key the flag name (without dashes) sets.
func KeyOfFlag(name string) (Key, bool) {
	for _, k := range Keys() {
		if k.Flag == name && name != "" {
			return k, true
		}
	}
	return Key{}, false
}

// IsBoolFlag reports whether the flag name sets a boolean key (given
// without a value on a command line).
func IsBoolFlag(name string) bool {
	k, ok := KeyOfFlag(name)
	if !ok {
		return false
	}
	v, _ := Default().field(k.Name)
	return v.Kind() == reflect.Bool
}

// SetFlag gives the key of the flag name the values a command line gave
// it, replacing the file's: a list key gets every value (each possibly
// comma-separated), another key the last. Errors name the flag.
func (c *Config) SetFlag(name string, values []string) error {
	k, ok := KeyOfFlag(name)
	if !ok {
		return fmt.Errorf("--%s: not a setting of the proxy", name)
	}
	v, _ := c.field(k.Name)
	if len(values) == 0 {
		return nil
	}
	last := values[len(values)-1]
	switch v.Kind() {
	case reflect.String:
		v.SetString(last)
	case reflect.Bool:
		b, err := strconv.ParseBool(last)
		if err != nil {
			return fmt.Errorf("--%s %q: want true or false", name, last)
		}
		v.SetBool(b)
	case reflect.Int:
		n, err := strconv.Atoi(strings.TrimSpace(last))
		if err != nil {
			return fmt.Errorf("--%s %q: want a whole number", name, last)
		}
		v.SetInt(int64(n))
	case reflect.Slice:
		var list []string
		for _, s := range values {
			for _, part := range strings.Split(s, ",") {
				if part = strings.TrimSpace(part); part != "" {
					list = append(list, part)
				}
			}
		}
		v.Set(reflect.ValueOf(list))
	}
	c.setOrigin(k.Name, "--"+name)
	return nil
}

// setOrigin records where the value of key path came from, dropping what
// was recorded for the entries under it.
func (c *Config) setOrigin(path, origin string) {
	if c.origins == nil {
		c.origins = map[string]string{}
	}
	for p := range c.origins {
		if strings.HasPrefix(p, path+"[") || strings.HasPrefix(p, path+".") {
			delete(c.origins, p)
		}
	}
	c.origins[path] = origin
}

// UseFlagNames makes errors name a key that was set neither in a file nor
// by a flag by its flag ("--upstream"), as a command line does; with a
// file, by the file, its key and its flag ("proxy.yaml: authorities (or
// --authority)").
func (c *Config) UseFlagNames() { c.flagNames = true }

// where names the key path for an error: "FILE:LINE: path" for a key read
// from a file, "--flag" for one given as a flag, else the path alone (or
// its flag, after UseFlagNames).
func (c *Config) where(path string) string {
	o := c.origins[path]
	switch {
	case strings.HasPrefix(o, "--"):
		return o
	case o != "":
		return o + ": " + path
	}
	// An entry of a list given as a flag: name the flag.
	if i := strings.IndexByte(path, '['); i > 0 {
		if o := c.origins[path[:i]]; strings.HasPrefix(o, "--") {
			return o
		}
		return path
	}
	if c.flagNames {
		for _, k := range Keys() {
			if k.Name == path && k.Flag != "" && c.display != "" {
				return c.display + ": " + path + " (or --" + k.Flag + ")" // left out of the file
			}
			if k.Name == path && k.Flag != "" {
				return "--" + k.Flag
			}
		}
	}
	return path
}

// name is how an error message names another key: its flag when it came
// from one (or from nowhere, after UseFlagNames), else its path.
func (c *Config) name(path string) string {
	if w := c.where(path); strings.HasPrefix(w, "--") {
		return w
	}
	return path
}

// Clone returns a deep copy of c.
func (c *Config) Clone() *Config {
	d := *c
	d.ForwardAuthFrom = clone(c.ForwardAuthFrom)
	d.Authorities = clone(c.Authorities)
	d.Trust.Hosts = clone(c.Trust.Hosts)
	d.Trust.Registries = clone(c.Trust.Registries)
	d.AgentidServices = clone(c.AgentidServices)
	d.Routes = append([]Route(nil), c.Routes...)
	d.Allow = c.Allow.clone()
	d.Deny = c.Deny.clone()
	d.Limits.TrustedProxies = clone(c.Limits.TrustedProxies)
	d.origins = make(map[string]string, len(c.origins))
	for k, v := range c.origins {
		d.origins[k] = v
	}
	return &d
}

func (p Policy) clone() Policy {
	return Policy{Identities: clone(p.Identities), Hosts: clone(p.Hosts), UIDs: clone(p.UIDs), Cards: clone(p.Cards)}
}

func clone(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s...)
}

// FlagDefault returns the value of the key of the flag name in c, written
// as a flag's default: "" for false, zero-length lists and empty strings.
func (c *Config) FlagDefault(name string) string {
	k, ok := KeyOfFlag(name)
	if !ok {
		return ""
	}
	v, _ := c.field(k.Name)
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			return "true"
		}
		return ""
	case reflect.Int:
		return strconv.Itoa(int(v.Int()))
	case reflect.Slice:
		return strings.Join(v.Interface().([]string), ", ")
	}
	return v.String()
}
