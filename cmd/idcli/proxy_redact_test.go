package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestProxyRedactsURLCredentials: what `idcli proxy` prints or logs of
// the URLs it is configured with (the effective configuration of
// --check, its errors, the banner, a registry's refresh failures) never
// shows a credential a URL carries in its query, however the parameter is
// spelled, nor in its user information or fragment. Every secret of the
// test starts with "s3cret".
func TestProxyRedactsURLCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("proxy.yaml", `upstream: http://127.0.0.1:8000/?api_key=s3cret-upstream
authorities: [api.example.com]
redis_url: redis://127.0.0.1:1/0?password=s3cret-redis
trust:
  hosts: [registry.example]
  registries:
    - https://registry.example/a.txt?token=s3cret-a
    - https://registry.example/b.txt?TOKEN=s3cret-b
    - https://registry.example/c.txt?%74oken=s3cret-c
    - https://registry.example/d.txt?token=s3cret-d1&token=s3cret-d2
    - https://registry.example/e.txt?v=1;sig=s3cret-e
    - https://registry.example/f.txt?s3cret-f
    - https://registry.example/g.txt?Access_Token=s3cret-g
`)
	r := runCLI(t.Context(), dir, nil, "proxy", "--config", "proxy.yaml", "--check", "--upstream", "http://127.0.0.1:8001/?api_key=s3cret-flag")
	if r.err != nil {
		t.Fatalf("--check: %v\n%s", r.err, r.stderr)
	}
	for _, want := range []string{
		"upstream: http://127.0.0.1:8001/?api_key=xxxxx\n",
		"redis_url: redis://127.0.0.1:1/0?password=xxxxx\n",
		"https://registry.example/a.txt?token=xxxxx\n",
		"https://registry.example/b.txt?TOKEN=xxxxx\n",
		"https://registry.example/c.txt?%74oken=xxxxx\n",
		"https://registry.example/d.txt?token=xxxxx&token=xxxxx\n",
		"https://registry.example/e.txt?v=xxxxx;sig=xxxxx\n",
		"https://registry.example/f.txt?xxxxx\n",
		"https://registry.example/g.txt?Access_Token=xxxxx\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--check printed\n%s\nwithout %q", r.stdout, want)
		}
	}
	if strings.Contains(r.stdout+r.stderr, "s3cret") {
		t.Errorf("--check printed a secret:\n%s\n%s", r.stdout, r.stderr)
	}

	// Refused values are quoted in the errors, some cut to 64 bytes: the
	// cut must not leave part of a secret either.
	write("bad.yaml", `upstream: http://127.0.0.1:8000/#s3cret-fragment
authorities: [api.example.com]
agentid_services: ["https://svc.example/?token=s3cret-service"]
redis_url: http://u:s3cret-redis@127.0.0.1:1/0
trust:
  hosts: [registry.example]
  registries:
    - https://other.example/list.txt?token=s3cret-untrusted-and-long-enough-to-be-cut
    - https://registry.example/x.txt#access_token=s3cret-fragment2
    - https://s3cret-user:s3cret-password@registry.example/y.txt
`)
	r = runCLI(t.Context(), dir, nil, "proxy", "--config", "bad.yaml", "--check")
	if r.err == nil {
		t.Fatalf("--check of a bad file passed:\n%s", r.stdout)
	}
	for _, key := range []string{"upstream", "agentid_services[0]", "redis_url", "trust.registries"} {
		if !strings.Contains(r.err.Error(), key) {
			t.Errorf("the errors do not name %s:\n%v", key, r.err)
		}
	}
	if strings.Contains(r.err.Error()+r.stdout+r.stderr, "s3cret") {
		t.Errorf("--check of a bad file printed a secret:\n%v\n%s%s", r.err, r.stdout, r.stderr)
	}

	// A running proxy: the banner names the upstream, and a registry that
	// fails is logged at each refresh.
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	t.Cleanup(reg.Close)
	up := newEchoUpstream(t)
	regHost := strings.TrimPrefix(reg.URL, "http://")
	_, b := startProxy(t, "--upstream", up.URL+"/?key=s3cret-upstream", "--access-log", "off",
		"--trust", regHost, "--allow-http", "--allow-private", "--registry", reg.URL+"/list.txt?Token=s3cret-registry&v=2")
	waitForStderr(t, b, regexp.MustCompile(`registry list refused`))
	out := b.stderr.String()
	if strings.Contains(out, "s3cret") {
		t.Errorf("the proxy logged a secret:\n%s", out)
	}
	for _, want := range []string{"→ upstream " + up.URL + "/?key=xxxxx", "/list.txt?Token=xxxxx&v=xxxxx"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
}
