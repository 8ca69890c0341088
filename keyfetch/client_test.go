package keyfetch_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
)

// TestCheckDestination: the startup check of a URL the server will post
// to refuses what NewClient would refuse to dial when the host says so by
// itself (an IP literal, a loopback name), and the forms that are not a
// plain https URL; allowPrivate admits private hosts and plain http.
func TestCheckDestination(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url          string
		allowPrivate bool
		want         string // "" ok, "private", else a substring of the error
	}{
		{"https://hooks.example/agentid", false, ""},
		{"https://hooks.example:8443/a?b=c", false, ""},
		{"HTTPS://Hooks.Example/x", false, ""},
		{"https://93.184.216.34/x", false, ""},
		{"https://[2606:2800:220:1:248:1893:25c8:1946]/x", false, ""},
		{"http://hooks.example/x", false, "plain http"},
		{"http://hooks.example/x", true, ""},
		{"https://127.0.0.1/x", false, "private"},
		{"https://127.0.0.1/x", true, ""},
		{"https://10.1.2.3/x", false, "private"},
		{"https://169.254.169.254/latest/meta-data", false, "private"},
		{"https://[::1]/x", false, "private"},
		{"https://[::ffff:127.0.0.1]/x", false, "private"},
		{"https://[64:ff9b::a00:1]/x", false, "private"},
		{"https://0.0.0.0/x", false, "private"},
		{"https://localhost/x", false, "private"},
		{"https://LocalHost/x", false, "private"},
		{"https://localhost./x", false, "invalid host"},
		{"https://hooks.localhost:9/x", false, "private"},
		{"https://hooks.localhost:9/x", true, ""},
		{"https://user:secret@hooks.example/x", false, "user information"},
		{"https://hooks.example/x#frag", false, "fragment"},
		{"https://hooks.example:/x", false, "empty port"},
		{"https://hooks.example:99999/x", false, "invalid port"},
		{"ftp://hooks.example/x", false, "scheme"},
		{"hooks.example/x", false, "absolute"},
		{"/relative", false, "absolute"},
		{"https://bad_host!/x", false, "invalid host"},
		{"https://[fe80::1%25eth0]/x", true, "zoned"},
		{"", false, "absolute"},
		{"http://hooks.slack.com/services/T0/B0/secretXyZ", false, "plain http"},
		{"https://10.0.0.1/api/webhooks/1/secret-token", false, "private"},
		{"ftp://discord.com/api/webhooks/1/secret-token", false, "scheme"},
		{"discord.com/api/webhooks/1/secret-token", false, "absolute"},
	}
	for _, tt := range tests {
		err := keyfetch.CheckDestination(tt.url, tt.allowPrivate)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckDestination(%q, %v) = %v, want nil", tt.url, tt.allowPrivate, err)
		case tt.want == "":
		case err == nil:
			t.Errorf("CheckDestination(%q, %v) = nil, want an error (%s)", tt.url, tt.allowPrivate, tt.want)
		case tt.want == "private" && !errors.Is(err, keyfetch.ErrPrivateAddress):
			t.Errorf("CheckDestination(%q, %v) = %v, want ErrPrivateAddress", tt.url, tt.allowPrivate, err)
		case tt.want != "private" && !strings.Contains(err.Error(), tt.want):
			t.Errorf("CheckDestination(%q, %v) = %v, want it to mention %q", tt.url, tt.allowPrivate, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("CheckDestination(%q) error shows the password or the path's secret: %v", tt.url, err)
		}
	}
}

// loopbackName returns a name other than localhost that the system
// resolver maps to a loopback address (the machine's own name usually
// is), or skips the test.
func loopbackName(t *testing.T) string {
	t.Helper()
	name, err := os.Hostname()
	if err != nil || name == "" || strings.Contains(strings.ToLower(name), "localhost") {
		t.Skipf("no host name to resolve (%q, %v)", name, err)
	}
	addrs, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip4", name)
	if err != nil || len(addrs) == 0 || !addrs[0].IsLoopback() {
		t.Skipf("the host name %q does not resolve to loopback here (%v, %v)", name, addrs, err)
	}
	return name
}

// TestNewClientRefusesPrivateAtDial: NewClient without allowPrivate
// connects to no loopback address, whether the URL names it, names
// localhost, or names a host the resolver maps to it; with allowPrivate
// it connects.
func TestNewClientRefusesPrivateAtDial(t *testing.T) {
	t.Parallel()
	srv := newDirServer(t, serveKeys("", ""))
	srv.handle("/hook", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	urls := map[string]string{
		"ip literal": "http://127.0.0.1:" + port + "/hook",
		"localhost":  "http://localhost:" + port + "/hook",
	}
	t.Run("resolved name", func(t *testing.T) {
		urls := map[string]string{"resolved name": "http://" + loopbackName(t) + ":" + port + "/hook"}
		checkPrivate(t, srv, urls)
	})
	checkPrivate(t, srv, urls)
}

func checkPrivate(t *testing.T, srv *dirServer, urls map[string]string) {
	for name, u := range urls {
		before := srv.accepts.Load()
		res, err := keyfetch.NewClient(false, 2*time.Second).Post(u, "application/json", strings.NewReader("{}"))
		if err == nil {
			res.Body.Close()
			t.Errorf("%s: POST %s without allowPrivate = %d, want refused", name, u, res.StatusCode)
		} else if !errors.Is(err, keyfetch.ErrPrivateAddress) {
			t.Errorf("%s: POST %s error = %v, want ErrPrivateAddress", name, u, err)
		}
		if n := srv.accepts.Load() - before; n != 0 {
			t.Errorf("%s: %d connections accepted, want 0", name, n)
		}
		res, err = keyfetch.NewClient(true, 2*time.Second).Post(u, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Errorf("%s: POST %s with allowPrivate: %v", name, u, err)
			continue
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNoContent {
			t.Errorf("%s: POST %s with allowPrivate = %d, want 204", name, u, res.StatusCode)
		}
	}
}

// TestNewClientFollowsNoRedirect: a redirect is the answer, its target is
// never requested (it could be a private address the first host chose).
func TestNewClientFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	target := newDirServer(t, serveKeys("", ""))
	srv := newDirServer(t, serveKeys("", ""))
	srv.handle("/hook", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/elsewhere", http.StatusTemporaryRedirect)
	})
	res, err := keyfetch.NewClient(true, 2*time.Second).Post(srv.URL+"/hook", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusTemporaryRedirect || target.hits.Load() != 0 {
		t.Errorf("POST answered %d, target hit %d times; want 307 and 0", res.StatusCode, target.hits.Load())
	}
}
