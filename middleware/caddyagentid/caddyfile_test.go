package caddyagentid

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	"github.com/agentid/agentid/middleware/proxy/proxyconfig"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`agentid {
		config_file /etc/agentid/proxy.yaml
		authorities api.example.com *.api.example.com
		authorities other.example.com
		trust *.agentid.example
		allow_http
		allow_private
		registries https://registry.example/agents.txt
		agentid_services https://agentid.example
		mode optional
		profile strict-01
		refusal_status 403
		redis_url redis://127.0.0.1:6379/0
		route /public/ optional
		route /health observe
		allow hosts *.agentid.example
		deny uids agent-0123*
		deny cards purpose:ai-training
		limits agent 100/1m
		limits buckets_per_agent 16
		limits trusted_proxies 10.0.0.0/8 192.168.0.1
		cache key_sets 20000
		cache signature_agents -1
	}`)
	var h Handler
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	want := Handler{
		ConfigFile:      "/etc/agentid/proxy.yaml",
		Authorities:     []string{"api.example.com", "*.api.example.com", "other.example.com"},
		Trust:           []string{"*.agentid.example"},
		AllowHTTP:       true,
		AllowPrivate:    true,
		Registries:      []string{"https://registry.example/agents.txt"},
		AgentidServices: []string{"https://agentid.example"},
		Mode:            "optional",
		Profile:         "strict-01",
		RefusalStatus:   403,
		RedisURL:        "redis://127.0.0.1:6379/0",
		Routes:          []Route{{Prefix: "/public/", Mode: "optional"}, {Prefix: "/health", Mode: "observe"}},
		Allow:           &Policy{Hosts: []string{"*.agentid.example"}},
		Deny:            &Policy{UIDs: []string{"agent-0123*"}, Cards: []string{"purpose:ai-training"}},
		Limits:          &Limits{Agent: "100/1m", BucketsPerAgent: 16, TrustedProxies: []string{"10.0.0.0/8", "192.168.0.1"}},
		Cache:           &Cache{KeySets: 20000, SignatureAgents: -1},
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("got %+v\nwant %+v", h, want)
	}
}

func TestUnmarshalCaddyfileErrors(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"agentid extra", "wrong argument count"},
		{"agentid {\n\tauthority api.example.com\n}", `unknown subdirective "authority": did you mean authorities?`},
		{"agentid {\n\tredis-url redis://x\n}", "did you mean redis_url?"},
		{"agentid {\n\tbogus 1\n}", "want config_file, authorities"},
		{"agentid {\n\tmode\n}", "mode takes 1 value(s), got 0"},
		{"agentid {\n\tmode required optional\n}", "mode takes 1 value(s), got 2"},
		{"agentid {\n\ttrust\n}", "trust needs at least one value"},
		{"agentid {\n\tallow_http yes\n}", "allow_http takes 0 value(s), got 1"},
		{"agentid {\n\trefusal_status four\n}", `refusal_status "four": want a whole number`},
		{"agentid {\n\troute /x\n}", "route takes 2 value(s), got 1"},
		{"agentid {\n\tallow host a.example\n}", `allow "host": not a key of allow: did you mean hosts? (want identities, hosts, uids or cards)`},
		{"agentid {\n\tdeny uids\n}", "deny wants a key (identities, hosts, uids or cards) and its value"},
		{"agentid {\n\tlimits agent\n}", "limits wants a key"},
		{"agentid {\n\tlimits agent 1/1m 2/1m\n}", "limits agent takes 1 value(s), got 2"},
		{"agentid {\n\tlimits bogus 1\n}", `limits "bogus": not a key of limits (want agent, address, key_header, buckets_per_agent, redis_prefix, trusted_proxies or client_addr_header`},
		{"agentid {\n\tlimits trusted_proxies\n}", "limits wants a key"},
		{"agentid {\n\tcache key_set 5\n}", `cache "key_set": not a key of cache: did you mean key_sets? (want key_sets, key_sets_on_probation, key_sets_per_site, signature_agents or expanded_keys)`},
		{"agentid {\n\tcache key_sets lots\n}", `cache key_sets "lots": want a whole number`},
		{"agentid {\n\tcache expanded_keys 1 2\n}", "cache expanded_keys takes 1 value(s), got 2"},
		{"agentid {\n\troutes /x optional\n}", `unknown subdirective "routes": did you mean route?`},
		{"agentid {\n\t\"\" 1\n}", `unknown subdirective ""`},
		{"agentid {\n\tproxy 1\n}", `unknown subdirective "proxy"`},
		{"agentid {\n\tlimits buckets_per_agent many\n}", `buckets_per_agent "many": want a whole number`},
	} {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want an error containing %q", tt.in, err, tt.want)
		}
	}
}

// TestProvisionErrors: each bad setting is refused when Caddy provisions
// the handler (so `caddy validate` and a reload report it), with the key
// named, and nothing is left running.
func TestProvisionErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(file, []byte("authorities: [api.example.com]\ntrust:\n  hosts: ['*.agentid.example']\nmode: requierd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := Handler{Authorities: []string{"api.example.com"}, Trust: []string{"*.agentid.example"}}
	for _, tt := range []struct {
		name string
		edit func(*Handler)
		want string
	}{
		{"no authorities", func(h *Handler) { h.Authorities = nil }, "authorities"},
		{"no trust", func(h *Handler) { h.Trust = nil }, "trust"},
		{"bad mode", func(h *Handler) { h.Mode = "requierd" }, `mode: "requierd"`},
		{"bad profile", func(h *Handler) { h.Profile = "strict" }, "profile"},
		{"bad refusal status", func(h *Handler) { h.RefusalStatus = 500 }, "refusal_status"},
		{"bad route mode", func(h *Handler) { h.Routes = []Route{{Prefix: "/a/", Mode: "sometimes"}} }, "routes[0].mode"},
		{"route prefix not normal", func(h *Handler) { h.Routes = []Route{{Prefix: "/a/../b/", Mode: "optional"}} }, `route prefix "/a/../b/"`},
		{"bad service", func(h *Handler) { h.AgentidServices = []string{"ftp://x"} }, "agentid_services"},
		{"bad limit", func(h *Handler) { h.Limits = &Limits{Agent: "lots"} }, "limits.agent"},
		{"bad redis url", func(h *Handler) { h.RedisURL = "mysql://x" }, "redis_url"},
		{"bad cache size", func(h *Handler) { h.Cache = &Cache{SignatureAgents: -2} }, "cache.signature_agents: -2: want 1 to 1000000"},
		{"config file's bad value", func(h *Handler) { *h = Handler{ConfigFile: file} }, file + ":4: mode"},
		{"missing config file", func(h *Handler) { h.ConfigFile = file + ".missing" }, "proxy.yaml.missing"},
	} {
		h := ok
		tt.edit(&h)
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		err := h.Provision(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error naming %q", tt.name, err, tt.want)
		}
		if h.proxy != nil || h.release != nil {
			t.Errorf("%s: the failed handler holds a proxy or a replay store", tt.name)
		}
	}
	h := ok
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	if err := h.Provision(ctx); err != nil {
		t.Fatalf("valid settings: %v", err)
	}
	h.Cleanup()
}

// TestJSONConfig: the JSON config's field names are the YAML keys, and
// they reach the proxy's configuration.
func TestJSONConfig(t *testing.T) {
	var h Handler
	err := json.Unmarshal([]byte(`{"authorities":["api.example.com"],"trust":["*.agentid.example"],"allow_http":true,
		"routes":[{"prefix":"/public/","mode":"optional"}],"deny":{"cards":["purpose:ai-training"]},
		"limits":{"agent":"10/1m","key_header":"X-Tenant","buckets_per_agent":8,"client_addr_header":"X-Forwarded-For"},
		"cache":{"key_sets":20000,"expanded_keys":-1}}`), &h)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := h.config()
	if err != nil {
		t.Fatal(err)
	}
	want := proxyconfig.Default()
	want.Upstream, want.AccessLog = "", "off"
	want.Authorities, want.Trust.Hosts, want.Trust.AllowHTTP = []string{"api.example.com"}, []string{"*.agentid.example"}, true
	want.Routes = []proxyconfig.Route{{Prefix: "/public/", Mode: "optional"}}
	want.Deny.Cards = []string{"purpose:ai-training"}
	want.Limits = proxyconfig.Limits{Agent: "10/1m", KeyHeader: "X-Tenant", BucketsPerAgent: 8, ClientAddrHeader: "X-Forwarded-For"}
	want.Cache.KeySets, want.Cache.ExpandedKeys = 20000, -1
	if got, w := cfg.Effective(), want.Effective(); got != w {
		t.Errorf("configuration:\n%s\nwant:\n%s", got, w)
	}
}

// TestFieldsAreProxyKeys: Handler's fields (the JSON config, and through
// UnmarshalCaddyfile the Caddyfile's subdirectives) are the keys of idcli
// proxy's file, and each reaches the proxy's configuration: a key added to
// proxyconfig and not here, or a field here that config does not carry
// over, fails.
func TestFieldsAreProxyKeys(t *testing.T) {
	// The keys that mean nothing inside Caddy: its listener, upstream,
	// role, access log, log level and connections are Caddy's own, and
	// metrics and the status page are idcli proxy's.
	notInCaddy := map[string]bool{"listen": true, "upstream": true, "forward_auth": true, "front": true, "forward_auth_from": true,
		"metrics_listen": true, "access_log": true, "log_level": true, "upstream_max_idle": true}
	// The trust block's keys are flat in Caddy.
	caddyName := map[string]string{"trust.hosts": "trust", "trust.allow_http": "allow_http", "trust.allow_private": "allow_private", "trust.registries": "registries"}

	// Every leaf of Handler by its JSON path, with a func giving it a
	// value other than the default.
	leaves := map[string]func(*Handler){}
	sample := func(v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			v.SetString("x")
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int:
			v.SetInt(7)
		case reflect.Slice:
			if v.Type().Elem() == reflect.TypeFor[Route]() {
				v.Set(reflect.ValueOf([]Route{{Prefix: "/x/", Mode: "observe"}}))
			} else {
				v.Set(reflect.ValueOf([]string{"x"}))
			}
		default:
			t.Fatalf("a field of kind %s", v.Kind())
		}
	}
	ht := reflect.TypeFor[Handler]()
	for i := range ht.NumField() {
		f := ht.Field(i)
		name := jsonName(f)
		if name == "" || name == "config_file" {
			continue
		}
		if f.Type.Kind() != reflect.Pointer {
			leaves[name] = func(h *Handler) { sample(reflect.ValueOf(h).Elem().Field(i)) }
			continue
		}
		for j := range f.Type.Elem().NumField() {
			leaves[name+"."+jsonName(f.Type.Elem().Field(j))] = func(h *Handler) {
				p := reflect.ValueOf(h).Elem().Field(i)
				p.Set(reflect.New(f.Type.Elem()))
				sample(p.Elem().Field(j))
			}
		}
	}

	matched := map[string]bool{}
	for _, k := range proxyconfig.Keys() {
		name := k.Name
		if n, ok := caddyName[name]; ok {
			name = n
		}
		_, has := leaves[name]
		switch {
		case notInCaddy[k.Name] && has:
			t.Errorf("key %s does not apply in Caddy, yet Handler has %s", k.Name, name)
		case !notInCaddy[k.Name] && !has:
			t.Errorf("key %s of idcli proxy has no field %s in Handler (nor a subdirective)", k.Name, name)
		}
		matched[name] = true
	}
	empty, err := (&Handler{}).config()
	if err != nil {
		t.Fatal(err)
	}
	for path, set := range leaves {
		if !matched[path] {
			t.Errorf("Handler's %s is no key of idcli proxy", path)
		}
		var h Handler
		set(&h)
		cfg, err := h.config()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Effective() == empty.Effective() {
			t.Errorf("Handler's %s does not reach the proxy's configuration", path)
		}
	}
	if len(leaves) < 30 {
		t.Errorf("walked %d fields of Handler, want at least 30", len(leaves))
	}
}

// TestAdaptMatcher: the Caddyfile adapter turns agentid with a matcher
// into one unmatched route whose subroute runs agentid_strip on every
// request and the handler on those the matcher selects, so the matcher
// cannot let a client's X-Agent-* headers through; without a matcher the
// route is the handler alone, as before.
func TestAdaptMatcher(t *testing.T) {
	const block = "{\n\t\tauthorities app.example.com\n\t\ttrust *.agentid.example\n\t}"
	stripThenMatched := func(match string) string {
		return `[{"handle":[{"handler":"subroute","routes":[{"handle":[{"handler":"agentid_strip"}]},` +
			`{"handle":[{"authorities":["app.example.com"],"handler":"agentid","trust":["*.agentid.example"]}],"match":[` + match + `]}]}]}]`
	}
	for _, tt := range []struct{ name, site, want string }{
		{"no matcher", "agentid " + block,
			`[{"handle":[{"authorities":["app.example.com"],"handler":"agentid","trust":["*.agentid.example"]}]}]`},
		{"named matcher", "@api path /api/*\n\tagentid @api " + block, stripThenMatched(`{"path":["/api/*"]}`)},
		{"path matcher", "agentid /api/* " + block, stripThenMatched(`{"path":["/api/*"]}`)},
		{"header matcher", "@bots header User-Agent *bot*\n\tagentid @bots " + block, stripThenMatched(`{"header":{"User-Agent":["*bot*"]}}`)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := adaptRoutes(t, ":8080 {\n\t"+tt.site+"\n}\n")
			if got != tt.want {
				t.Errorf("routes:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

// adaptRoutes adapts the Caddyfile conf and returns the JSON routes of
// its one server.
func adaptRoutes(t *testing.T, conf string) string {
	t.Helper()
	out, warnings, err := caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}.Adapt([]byte(conf), nil)
	if err != nil {
		t.Fatalf("adapt: %v", err)
	}
	if len(warnings) > 0 {
		t.Fatalf("adapt warnings: %v", warnings)
	}
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Routes json.RawMessage `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Apps.HTTP.Servers) != 1 {
		t.Fatalf("adapted config has %d servers, want 1:\n%s", len(cfg.Apps.HTTP.Servers), out)
	}
	for _, s := range cfg.Apps.HTTP.Servers {
		return string(s.Routes)
	}
	return ""
}
