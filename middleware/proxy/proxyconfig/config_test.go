package proxyconfig

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

// base is a valid configuration for the tests to add to.
const base = "upstream: http://127.0.0.1:8000\nauthorities: [api.example.com]\ntrust: {hosts: [\"*.agentid.example\"]}\n"

// TestErrorShapes: every kind of bad file is refused with one line per
// problem, naming the file, the line and the key.
func TestErrorShapes(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"unknown key", base + "mdoe: required\n", `proxy.yaml:4: unknown key "mdoe" (did you mean "mode"?); the keys are: listen, upstream,`},
		{"unknown nested key", base + "limits:\n  agnet: 1/s\n", `proxy.yaml:5: unknown key "limits.agnet" (did you mean "agent"?); the keys of limits are: agent, address, key_header,`},
		{"unknown key far off", base + "colour: blue\n", `proxy.yaml:4: unknown key "colour"; the keys are: listen,`},
		{"flag spelling", base + "upstream-max-idle: 5\n", `unknown key "upstream-max-idle" (did you mean "upstream_max_idle"?)`},
		{"bad mode", base + "mode: requierd\n", `proxy.yaml:4: mode: "requierd": want required, optional or observe`},
		{"bad route mode", base + "routes:\n  - {prefix: /a/, mode: optional}\n  - prefix: /b/\n    mode: requierd\n", `proxy.yaml:7: routes[1].mode: "requierd": want required, optional or observe`},
		{"route twice", base + "routes:\n  - {prefix: /a/, mode: optional}\n  - {prefix: /a/, mode: observe}\n", `proxy.yaml:6: routes[1].prefix: "/a/" is also routes[0]'s`},
		{"bad deny card", base + "deny:\n  cards: [\"colour:red\"]\n", `proxy.yaml:5: deny.cards[0]: "colour:red": want name:NAME or purpose:PURPOSE`},
		{"allow card", base + "allow:\n  cards: [\"name:x\"]\n", `proxy.yaml:5: allow.cards: a card's name and purpose are its agent's own claim`},
		{"bad uid pattern", base + "agentid_services: [\"https://agentid.example\"]\ndeny:\n  uids: [\"[\"]\n", `proxy.yaml:6: deny.uids[0]: bad`},
		{"uids without a service", base + "deny:\n  uids: [\"agent-*\"]\n", `proxy.yaml:5: deny.uids: uids "agent-*" need the agentid service`},
		{"bad key header", base + "limits: {agent: 1/s, key_header: \"a b\"}\n", `proxy.yaml:4: limits.key_header: "a b" is not a header name`},
		{"bad int", base + "refusal_status: four-oh-three\n", `proxy.yaml:4: refusal_status: want a whole number, got "four-oh-three"`},
		{"bad status", base + "refusal_status: 404\n", `proxy.yaml:4: refusal_status: 404: want 401 or 403`},
		{"bad bool", base + "forward_auth: maybe\n", `proxy.yaml:4: forward_auth: want true or false, got "maybe"`},
		{"mapping for a list", base + "agentid_services: {a: b}\n", `proxy.yaml:4: agentid_services: want a list, got a mapping`},
		{"bad service", base + "agentid_services: [\"https://agentid.example/agents\"]\n", `proxy.yaml:4: agentid_services[0]: `},
		{"bad registry", "upstream: http://127.0.0.1:8000\nauthorities: [a.example]\ntrust:\n  hosts: [a.example]\n  registries: [\"ftp://x\"]\n", `proxy.yaml:5: trust.registries[0]: "ftp://x": `},
		{"excludes", base + "forward_auth: true\n", `proxy.yaml:1: upstream excludes forward_auth`},
		{"front without forward_auth", base + "front: nginx\n", `proxy.yaml:4: front is for forward_auth`},
		{"forward_auth_from entry", "forward_auth: true\nfront: nginx\nforward_auth_from: [10.0.0.1, nginx]\nauthorities: [a.example]\ntrust: {hosts: [a.example]}\n", `proxy.yaml:3: forward_auth_from[1]: "nginx": want an address or CIDR`},
		{"redis url", base + "redis_url: http://:hunter2@redis.example\n", `proxy.yaml:4: redis_url: http://xxxxx@redis.example: want redis://`},
		{"missing trust", "upstream: http://127.0.0.1:8000\nauthorities: [a.example]\n", `trust.hosts is required`},
		{"not yaml", base + "routes: [\n", `proxy.yaml:4: did not find expected node content`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := parseAndValidate(t, tc.body)
			if err == nil {
				t.Fatalf("accepted %q", tc.body)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error\n%s\nwant it to contain\n%s", msg, tc.want)
			}
			if strings.Contains(msg, "hunter2") || strings.Contains(msg, "as a flag") {
				t.Errorf("error %q repeats a secret or calls a key a flag", msg)
			}
		})
	}
}

func parseAndValidate(t *testing.T, body string) error {
	t.Helper()
	c, err := Parse("proxy.yaml", []byte(body))
	if err != nil {
		return err
	}
	_, err = c.Validate()
	return err
}

// TestAllErrorsAtOnce: two bad values are both reported, each on its line.
func TestAllErrorsAtOnce(t *testing.T) {
	err := parseAndValidate(t, base+"mode: strict\nlimits: {agent: lots}\n")
	if err == nil {
		t.Fatal("accepted")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "proxy.yaml:4: mode:") || !strings.HasPrefix(lines[1], "proxy.yaml:5: limits.agent:") {
		t.Errorf("errors %q, want mode (line 4) then limits.agent (line 5)", lines)
	}
}

// TestFlagsOverFile: a flag replaces the file's value, and an error in it
// names the flag, not the file.
func TestFlagsOverFile(t *testing.T) {
	if _, err := Parse("proxy.yaml", []byte(base+"mode: optional\nauthorities: [a.example, b.example]\n")); err == nil {
		t.Fatal("authorities given twice: accepted")
	}
	c, err := Parse("proxy.yaml", []byte(base+"mode: optional\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.UseFlagNames()
	if err := c.SetFlag("authority", []string{"x.example,y.example", "z.example"}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Authorities, " "); got != "x.example y.example z.example" {
		t.Errorf("authorities %q", got)
	}
	if err := c.SetFlag("mode", []string{"strict"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Validate()
	if err == nil || err.Error() != `--mode "strict": want required, optional or observe` {
		t.Errorf("error %v, want it to name --mode", err)
	}
	if err := c.SetFlag("upstream-max-idle", []string{"many"}); err == nil || !strings.HasPrefix(err.Error(), `--upstream-max-idle "many"`) {
		t.Errorf("error %v", err)
	}
	if err := c.SetFlag("allow-http", []string{"true"}); err != nil || !c.Trust.AllowHTTP {
		t.Errorf("--allow-http: %v %v", err, c.Trust.AllowHTTP)
	}
}

// TestKeysHaveFlags: each key a flag sets is found by its flag, and each
// flag's key is reachable in a file.
func TestKeysHaveFlags(t *testing.T) {
	flags := 0
	for _, k := range Keys() {
		if k.Flag == "" {
			if !k.Reloadable {
				t.Errorf("key %s has no flag and is not reloadable", k.Name)
			}
			continue
		}
		flags++
		got, ok := KeyOfFlag(k.Flag)
		if !ok || got.Name != k.Name {
			t.Errorf("KeyOfFlag(%q) = %v, %v", k.Flag, got, ok)
		}
	}
	if flags != 24 {
		t.Errorf("%d keys with a flag, want 24", flags)
	}
}

// TestEffectiveMasksSecrets: --check's output hides the user information
// of URLs and parses back to the same settings.
func TestEffectiveMasksSecrets(t *testing.T) {
	_, err := Parse("proxy.yaml", []byte(base+"redis_url: redis://user:hunter2@127.0.0.1:6379/0\ntrust:\n  hosts: [a.example]\n  registries: [\"https://u:s3cret@reg.example/list\"]\n"))
	if err == nil || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("trust given twice: %v", err)
	}
	c, err := Parse("proxy.yaml", []byte("upstream: http://127.0.0.1:8000\nauthorities: [api.example.com]\nredis_url: redis://user:hunter2@127.0.0.1:6379/0\ntrust:\n  hosts: [a.example]\n  registries: [\"https://u:s3cret@reg.example/list\"]\nroutes: [{prefix: /a/, mode: observe}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	out := c.Effective()
	for _, secret := range []string{"hunter2", "s3cret"} {
		if strings.Contains(out, secret) {
			t.Errorf("effective configuration shows %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "redis://xxxxx@127.0.0.1:6379/0") {
		t.Errorf("effective configuration:\n%s", out)
	}
	back, err := Parse("effective", []byte(out))
	if err != nil {
		t.Fatalf("the effective configuration does not parse back: %v\n%s", err, out)
	}
	if back.Upstream != c.Upstream || len(back.Routes) != 1 || back.Routes[0].Mode != "observe" || back.UpstreamMaxIdle != c.UpstreamMaxIdle {
		t.Errorf("parsed back %+v", back)
	}
	if c.RedisURL != "redis://user:hunter2@127.0.0.1:6379/0" {
		t.Errorf("Masked changed the configuration itself: %q", c.RedisURL)
	}
}

// TestLoadLimits: a missing file and an oversized one are refused by name.
func TestLoadLimits(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "none.yaml")); err == nil || !strings.Contains(err.Error(), "none.yaml: no such file") {
		t.Errorf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", MaxFileSize)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("oversized file: %v", err)
	}
}

// TestReloadSwapsRules: Reload changes the mode and routes of a running
// proxy; a bad configuration, or one changing a key that needs a
// restart, changes nothing.
func TestReloadSwapsRules(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer up.Close()
	parse := func(body string) *Config {
		t.Helper()
		c, err := Parse("proxy.yaml", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	head := "upstream: " + up.URL + "\nauthorities: [api.example.com]\ntrust: {hosts: [a.example]}\naccess_log: \"off\"\n"
	p, err := Build(context.Background(), parse(head+"mode: optional\n"), Options{Reloadable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	status := func(path string) int {
		rec := httptest.NewRecorder()
		p.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "http://api.example.com"+path, nil))
		return rec.Code
	}
	if s := status("/x"); s != 200 {
		t.Fatalf("unsigned in optional mode: %d", s)
	}
	err = p.Reload(parse(head + "mode: required\nroutes: [{prefix: /pub/, mode: optional}]\nlisten: \":9999\"\n"))
	if err == nil || !strings.Contains(err.Error(), "changes keys that take effect only on a restart: listen:") {
		t.Errorf("a reload changing listen: %v, want refused naming listen", err)
	}
	if s := status("/x"); s != 200 {
		t.Errorf("unsigned after a reload refused for listen: %d, want 200 (nothing of it applied)", s)
	}
	if err := p.Reload(parse(head + "mode: required\nroutes: [{prefix: /pub/, mode: optional}]\n")); err != nil {
		t.Fatal(err)
	}
	if s := status("/x"); s != 401 {
		t.Errorf("unsigned after reload to required: %d, want 401", s)
	}
	if s := status("/pub/a"); s != 200 {
		t.Errorf("unsigned on an optional route: %d, want 200", s)
	}
	if err := p.Reload(parse(head + "mode: optional\nroutes: [{prefix: pub, mode: optional}]\n")); err == nil || !strings.Contains(err.Error(), "proxy.yaml:6: routes[0].prefix") {
		t.Errorf("bad reload: %v", err)
	}
	if s := status("/x"); s != 401 {
		t.Errorf("after a refused reload: %d, want 401 (the rules in force kept)", s)
	}
	if p.Config().Listen != DefaultListen {
		t.Errorf("listen changed by a reload: %q", p.Config().Listen)
	}
}

// TestEmbeddedMiddleware: an Embedded build wraps the caller's handler.
func TestEmbeddedMiddleware(t *testing.T) {
	c, err := Parse("proxy.yaml", []byte("authorities: [api.example.com]\ntrust: {hosts: [a.example]}\nroutes: [{prefix: /pub/, mode: optional}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Build(context.Background(), c, Options{Embedded: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Handler() != nil {
		t.Error("an embedded build has a proxy handler")
	}
	h := p.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("app")) }))
	for path, want := range map[string]int{"/x": 401, "/pub/x": 200, "/pub/../x": 400, "/pub//x": 400} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "http://api.example.com"+path, nil))
		if rec.Code != want {
			t.Errorf("unsigned %s: %d, want %d", path, rec.Code, want)
		}
	}
}

// TestBucketsPerAgentKey: limits.buckets_per_agent reaches the limiter's
// knob and a negative value is named by file, line and key.
func TestBucketsPerAgentKey(t *testing.T) {
	c, err := Parse("proxy.yaml", []byte(base+"limits:\n  agent: 10/1m\n  key_header: Signed-Agent-Metadata\n  buckets_per_agent: 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := c.Validate()
	if err != nil || plan.Rules.BucketsPer != 4 {
		t.Errorf("plan %+v, %v: want 4 buckets per agent", plan, err)
	}
	if err := parseAndValidate(t, base+"limits:\n  agent: 10/1m\n  buckets_per_agent: -1\n"); err == nil || !strings.Contains(err.Error(), "proxy.yaml:6: limits.buckets_per_agent: -1: want a positive number") {
		t.Errorf("negative buckets: %v", err)
	}
}

// TestHostileFiles: a file crafted to cost (an alias bomb, deep nesting) is
// refused quickly, and a value's echo in an error is bounded.
func TestHostileFiles(t *testing.T) {
	bomb := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for i := range 12 {
		name := string(rune('b' + i))
		bomb += name + ": &" + name + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n"
		prev = name
	}
	bomb += "authorities: *" + prev + "\n"
	if _, err := Parse("proxy.yaml", []byte(bomb)); err == nil {
		t.Error("alias bomb accepted")
	}
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	if _, err := Parse("proxy.yaml", []byte("authorities: "+deep+"\n")); err == nil {
		t.Error("deep nesting accepted")
	}
	long := strings.Repeat("x", 100000)
	for _, body := range []string{"mode: [" + long + "]\n", long + ": 1\n"} {
		_, err := Parse("proxy.yaml", []byte(body))
		if err == nil || len(err.Error()) > 1000 {
			t.Errorf("a long value's or key's error is %d bytes", len(err.Error()))
		}
	}
}

// TestTrustHintsBounded: a client choosing a new Signature-Agent host for
// every request gets at most maxTrustHints lines into the log.
func TestTrustHintsBounded(t *testing.T) {
	var buf strings.Builder
	h := &trustHints{logger: slog.New(slog.NewTextHandler(&buf, nil)), key: "--trust", seen: map[string]bool{}}
	for i := range 3 * maxTrustHints {
		ue := &keyfetch.UntrustedError{Host: fmt.Sprintf("agent-%d.evil.example:8443", i), Reason: keyfetch.ReasonUntrustedHost, Patterns: []string{"*.evil.example"}}
		h.observe(middleware.Result{Outcome: middleware.OutcomeUnverified, Err: &middleware.Error{Code: middleware.CodeUntrustedAgent, Err: ue}})
	}
	if n := strings.Count(buf.String(), "\n"); n != maxTrustHints {
		t.Errorf("%d lines, want %d", n, maxTrustHints)
	}
	if !strings.Contains(buf.String(), `hint="--trust *.evil.example matches agent-0.evil.example on the scheme's default port only, not :8443: write *.evil.example:* (any port) or agent-0.evil.example:8443"`) {
		t.Errorf("log:\n%.400s", buf.String())
	}
}

// TestValidationErrorsMaskSecrets: an upstream, agentid service or
// registry refused for carrying credentials is named in the error without
// its password.
func TestValidationErrorsMaskSecrets(t *testing.T) {
	c, err := Parse("proxy.yaml", []byte("upstream: http://u:up-s3cret@127.0.0.1:8000\nauthorities: [api.example.com]\n"+
		"agentid_services: [\"https://x:svc-s3cret@svc.example\"]\n"+
		"trust:\n  hosts: [a.example]\n  registries: [\"https://y:reg-s3cret@reg.example/list\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Validate()
	if err == nil {
		t.Fatal("credentials in upstream, agentid_services and registries were accepted")
	}
	for _, secret := range []string{"up-s3cret", "svc-s3cret", "reg-s3cret"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error shows %q: %v", secret, err)
		}
	}
	// A message of another package quoting a URL cut by signer.Truncate (64
	// bytes), or escaped by %q, is masked too.
	long := "https://reg.example/list?token=reg-s3cret-" + strings.Repeat("x", 64) + "\"q"
	c.Trust.Registries = []string{long}
	for _, msg := range []string{fmt.Sprintf("entry %q: refused", signer.Truncate(long)), fmt.Sprintf("entry %q: refused", long), "entry " + long} {
		if got := c.maskSecrets(msg); strings.Contains(got, "s3cret") || !strings.Contains(got, "token=xxxxx") {
			t.Errorf("maskSecrets(%q) = %q", msg, got)
		}
	}
	for _, key := range []string{"upstream", "agentid_services", "registries"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("the error does not name %s: %v", key, err)
		}
	}
}

// TestReloadKeepsServices: agentid_services needs a restart, and the
// uid rules read it: a file that drops the services but keeps allow.uids,
// or names other services, is refused, and the services in force stay.
func TestReloadKeepsServices(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer up.Close()
	head := "upstream: " + up.URL + "\nauthorities: [api.example.com]\ntrust: {hosts: [\"*.svc.example\"]}\naccess_log: \"off\"\n"
	uids := "allow: {uids: [\"agent-*\"]}\n"
	c, err := Parse("proxy.yaml", []byte(head+"agentid_services: [\"https://svc.example\"]\n"+uids))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Build(context.Background(), c, Options{Reloadable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, body := range []string{head + uids, head + "agentid_services: [\"https://other.svc.example\"]\n" + uids} {
		next, err := Parse("proxy.yaml", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Reload(next); err == nil || !strings.Contains(err.Error(), "agentid_services") {
			t.Errorf("reload of\n%s: %v, want refused naming agentid_services", body, err)
		}
		if got := p.Config().AgentidServices; len(got) != 1 || got[0] != "https://svc.example" {
			t.Errorf("agentid_services after a refused reload: %v, want the running one", got)
		}
	}
}
