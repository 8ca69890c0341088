package main

import (
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/middleware/proxy/proxyconfig"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/agentid/agentid/signer/signertest/testenv"
)

// writeConfig writes a --config file and returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestProxyConfigRules runs two proxies from one --config file on one
// Redis, in front of a real upstream, with agents of a real reference
// server: per-route modes, a deny list, a per-agent limit that both
// proxies spend together (an agent over it gets 429 from either, another
// agent is unaffected) and a per-address limit on unsigned traffic.
func TestProxyConfigRules(t *testing.T) {
	t.Parallel()
	redisURL := os.Getenv("AGENTID_TEST_REDIS_URL")
	if redisURL == "" {
		testenv.SkipOrFail(t, "AGENTID_TEST_REDIS_URL is not set: the shared-limit test needs a Redis")
	}
	srv := clitest.StartServer(t, clitest.ServerOptions{})
	keyA, keyB, keyC := signertest.Key(0x51), signertest.Key(0x52), signertest.Key(0x53)
	originA := srv.AgentOrigin(clitest.Register(t, nil, srv.URL, keyA))
	originB := srv.AgentOrigin(clitest.Register(t, nil, srv.URL, keyB))
	originC := srv.AgentOrigin(clitest.Register(t, nil, srv.URL, keyC))
	up := newEchoUpstream(t)

	// A fresh key prefix per run: the address budget of 127.0.0.1 would
	// otherwise carry over between runs on the same Redis.
	prefix := "agentid:test:limit:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	cfg := writeConfig(t, `# idcli proxy --config
upstream: `+up.URL+`
trust:
  hosts: ["*.localhost:*"]
  allow_http: true
  allow_private: true
mode: required
routes:
  - {prefix: /pub/, mode: optional}
  - {prefix: /pub/private/, mode: required}
  - {prefix: /watch/, mode: observe}
deny:
  identities: ["`+originB+`"]
limits:
  agent: 3/1h
  address: 2/1h
  redis_prefix: "`+prefix+`"
redis_url: `+redisURL+`
access_log: "off"
`)
	p1, b1 := startProxy(t, "--config", cfg, "--metrics-listen", "127.0.0.1:0", "--access-log", "stdout")
	metricsURL := waitForStderr(t, b1, metricsBanner)
	p2, _ := startProxy(t, "--config", cfg)
	if out := b1.stderr.String(); !strings.Contains(out, "limits agent 3/1h0m0s, address 2/1h0m0s (buckets in Redis") {
		t.Errorf("banner %q does not describe the rules", out)
	}
	proxies := []string{p1, p2}
	get := func(t *testing.T, r *http.Request) (clitest.Answer, http.Header) {
		t.Helper()
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var body struct {
			Error struct{ Code string } `json:"error"`
		}
		json.Unmarshal(b, &body)
		return clitest.Answer{Status: resp.StatusCode, Code: body.Error.Code, Body: string(b)}, resp.Header
	}

	t.Run("per-route modes", func(t *testing.T) {
		unsigned, _ := http.NewRequest("GET", p1+"/x", nil)
		if a, _ := get(t, unsigned); a.Status != 401 || a.Code != "missing_signature" {
			t.Errorf("unsigned /x (required): %d %s, want 401 missing_signature", a.Status, a.Body)
		}
		if n := len(up.got("/x")); n != 0 {
			t.Errorf("the upstream saw %d refused requests at /x", n)
		}
		unsigned, _ = http.NewRequest("GET", p1+"/pub/private/doc", nil)
		if a, _ := get(t, unsigned); a.Status != 401 {
			t.Errorf("unsigned /pub/private/doc (longest prefix: required): %d, want 401", a.Status)
		}
		bad := signedGet(t, "http://elsewhere.example/watch/a", keyA, originA, signer.Options{})
		bad.URL, _ = bad.URL.Parse(p2 + "/watch/a")
		bad.Host = ""
		if a, _ := get(t, bad); a.Status != 200 {
			t.Errorf("invalid signature on /watch/ (observe): %d %s, want 200", a.Status, a.Body)
		}
		if got := up.got("/watch/a"); len(got) != 1 || got[0].Get("X-Agent-Verdict") != "invalid" {
			t.Errorf("upstream saw %v at /watch/a, want one request marked invalid", got)
		}
	})

	t.Run("deny list", func(t *testing.T) {
		a, _ := get(t, signedGet(t, p2+"/denied", keyB, originB, signer.Options{}))
		if a.Status != 403 || a.Code != "forbidden" {
			t.Errorf("denied agent: %d %s, want 403 forbidden", a.Status, a.Body)
		}
		if n := len(up.got("/denied")); n != 0 {
			t.Errorf("the upstream saw the denied agent %d times", n)
		}
	})

	t.Run("per-agent limit shared by both proxies", func(t *testing.T) {
		for i := range 3 {
			a, h := get(t, signedGet(t, proxies[i%2]+"/limited", keyA, originA, signer.Options{}))
			if a.Status != 200 {
				t.Fatalf("request %d of A: %d %s, want 200", i, a.Status, a.Body)
			}
			if got, want := h.Get("RateLimit-Policy"), `"agent";q=3;w=3600`; got != want {
				t.Errorf("RateLimit-Policy = %q, want %q", got, want)
			}
			if got := h.Get("RateLimit"); !strings.HasPrefix(got, `"agent";r=`+string(rune('2'-i))+";t=") {
				t.Errorf("request %d: RateLimit = %q, want r=%d", i, got, 2-i)
			}
		}
		for _, p := range proxies {
			a, h := get(t, signedGet(t, p+"/limited", keyA, originA, signer.Options{}))
			if a.Status != 429 || a.Code != "rate_limited" || h.Get("Retry-After") == "" {
				t.Errorf("A over its limit through %s: %d %s (Retry-After %q), want 429 rate_limited with Retry-After", p, a.Status, a.Body, h.Get("Retry-After"))
			}
		}
		if n := len(up.got("/limited")); n != 3 {
			t.Errorf("the upstream saw %d requests of A, want 3", n)
		}
		if a, _ := get(t, signedGet(t, p1+"/other", keyC, originC, signer.Options{})); a.Status != 200 {
			t.Errorf("agent C: %d %s, want 200 (its own budget)", a.Status, a.Body)
		}
	})

	t.Run("unsigned traffic limited by address", func(t *testing.T) {
		// Both proxies see 127.0.0.1, whose budget the refusals of the
		// required routes did not spend.
		allowed := 0
		for i := range 4 {
			r, _ := http.NewRequest("GET", proxies[i%2]+"/pub/page", nil)
			a, h := get(t, r)
			switch a.Status {
			case 200:
				allowed++
				if !strings.HasPrefix(h.Get("RateLimit-Policy"), `"address";q=2;w=3600`) {
					t.Errorf("RateLimit-Policy = %q", h.Get("RateLimit-Policy"))
				}
			case 429:
			default:
				t.Errorf("unsigned /pub/page: %d %s", a.Status, a.Body)
			}
		}
		if allowed != 2 {
			t.Errorf("%d of 4 unsigned requests from one address passed, want 2", allowed)
		}
	})

	// The first proxy refused two unsigned requests on required routes
	// (401), A over its limit and the third unsigned request (429): its
	// metrics and access log record them as its own answers, one line
	// each, none with the 502 of a request stopped before the upstream.
	req, _ := http.NewRequest("GET", metricsURL, nil)
	m := clitest.MustSend(t, http.DefaultClient, req)
	for _, want := range []string{
		`agentid_http_requests_total{route="proxy",method="GET",status="401"} 2`,
		`agentid_http_requests_total{route="proxy",method="GET",status="429"} 2`,
	} {
		if !strings.Contains(m.Body, want) {
			t.Errorf("metrics lack %s:\n%s", want, m.Body)
		}
	}
	if strings.Contains(m.Body, `status="502"`) || strings.Contains(m.Body, `route="rules"`) {
		t.Errorf("metrics count a refusal twice or as a 502:\n%s", m.Body)
	}
	out := b1.waitStdout(func(out string) bool { return strings.Count(out, `"reason":"rate_limited"`) >= 2 })
	if strings.Contains(out, `"status":502`) || strings.Contains(out, `"msg":"refused"`) {
		t.Errorf("access log has a second line or a 502 for a refusal:\n%s", out)
	}
	refused := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, `"msg":"request"`) && strings.Contains(line, `"status":429`) && strings.Contains(line, `"reason":"rate_limited"`) {
			refused++
			if strings.Contains(line, `"path":"/limited"`) && !strings.Contains(line, `"agent":"`+originA+`"`) {
				t.Errorf("access log line %s does not name agent A", line)
			}
		}
	}
	if refused != 2 {
		t.Errorf("%d access log lines of 429 refusals, want 2:\n%s", refused, b1.stdout)
	}
	statusURL := strings.TrimSuffix(metricsURL, "/metrics") + "/status"
	page := clitest.MustDo(t, "GET", statusURL, "", nil, nil)
	// Every refusal, by the request's outcome and the refusal's reason.
	for _, want := range []string{
		`<tr class="refusal" data-outcome="not-present" data-reason="unsigned" data-count="2">`,
		`<tr class="refusal" data-outcome="verified" data-reason="rate_limited" data-count="1">`,
		`<tr class="refusal" data-outcome="not-present" data-reason="rate_limited" data-count="1">`,
	} {
		if !strings.Contains(page.Body, want) {
			t.Errorf("the status page lacks %s", want)
		}
	}
}

// TestProxyConfigErrors: a bad file is refused before anything listens,
// with one line naming the file and, for an unknown key, the key and its
// line.
func TestProxyConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, want string
	}{
		{"unknown key", "forward_auth: true\ntrust:\n  hosts: [a.example]\n  allow_htttp: true\n", `proxy.yaml:4: unknown key "trust.allow_htttp" (did you mean "allow_http"?); the keys of trust are: hosts, allow_http, allow_private, registries`},
		{"unknown top-level key", "forward_auth: true\nlimit:\n  agent: 1/s\n", `proxy.yaml:2: unknown key "limit" (did you mean "limits"?); the keys are: listen, upstream,`},
		{"bad mode", "forward_auth: true\nfront: nginx\nmode: strict\n", `proxy.yaml:3: mode: "strict": want required, optional or observe`},
		{"bad route mode", "forward_auth: true\nfront: nginx\nroutes:\n  - {prefix: /a, mode: optional}\n  - {prefix: /b, mode: requierd}\n", `proxy.yaml:5: routes[1].mode: "requierd": want required, optional or observe`},
		{"bad route prefix", "forward_auth: true\nfront: nginx\nroutes: [{prefix: a, mode: optional}]\n", `proxy.yaml:3: routes[0].prefix: "a": want a path prefix starting with /`},
		{"bad host pattern", "forward_auth: true\nfront: nginx\nallow: {hosts: [\"ok.example\", \"a.*.example\"]}\n", `proxy.yaml:3: allow.hosts[1]: bad host pattern "a.*.example"`},
		{"bad limit", "forward_auth: true\nfront: nginx\nlimits: {agent: lots}\n", `proxy.yaml:3: limits.agent: "lots": want REQUESTS/WINDOW`},
		{"uids without a service", "forward_auth: true\nfront: nginx\nallow: {uids: [\"agent-0*\"]}\n", `proxy.yaml:3: allow.uids: uids "agent-0*" need the agentid service`},
		{"deny uids without a service", "forward_auth: true\nfront: nginx\ndeny:\n  uids: [agent-aaaaaaaaaaaaaaaaaaaaaaaa]\n", `deny.uids: uids "agent-aaaaaaaaaaaaaaaaaaaaaaaa" need the agentid service`},
		{"short window", "forward_auth: true\nfront: nginx\nlimits: {address: 5/10ms}\n", `proxy.yaml:3: limits.address: "5/10ms": the window "10ms" must be a duration of at least 1s`},
		{"wrong type", "forward_auth: yes please\n", `proxy.yaml:1: forward_auth: want true or false, got "yes please"`},
		{"list for a string", "forward_auth: true\nfront: [nginx]\n", `proxy.yaml:2: front: want a string, got a list`},
		{"new key as a flag's", "forward_auth: true\nfront: nginx\nupstream_max_idle: 0\n", `proxy.yaml:3: upstream_max_idle: 0: want at least 1`},
		{"key given twice", "forward_auth: true\nfront: nginx\nfront: caddy\n", `proxy.yaml:3: front: given twice`},
		{"not yaml", "forward_auth: true\n  front: [nginx\n", `proxy.yaml:2: `},
		{"hash tag prefix", "forward_auth: true\nfront: nginx\nauthorities: [api.example.com]\nredis_url: " + redisOrDefault() + "\nlimits: {agent: 1/s, redis_prefix: \"{x}\"}\n", "proxy.yaml:5: limits.redis_prefix"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeConfig(t, tc.body)
			dir := filepath.Dir(cfg)
			r := runCLI(t.Context(), dir, nil, "proxy", "--listen", "127.0.0.1:0", "--trust", "*.agentid.example", "--authority", "api.example.com", "--config", "proxy.yaml")
			if r.err == nil || !strings.Contains(r.err.Error(), tc.want) || strings.Contains(r.err.Error(), "\n") || strings.Contains(r.err.Error(), "as a flag") {
				t.Errorf("error %v, want one line containing %q", r.err, tc.want)
			}
			if strings.Contains(r.stdout+r.stderr, "listening") {
				t.Errorf("printed %q, want no banner", r.stdout+r.stderr)
			}
		})
	}
	r := runCLI(t.Context(), t.TempDir(), nil, "proxy", "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	if r.err == nil || !strings.Contains(r.err.Error(), "missing.yaml: no such file") {
		t.Errorf("missing file: %v, want --config: open …", r.err)
	}
}

func redisOrDefault() string {
	if u := os.Getenv("AGENTID_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// TestProxyConfigFlagsWin: a flag on the command line wins over the file,
// and the file's other settings apply.
func TestProxyConfigFlagsWin(t *testing.T) {
	t.Parallel()
	up := newEchoUpstream(t)
	cfg := writeConfig(t, "upstream: "+up.URL+"\nmode: required\ntrust: {hosts: [\"*.agentid.example\"]}\naccess_log: \"off\"\n")
	base, b := startProxy(t, "--config", cfg, "--mode", "optional")
	if out := b.stderr.String(); !strings.Contains(out, "• mode optional;") || !strings.Contains(out, "; trusting *.agentid.example") || !strings.Contains(out, "→ upstream "+up.URL) {
		t.Errorf("banner %q, want mode optional from the flag and the file's upstream and trust", out)
	}
	r, _ := http.NewRequest("GET", base+"/flags", nil)
	if a := clitest.MustSend(t, http.DefaultClient, r); a.Status != 200 {
		t.Errorf("unsigned request in optional mode: %d %s, want 200", a.Status, a.Body)
	}
}

// TestProxyStatusPage serves /status beside /metrics, counting the
// proxy's verification outcomes by agent.
func TestProxyStatusPage(t *testing.T) {
	t.Parallel()
	key := signertest.Key(0x55)
	uid, origin := localAgent(t, key)
	service := strings.Replace(origin, uid+".", "", 1) // the agentid service the agent is registered at
	up := newEchoUpstream(t)
	base, p := startProxy(t, append([]string{"--upstream", up.URL, "--metrics-listen", "127.0.0.1:0", "--access-log", "off", "--agentid-service", service}, localTrust...)...)
	statusURL := waitForStderr(t, p, regexp.MustCompile(`status page at (http://\S+)`))
	for range 2 {
		clitest.MustSend(t, http.DefaultClient, signedGet(t, base+"/s", key, origin, signer.Options{}))
	}
	unsigned, _ := http.NewRequest("GET", base+"/s", nil)
	clitest.MustSend(t, http.DefaultClient, unsigned)

	resp, err := http.Get(statusURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("GET %s: %d %v", statusURL, resp.StatusCode, resp.Header)
	}
	for _, want := range []string{
		`<tr class="agent" data-id="` + origin + `" data-requests="2" data-verified="2"`,
		`data-uid="` + uid + `"><td><b class="uid">` + uid + `</b>`, // an agentid service's agent, named by uid
		`id="hour-not-present" data-count="1"`,
		`id="hour-verified" data-count="2"`,
		// The unsigned request was refused with 401: a refusal, counted.
		`<tr class="refusal" data-outcome="not-present" data-reason="unsigned" data-count="1">`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the status page lacks %s", want)
		}
	}
	if strings.Contains(string(body), "No refusal.") {
		t.Error("the status page says No refusal while the proxy refused a request")
	}
}

// TestProxyConfigDocExample: the example file of docs/proxy.md loads
// (strictly) and sets what it says.
func TestProxyConfigDocExample(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/proxy.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "```yaml\n# /etc/agentid/proxy.yaml\n")
	if start < 0 {
		t.Fatal("docs/proxy.md has no example proxy.yaml")
	}
	body := doc[start+len("```yaml\n"):]
	body = body[:strings.Index(body, "```")]
	c, err := proxyconfig.Parse("proxy.md", []byte(body))
	if err != nil {
		t.Fatalf("the documented example: %v", err)
	}
	plan, err := c.Validate()
	if err != nil {
		t.Fatalf("the documented example: %v", err)
	}
	r := plan.Rules
	if c.Upstream != "http://127.0.0.1:8000" || c.Mode != "required" || len(c.Trust.Hosts) != 2 || c.MetricsListen != "127.0.0.1:9090" ||
		len(r.Routes) != 3 || len(r.Allow.Hosts) != 1 || len(r.Deny.Hosts) != 1 ||
		r.Agent.Quota != 600 || r.Agent.Window != time.Minute || r.Addr.Quota != 60 || r.KeyHeader != "Signed-Agent-Metadata" ||
		len(r.DenyCards) != 1 || len(r.Trusted) != 1 || r.AddrHeader != "X-Forwarded-For" {
		t.Errorf("loaded %+v, rules %+v", c, r)
	}
}

// TestProxyEveryFlagIsAKey walks the flags of `idcli proxy`: each one but
// --config and --check sets a key of the configuration file, so the two
// cannot drift apart; and each key a flag may set has that flag.
func TestProxyEveryFlagIsAKey(t *testing.T) {
	env := &cliEnv{Getenv: func(string) string { return "" }}
	fs := newFlagSet("idcli proxy", env)
	var f proxyFlags
	f.register(fs)
	n := 0
	fs.VisitAll(func(fl *flag.Flag) {
		if fl.Name == "config" || fl.Name == "check" {
			return
		}
		n++
		if _, ok := proxyconfig.KeyOfFlag(fl.Name); !ok {
			t.Errorf("--%s sets no key of the configuration file", fl.Name)
		}
	})
	for _, k := range proxyconfig.Keys() {
		if k.Flag != "" && fs.Lookup(k.Flag) == nil {
			t.Errorf("key %s names flag --%s, which idcli proxy lacks", k.Name, k.Flag)
		}
	}
	if n < 24 {
		t.Errorf("walked %d setting flags, want at least 24", n)
	}
}

// TestProxyCheck: --check prints the effective configuration (the file's,
// with the flags over it, secrets masked) and exits 0 without listening;
// a bad file exits non-zero naming the file, line and key.
func TestProxyCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "proxy.yaml"), []byte("upstream: http://127.0.0.1:8000\nauthorities: [api.example.com]\ntrust: {hosts: [\"*.agentid.example\"]}\nredis_url: redis://:hunter2@127.0.0.1:1/0\nprofile: strict-01\nroutes:\n  - {prefix: /pub/, mode: optional}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t.Context(), dir, nil, "proxy", "--config", "proxy.yaml", "--check", "--mode", "observe", "--listen", "127.0.0.1:1", "--cache-key-sets", "20000")
	if r.err != nil {
		t.Fatalf("--check: %v\n%s", r.err, r.stderr)
	}
	for _, want := range []string{"mode: observe\n", "profile: strict-01\n", "redis_url: redis://xxxxx@127.0.0.1:1/0\n", "listen: 127.0.0.1:1\n", "- prefix: /pub/\n", "upstream_max_idle: 256 # default\n", "cache:\n    key_sets: 20000\n", "    key_sets_on_probation: 20000 # default\n", "    expanded_keys: 4096 # default\n", "    buckets_per_agent: 64 # default\n", "from proxy.yaml"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--check printed\n%s\nwithout %q", r.stdout, want)
		}
	}
	if strings.Contains(r.stdout+r.stderr, "hunter2") || strings.Contains(r.stderr, "listening") {
		t.Errorf("--check showed the password or listened:\n%s\n%s", r.stdout, r.stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("upstream: http://127.0.0.1:8000\nauthorities: [api.example.com]\ntrust: {hosts: [\"*.agentid.example\"]}\nroutes:\n  - {prefix: /pub/, mode: optional}\n  - {prefix: /x/, mode: requierd}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t.Context(), dir, nil, "proxy", "--config", "bad.yaml", "--check")
	if r.err == nil || r.err.Error() != `bad.yaml:6: routes[1].mode: "requierd": want required, optional or observe` {
		t.Errorf("--check of a bad file: %v", r.err)
	}
	if r.stdout != "" {
		t.Errorf("--check of a bad file printed %q", r.stdout)
	}
}

// TestProxyTrustHint: a local agent on a port refused by --trust
// '*.localhost' (which means the default port) is explained at the
// default log level, naming the pattern and the one to write, once per
// host.
func TestProxyTrustHint(t *testing.T) {
	t.Parallel()
	key := signertest.Key(0x61)
	_, origin := localAgent(t, key)
	up := newEchoUpstream(t)
	base, b := startProxy(t, "--upstream", up.URL, "--trust", "*.localhost", "--allow-http", "--allow-private", "--access-log", "off")
	for range 3 {
		a := clitest.MustSend(t, http.DefaultClient, signedGet(t, base+"/x", key, origin, signer.Options{}))
		if a.Status != 401 || a.Code != "untrusted_signature_agent" {
			t.Fatalf("agent at %s: %d %s, want 401 untrusted_signature_agent", origin, a.Status, a.Body)
		}
	}
	host := strings.TrimPrefix(origin, "http://")
	name, port, _ := strings.Cut(host, ":")
	want := "--trust *.localhost matches " + name + " on the scheme's default port only, not :" + port + ": write *.localhost:* (any port) or " + host
	out := waitForStderr(t, b, regexp.MustCompile(`level=WARN msg="signature agent refused by the trust patterns.*`))
	if !strings.Contains(out, want) {
		t.Errorf("log line %q lacks %q", out, want)
	}
	if n := strings.Count(b.stderr.String(), "refused by the trust patterns"); n != 1 {
		t.Errorf("%d hint lines for one host, want 1:\n%s", n, b.stderr.String())
	}
}

// TestProxyRedisDownIsOneLine: a Redis that does not answer gets the
// proxy's one-line error and nothing before it (the Redis client's own
// retry lines go to the operational log at debug level).
func TestProxyRedisDownIsOneLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the idcli binary")
	}
	t.Parallel()
	r := runBinary(t, t.TempDir(), nil, "proxy", "--forward-auth", "--front", "nginx", "--trust", "a.example", "--authority", "a.example",
		"--listen", "127.0.0.1:0", "--redis-url", "redis://:hunter2@127.0.0.1:1/0")
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if r.code == 0 || len(lines) != 1 || !strings.HasPrefix(lines[0], "idcli: --redis-url: redis://xxxxx@127.0.0.1:1/0: Redis does not answer") {
		t.Errorf("want one line naming --redis-url:\n%s", r)
	}
	if strings.Contains(r.stderr+r.stdout, "hunter2") {
		t.Errorf("the password was printed:\n%s", r)
	}
}

// TestProxyConfigMissingKeys: a file that leaves out every required key is
// refused with one error per key, each named as the file's key and as the
// flag that could give it instead, all at once.
func TestProxyConfigMissingKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "proxy.yaml"), []byte("mode: optional\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t.Context(), dir, nil, "proxy", "--config", "proxy.yaml", "--check")
	for _, want := range []string{"proxy.yaml: upstream (or --upstream) is required", "proxy.yaml: authorities (or --authority) is required", "proxy.yaml: trust.hosts (or --trust) is required"} {
		if r.err == nil || !strings.Contains(r.err.Error(), want) {
			t.Errorf("--check of a file without it: %v, want %q", r.err, want)
		}
	}
}
