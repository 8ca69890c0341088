package proxyconfig

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestCacheKeys: the cache.* keys reach the key fetcher's admission
// bounds and the verifier's cache sizes; 0 is the default and -1 "none"
// (or "no cap") where the library has one; a value out of range is named
// by file, line and key, or by its flag.
func TestCacheKeys(t *testing.T) {
	c, err := Parse("proxy.yaml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	if k := p.Keys; k.MaxOrigins != keyfetch.DefaultMaxOrigins || k.MaxProbation != 0 || k.MaxSetsPerSite != keyfetch.DefaultMaxSetsPerSite ||
		p.SignatureAgents != middleware.DefaultSignatureAgentCacheSize || p.ExpandedKeys != signer.DefaultExpandedKeyCacheSize {
		t.Errorf("defaults: keys %d/%d/%d, signature agents %d, expanded keys %d", k.MaxOrigins, k.MaxProbation, k.MaxSetsPerSite, p.SignatureAgents, p.ExpandedKeys)
	}
	for _, want := range []string{"cache:\n", "    key_sets: 10000 # default\n", "    key_sets_on_probation: 10000 # default\n", "    key_sets_per_site: 16 # default\n", "    signature_agents: 10000 # default\n", "    expanded_keys: 4096 # default\n"} {
		if !strings.Contains(c.Effective(), want) {
			t.Errorf("effective configuration lacks %q:\n%s", want, c.Effective())
		}
	}

	for _, tc := range []struct {
		name, cache string
		check       func(*Plan) bool
	}{
		{"set", "{key_sets: 50000, key_sets_on_probation: 2000, key_sets_per_site: 4, signature_agents: 30000, expanded_keys: 100}", func(p *Plan) bool {
			return p.Keys.MaxOrigins == 50000 && p.Keys.MaxProbation == 2000 && p.Keys.MaxSetsPerSite == 4 && p.SignatureAgents == 30000 && p.ExpandedKeys == 100
		}},
		{"none", "{key_sets_per_site: -1, signature_agents: -1, expanded_keys: -1}", func(p *Plan) bool {
			return p.Keys.MaxSetsPerSite == -1 && p.SignatureAgents == -1 && p.ExpandedKeys == 0
		}},
		{"zero is the default", "{key_sets: 0, key_sets_per_site: 0, signature_agents: 0, expanded_keys: 0}", func(p *Plan) bool {
			return p.Keys.MaxOrigins == 0 && p.Keys.MaxSetsPerSite == 0 && p.SignatureAgents == 0 && p.ExpandedKeys == signer.DefaultExpandedKeyCacheSize
		}},
		{"largest", "{key_sets: 1000000, key_sets_on_probation: 1000000, key_sets_per_site: 1000000, signature_agents: 1000000, expanded_keys: 1000000}", func(p *Plan) bool {
			return p.Keys.MaxOrigins == MaxCacheSize && p.SignatureAgents == MaxCacheSize && p.ExpandedKeys == MaxCacheSize
		}},
	} {
		c, err := Parse("proxy.yaml", []byte(base+"cache: "+tc.cache+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		p, err := c.Validate()
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !tc.check(p) {
			t.Errorf("%s: keys %+v, signature agents %d, expanded keys %d", tc.name, p.Keys, p.SignatureAgents, p.ExpandedKeys)
		}
	}

	for _, tc := range []struct{ body, want string }{
		{"cache:\n  key_sets: -1\n", "proxy.yaml:5: cache.key_sets: -1: want 1 to 1000000 (0: the default, 10000)"},
		{"cache:\n  key_sets: 1000001\n", "proxy.yaml:5: cache.key_sets: 1000001: want 1 to 1000000 (0: the default, 10000)"},
		{"cache:\n  key_sets_on_probation: -1\n", "proxy.yaml:5: cache.key_sets_on_probation: -1: want 1 to 1000000 (0: as many as cache.key_sets)"},
		{"cache:\n  key_sets_per_site: -2\n", "proxy.yaml:5: cache.key_sets_per_site: -2: want 1 to 1000000, or -1 for no cap (0: the default, 16)"},
		{"cache:\n  signature_agents: -5\n", "proxy.yaml:5: cache.signature_agents: -5: want 1 to 1000000, or -1 to cache none (0: the default, 10000)"},
		{"cache:\n  expanded_keys: 5000000\n", "proxy.yaml:5: cache.expanded_keys: 5000000: want 1 to 1000000, or -1 to cache none (0: the default, 4096)"},
		{"cache:\n  expanded_keys: lots\n", `proxy.yaml:5: cache.expanded_keys: want a whole number, got "lots"`},
		{"cache:\n  key_set: 5\n", `proxy.yaml:5: unknown key "cache.key_set" (did you mean "key_sets"?); the keys of cache are: key_sets, key_sets_on_probation, key_sets_per_site, signature_agents, expanded_keys`},
	} {
		if err := parseAndValidate(t, base+tc.body); err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %s", tc.body, err, tc.want)
		}
	}

	c = Default()
	c.UseFlagNames()
	if err := c.SetFlag("cache-signature-agents", []string{"-3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Validate(); err == nil || !strings.Contains(err.Error(), "\n--cache-signature-agents -3: want 1 to 1000000, or -1 to cache none") {
		t.Errorf("a bad flag: %v, want it named", err)
	}
}

// TestCacheKeysNeedRestart: a reload that changes cache.* is refused as a
// whole, naming them; with cache.* as they are, limits.buckets_per_agent,
// under limits, is applied, and every reloadable key comes from the new
// file.
func TestCacheKeysNeedRestart(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	head := "upstream: " + up.URL + "\nauthorities: [api.example.com]\ntrust: {hosts: [a.example]}\naccess_log: \"off\"\n"
	first, err := Parse("proxy.yaml", []byte(head+"cache: {key_sets: 500}\nlimits: {agent: 10/1m, key_header: X-Tenant, buckets_per_agent: 8}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Build(context.Background(), first, Options{Reloadable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rules := "limits: {agent: 20/1m, key_header: X-Tenant, buckets_per_agent: 32}\nmode: optional\nroutes: [{prefix: /pub/, mode: observe}]\n" +
		"allow: {hosts: [a.example]}\ndeny: {cards: [\"purpose:ai-training\"]}\n"
	parse := func(body string) *Config {
		t.Helper()
		c, err := Parse("proxy.yaml", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	err = p.Reload(parse(head + "cache: {key_sets: 900, signature_agents: -1, expanded_keys: 4096}\n" + rules))
	if err == nil || !strings.Contains(err.Error(), "take effect only on a restart: cache.key_sets, cache.signature_agents:") {
		t.Errorf("a reload changing cache.*: %v, want refused naming cache.key_sets and cache.signature_agents", err)
	}
	if got := p.Config(); got.Cache != first.Cache || !reflect.DeepEqual(got.Limits, first.Limits) || got.Mode != first.Mode {
		t.Errorf("after a refused reload: cache %+v, limits %+v, mode %s; want those in force", got.Cache, got.Limits, got.Mode)
	}

	next := parse(head + "cache: {key_sets: 500}\n" + rules)
	if err := p.Reload(next); err != nil {
		t.Fatal(err)
	}
	got := p.Config()
	for _, k := range reloadable {
		a, _ := got.field(k)
		b, _ := next.field(k)
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			t.Errorf("%s after a reload: %+v, want the new file's %+v", k, a.Interface(), b.Interface())
		}
	}
	if got.Limits.BucketsPerAgent != 32 {
		t.Errorf("limits.buckets_per_agent after a reload: %d, want 32", got.Limits.BucketsPerAgent)
	}
	// An error in the reloaded rules names the new file's line, not the
	// old one's.
	bad := parse(head + "cache: {key_sets: 500}\n\n\n" + strings.Replace(rules, "buckets_per_agent: 32", "buckets_per_agent: -2", 1))
	if err := p.Reload(bad); err == nil || !strings.HasPrefix(err.Error(), "proxy.yaml:8: limits.buckets_per_agent: -2") {
		t.Errorf("a bad reload: %v", err)
	}
}

// TestProxiesKeepTheirOwn: two proxies built in one process with different
// cache.expanded_keys each verify through a cache of their own: building
// or using one changes nothing in the other.
func TestProxiesKeepTheirOwn(t *testing.T) {
	key := signertest.Key(61)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", signer.DirectoryMediaType)
		_, _ = w.Write([]byte(`{"keys":[` + string(key.Public.JWK.MarshalPublic()) + `]}`))
	}))
	defer srv.Close()
	build := func(cache string) *Proxy {
		t.Helper()
		c, err := Parse("proxy.yaml", []byte("authorities: [api.example.com]\ntrust: {hosts: [\"127.0.0.1:*\"], allow_http: true, allow_private: true}\ncache: "+cache+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		p, err := Build(context.Background(), c, Options{Embedded: true, Stderr: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	serve := func(p *Proxy) {
		t.Helper()
		h := p.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		for range 3 {
			r := httptest.NewRequest(http.MethodGet, "http://api.example.com/x", nil)
			if err := signer.Sign(r, key, signer.Options{SignatureAgent: srv.URL}); err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != http.StatusOK {
				t.Fatalf("a signed request: %d %s", rec.Code, rec.Body)
			}
		}
	}
	one, none := build("{expanded_keys: 1}"), build("{expanded_keys: -1}")
	serve(one)
	serve(none)
	if one.expanded.Len() != 1 || none.expanded.Len() != 0 {
		t.Errorf("expanded keys held: %d and %d, want 1 and 0", one.expanded.Len(), none.expanded.Len())
	}
	other := build("{}")
	if one.expanded.Len() != 1 || other.expanded == one.expanded {
		t.Errorf("after another proxy was built: %d keys held, want 1", one.expanded.Len())
	}
}
