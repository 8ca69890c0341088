package proxyconfig

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/middleware/policy"
	"github.com/agentid/agentid/middleware/redisstore"
	"github.com/agentid/agentid/middleware/rules"
)

// goNames are the exported field names of the Go types behind the keys:
// an error about a file's key names the key, never one of these.
func goNames() []string {
	var out []string
	for _, v := range []any{Config{}, Trust{}, Cache{}, Route{}, Policy{}, Limits{}, keyfetch.Config{},
		middleware.Config{}, policy.List{}, agentlimit.Config{}, redisstore.Config{}, rules.Config{}} {
		t := reflect.TypeOf(v)
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				out = append(out, f.Name)
			}
		}
	}
	return out
}

// TestErrorsSpeakTheFilesKeys: for every key of the file, a bad value is
// refused with an error that names the file, the line and that key, and
// no Go field name (Services, TrustedHosts, Config.Prefix…) nor a flag.
func TestErrorsSpeakTheFilesKeys(t *testing.T) {
	const up, auth, trust = "upstream: http://127.0.0.1:8000\n", "authorities: [a.example]\n", "trust: {hosts: [a.example]}\n"
	fa := "forward_auth: true\nfront: nginx\n" + auth + trust
	cases := map[string]struct{ body, want string }{
		"listen":                      {base + "listen: x\n", "proxy.yaml:4: listen:"},
		"upstream":                    {auth + trust + "upstream: ftp://x\n", "proxy.yaml:3: upstream:"},
		"forward_auth":                {base + "forward_auth: maybe\n", "proxy.yaml:4: forward_auth:"},
		"front":                       {"forward_auth: true\nfront: apache\n" + auth + trust, "proxy.yaml:2: front:"},
		"forward_auth_from":           {fa + "forward_auth_from: [nginx]\n", "proxy.yaml:5: forward_auth_from[0]:"},
		"authorities":                 {up + trust + "authorities: [\"a b\"]\n", "proxy.yaml:3: authorities:"},
		"trust.hosts":                 {up + auth + "trust:\n  hosts: [a.example, \"*\"]\n", "proxy.yaml:4: trust.hosts[1]: \"*\""},
		"trust.allow_http":            {up + auth + "trust: {hosts: [a.example], allow_http: maybe}\n", "proxy.yaml:3: trust.allow_http:"},
		"trust.allow_private":         {up + auth + "trust: {hosts: [a.example], allow_private: 2}\n", "proxy.yaml:3: trust.allow_private:"},
		"trust.registries":            {up + auth + "trust:\n  hosts: [a.example]\n  registries: [\"https://a.example/l\", \"https://b.example/l\"]\n", "proxy.yaml:5: trust.registries[1]: \"https://b.example/l\": the registry itself must be trusted: host b.example:443 matches no trust.hosts pattern"},
		"agentid_services":            {base + "agentid_services: [\"ftp://x\"]\n", "proxy.yaml:4: agentid_services[0]:"},
		"mode":                        {base + "mode: strict\n", "proxy.yaml:4: mode:"},
		"profile":                     {base + "profile: p\n", "proxy.yaml:4: profile:"},
		"refusal_status":              {base + "refusal_status: 404\n", "proxy.yaml:4: refusal_status:"},
		"redis_url":                   {base + "redis_url: \"redis://\"\n", "proxy.yaml:4: redis_url:"},
		"metrics_listen":              {base + "metrics_listen: y\n", "proxy.yaml:4: metrics_listen:"},
		"access_log":                  {base + "access_log: z\n", "proxy.yaml:4: access_log:"},
		"log_level":                   {base + "log_level: w\n", "proxy.yaml:4: log_level:"},
		"upstream_max_idle":           {base + "upstream_max_idle: 0\n", "proxy.yaml:4: upstream_max_idle:"},
		"cache.key_sets":              {base + "cache: {key_sets: -1}\n", "proxy.yaml:4: cache.key_sets:"},
		"cache.key_sets_on_probation": {base + "cache: {key_sets_on_probation: -1}\n", "proxy.yaml:4: cache.key_sets_on_probation: -1: want 1 to 1000000 (0: as many as cache.key_sets)"},
		"cache.key_sets_per_site":     {base + "cache: {key_sets_per_site: -2}\n", "proxy.yaml:4: cache.key_sets_per_site:"},
		"cache.signature_agents":      {base + "cache: {signature_agents: -2}\n", "proxy.yaml:4: cache.signature_agents:"},
		"cache.expanded_keys":         {base + "cache: {expanded_keys: -2}\n", "proxy.yaml:4: cache.expanded_keys:"},
		"routes":                      {base + "routes: [{prefix: a, mode: optional}]\n", "proxy.yaml:4: routes[0].prefix:"},
		"allow.identities":            {base + "allow: {identities: [\"\"]}\n", "proxy.yaml:4: allow.identities[0]: identity \"\": invalid signature agent"},
		"allow.hosts":                 {base + "allow: {hosts: [\"*\"]}\n", "proxy.yaml:4: allow.hosts[0]:"},
		"allow.uids":                  {base + "allow: {uids: [agent-1]}\n", "proxy.yaml:4: allow.uids: uids \"agent-1\" need the agentid service they belong to (agentid_services)"},
		"allow.cards":                 {base + "allow: {cards: [\"name:x\"]}\n", "proxy.yaml:4: allow.cards:"},
		"deny.identities":             {base + "deny: {identities: [\"https://a b\"]}\n", "proxy.yaml:4: deny.identities[0]:"},
		"deny.hosts":                  {base + "deny: {hosts: [\"\"]}\n", "proxy.yaml:4: deny.hosts[0]:"},
		"deny.uids":                   {base + "agentid_services: [\"https://agentid.example\"]\ndeny: {uids: [\"[\"]}\n", "proxy.yaml:5: deny.uids[0]:"},
		"deny.cards":                  {base + "deny: {cards: [bogus]}\n", "proxy.yaml:4: deny.cards[0]:"},
		"limits.agent":                {base + "limits: {agent: 0/s}\n", "proxy.yaml:4: limits.agent:"},
		"limits.address":              {base + "limits: {address: 5/0s}\n", "proxy.yaml:4: limits.address:"},
		"limits.key_header":           {base + "limits: {key_header: \"a b\"}\n", "proxy.yaml:4: limits.key_header:"},
		"limits.buckets_per_agent":    {base + "limits: {buckets_per_agent: -1}\n", "proxy.yaml:4: limits.buckets_per_agent:"},
		"limits.redis_prefix":         {base + "limits: {redis_prefix: \"a{b}\"}\n", "proxy.yaml:4: limits.redis_prefix: \"a{b}\" must not contain a hash tag"},
		"limits.trusted_proxies":      {base + "limits: {trusted_proxies: [x]}\n", "proxy.yaml:4: limits.trusted_proxies[0]:"},
		"limits.client_addr_header":   {base + "limits: {client_addr_header: X-Real-IP}\n", "proxy.yaml:4: limits.client_addr_header: \"X-Real-IP\" needs limits.trusted_proxies"},
	}
	var words []*regexp.Regexp
	for _, n := range goNames() {
		words = append(words, regexp.MustCompile(`\b`+n+`\b`))
	}
	for _, k := range Keys() {
		tc, ok := cases[k.Name]
		if !ok {
			t.Errorf("no bad value for the key %s", k.Name)
			continue
		}
		t.Run(k.Name, func(t *testing.T) {
			err := parseAndValidate(t, tc.body)
			if err == nil {
				t.Fatalf("accepted %q", tc.body)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error\n%s\nwant it to contain\n%s", msg, tc.want)
			}
			for _, w := range words {
				if w.MatchString(msg) {
					t.Errorf("error %q names the Go field %s", msg, w)
				}
			}
			if strings.Contains(msg, "--") {
				t.Errorf("error %q names a flag; the file has keys", msg)
			}
		})
	}
	if len(cases) != len(Keys()) {
		t.Errorf("%d cases for %d keys", len(cases), len(Keys()))
	}
}

// TestMissingKeyNamesFileAndFlag: a required key left out of a file read
// by idcli proxy (UseFlagNames) is named as the file's key and the flag.
func TestMissingKeyNamesFileAndFlag(t *testing.T) {
	c, err := Parse("proxy.yaml", []byte("upstream: http://127.0.0.1:8000\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.UseFlagNames()
	_, err = c.Validate()
	for _, want := range []string{"proxy.yaml: authorities (or --authority) is required", "proxy.yaml: trust.hosts (or --trust) is required"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
	// Without a file, the flags.
	c = Default()
	c.UseFlagNames()
	if _, err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--authority is required") || strings.Contains(err.Error(), "authorities") {
		t.Errorf("error %v, want --authority is required", err)
	}
	// A bad trust pattern given as a flag names the flag.
	c = Default()
	c.UseFlagNames()
	for name, v := range map[string]string{"upstream": "http://127.0.0.1:8000", "authority": "a.example", "trust": "a.example,*", "registry": "https://b.example/l"} {
		if err := c.SetFlag(name, []string{v}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Validate(); err == nil || !strings.Contains(err.Error(), `--trust "*": invalid host name`) {
		t.Errorf("error %v", err)
	}
	c.Trust.Hosts = []string{"a.example"}
	if _, err := c.Validate(); err == nil || !strings.Contains(err.Error(), "matches no --trust pattern") {
		t.Errorf("error %v", err)
	}
}

// TestEffectiveWritesDefaults: --check's configuration writes each key's
// value in force: a 0 or "" standing for a default is written as that
// default, a key at its default is marked so, an empty value that is the
// one in force says what it means; and it parses back to the same output.
func TestEffectiveWritesDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want, not  []string
	}{
		{"defaults", base, []string{
			"listen: :8080 # default\n", "buckets_per_agent: 64 # default\n", "redis_prefix: 'agentid:limit:' # default\n",
			`client_addr_header: "" # default: X-Forwarded-For, read only from limits.trusted_proxies` + "\n",
			"key_sets_on_probation: 10000 # default\n", `redis_url: "" # default: nonces in memory`, `agent: "off" # default`,
			"forward_auth_from: [] # default: none: only with forward_auth\n", "expanded_keys: 4096 # default\n",
		}, []string{"buckets_per_agent: 0", "redis_prefix: \"\""}},
		{"zeros written in the file", base + "limits: {agent: 5/s, buckets_per_agent: 0, redis_prefix: \"\", trusted_proxies: [10.0.0.0/8]}\ncache: {key_sets: 5, key_sets_per_site: 0}\naccess_log: \"\"\n", []string{
			"buckets_per_agent: 64 # default\n", "client_addr_header: X-Forwarded-For # default\n", "key_sets: 5\n",
			"key_sets_on_probation: 5 # default\n", "key_sets_per_site: 16 # default\n", "agent: 5/s\n", "access_log: \"off\"\n",
		}, []string{"key_sets: 5 #"}},
		{"forward auth", "forward_auth: true\nfront: nginx\nauthorities: [a.example]\ntrust: {hosts: [a.example]}\n", []string{
			"forward_auth_from: [127.0.0.0/8, '::1'] # default\n", `upstream: "" # default: none`, "forward_auth: true\n",
		}, nil},
		{"given", base + "limits: {buckets_per_agent: 8, redis_prefix: \"x:\", client_addr_header: X-Real-IP, trusted_proxies: [10.0.0.1]}\n", []string{
			"buckets_per_agent: 8\n", "redis_prefix: 'x:'\n", "client_addr_header: X-Real-IP\n",
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("proxy.yaml", []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			out := c.Effective()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("effective configuration lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(out, w) {
					t.Errorf("effective configuration has %q:\n%s", w, out)
				}
			}
			// No bare 0, "" or [] left unexplained.
			for _, line := range strings.Split(out, "\n") {
				if (strings.HasSuffix(line, ": 0") || strings.HasSuffix(line, `: ""`) || strings.HasSuffix(line, ": []")) && !strings.Contains(line, "#") {
					t.Errorf("line %q: a value of nothing, unexplained", line)
				}
			}
			back, err := Parse("effective", []byte(out))
			if err != nil {
				t.Fatalf("does not parse back: %v\n%s", err, out)
			}
			if _, err := back.Validate(); err != nil {
				t.Fatalf("parsed back, invalid: %v\n%s", err, out)
			}
			if again := back.Effective(); again != out {
				t.Errorf("parsed back, it reads\n%s\nwant\n%s", again, out)
			}
		})
	}
}
