package proxyconfig

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReloadRefuses is the table of Reload's rules: a file caught empty or
// cut short by an in-place rewrite (still valid YAML or not), one that
// would not start, one that changes a key needing a restart, are refused,
// and the configuration in force stays whole (the /admin/ route keeps
// refusing unsigned requests); the edits an operator makes (an entry
// removed, a list cleared with [], a key added, the file reordered with
// comments, CRLF line ends) apply.
func TestReloadRefuses(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer up.Close()
	head := "upstream: " + up.URL + "\nauthorities: [api.example.com]\ntrust: {hosts: [\"*.example\"]}\naccess_log: \"off\"\n"
	rules := "mode: optional\nroutes:\n  - {prefix: /admin/, mode: required}\ndeny:\n  hosts: [bad.example]\nallow:\n  hosts:\n    - a.example\n    - good.example\n"
	full := head + rules
	build := func(t *testing.T) *Proxy {
		t.Helper()
		c, err := Parse("proxy.yaml", []byte(full))
		if err != nil {
			t.Fatal(err)
		}
		p, err := Build(context.Background(), c, Options{Reloadable: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	status := func(p *Proxy, path string) int {
		rec := httptest.NewRecorder()
		p.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "http://api.example.com"+path, nil))
		return rec.Code
	}
	cut := func(s, before string) string { return s[:strings.Index(s, before)] }

	refused := []struct{ name, body, want string }{
		{"empty", "", "proxy.yaml is empty (or only comments): leaves out keys the file in force sets: upstream (was proxy.yaml:1), authorities (was proxy.yaml:2), trust.hosts (was proxy.yaml:3), mode (was proxy.yaml:5), access_log (was proxy.yaml:4), routes (was proxy.yaml:7), allow.hosts (was proxy.yaml:12), deny.hosts (was proxy.yaml:9): "},
		{"comments only", "# being rewritten\n", "proxy.yaml is empty (or only comments): leaves out keys"},
		{"cut after a line, still valid", cut(full, "allow:"), "leaves out keys the file in force sets: allow.hosts (was proxy.yaml:12): a file cut short"},
		{"cut after a key's name", cut(full, "    - a.example"), "allow.hosts (was proxy.yaml:12)"},
		{"no final newline", strings.TrimSuffix(full, "\n"), "proxy.yaml: does not end with a newline"},
		{"cut inside a value", full[:len(full)-8], "proxy.yaml: does not end with a newline"},
		{"would not start", strings.Replace(full, "upstream: "+up.URL, "upstream: ftp://files.example", 1), `proxy.yaml:1: upstream: "ftp://files.example": want an http:// or https:// URL`},
		{"bad rule", strings.Replace(full, "mode: required}", "mode: requierd}", 1), `proxy.yaml:7: routes[0].mode: "requierd"`},
		{"restart-only key changed", strings.Replace(full, "[api.example.com]", "[api.example.com, www.example.com]", 1), "proxy.yaml changes keys that take effect only on a restart: authorities: nothing was applied"},
		{"restart-only key added", full + "refusal_status: 403\nlog_level: debug\n", "take effect only on a restart: refusal_status, log_level:"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			p := build(t)
			before := p.Config().Effective()
			c, err := Parse("proxy.yaml", []byte(tc.body))
			if err == nil {
				err = p.Reload(c)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Reload: %v\nwant it refused with %q", err, tc.want)
			}
			if after := p.Config().Effective(); after != before {
				t.Errorf("the configuration in force changed:\n%s\nwant\n%s", after, before)
			}
			if s := status(p, "/admin/x"); s != 401 {
				t.Errorf("unsigned /admin/x after a refused reload: %d, want 401 (the route in force)", s)
			}
		})
	}

	applied := []struct {
		name, body string
		check      func(*Config) bool
	}{
		{"an entry removed", strings.Replace(full, "    - a.example\n", "", 1),
			func(c *Config) bool { return len(c.Allow.Hosts) == 1 }},
		{"a list cleared with []", cut(full, "allow:") + "allow:\n  hosts: []\n",
			func(c *Config) bool { return len(c.Allow.Hosts) == 0 }},
		{"a route removed, the list kept", strings.Replace(full, "  - {prefix: /admin/, mode: required}\n", "  []\n", 1),
			func(c *Config) bool { return len(c.Routes) == 0 }},
		{"a key never set, written with nothing after it", full + "limits:\n",
			func(c *Config) bool { return c.Limits.Agent == "" }},
		{"a key added", full + "limits:\n  agent: 100/1m\n",
			func(c *Config) bool { return c.Limits.Agent == "100/1m" }},
		{"reordered, with comments", "# the proxy\n" + rules + "\n# what a start needs\n" + head,
			func(c *Config) bool { return len(c.Allow.Hosts) == 2 && c.Mode == "optional" }},
		{"CRLF line ends", strings.ReplaceAll(strings.Replace(full, "mode: optional", "mode: required", 1), "\n", "\r\n"),
			func(c *Config) bool { return c.Mode == "required" }},
	}
	for _, tc := range applied {
		t.Run(tc.name, func(t *testing.T) {
			p := build(t)
			c, err := Parse("proxy.yaml", []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Reload(c); err != nil {
				t.Fatalf("Reload: %v, want it applied", err)
			}
			if got := p.Config(); !tc.check(got) {
				t.Errorf("the configuration after the reload:\n%s", got.Effective())
			}
		})
	}
}
