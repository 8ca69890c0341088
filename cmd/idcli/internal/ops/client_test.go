package ops

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// token is a well-formed operator token (unknown to any server).
const token = "aidop_0123456789abcdefghijklmnopqrstuvwxyzABCDEFA"

// TestParseServer: --server is the service's URL alone; plain http only
// to this machine, whatever the spelling of the host.
func TestParseServer(t *testing.T) {
	for raw, want := range map[string]string{
		"https://agentid.example":      "https://agentid.example",
		"https://agentid.example/":     "https://agentid.example",
		"HTTPS://agentid.example:8443": "https://agentid.example:8443",
		"http://localhost:3000":        "http://localhost:3000",
		"http://LOCALHOST:3000":        "http://LOCALHOST:3000",
		"http://127.0.0.1:3000":        "http://127.0.0.1:3000",
		"http://[::1]:3000":            "http://[::1]:3000",
		"http://agentid.localhost":     "http://agentid.localhost",
	} {
		if got, err := parseServer(raw); err != nil || got != want {
			t.Errorf("parseServer(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for raw, want := range map[string]string{
		"agentid.example":                      "did you mean https://agentid.example?",
		"localhost:3000":                       "did you mean http://localhost:3000?",
		"ftp://agentid.example":                "want the service's URL",
		"https://":                             "want the service's URL",
		"http://agentid.example":               "plain http would send the operator token in clear",
		"http://0.0.0.0:3000":                  "plain http",
		"http://127.0.0.1.nip.io":              "plain http",
		"http://localhost.:3000":               "plain http",
		"http://localhost@agentid.example":     "without user",
		"https://user:pass@agentid.example":    "without user",
		"https://agentid.example/admin/v1":     "without user, path or query",
		"https://agentid.example/?x=1":         "without user, path or query",
		"https://agentid.example/#frag":        "without user, path or query",
		"https://agentid.example\n/x":          "want the service's URL",
		"https://agentid.example:99999999999/": "want the service's URL",
	} {
		_, err := parseServer(raw)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseServer(%q) = %v, want an error with %q", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "pass") {
			t.Errorf("parseServer(%q) repeats the user info: %v", raw, err)
		}
	}
}

// TestReadToken: the token file wins over the variable; surrounding
// whitespace (a trailing newline, CRLF) is trimmed; anything but one
// token is refused without being repeated; a file others may read is
// warned about; a FIFO, a directory or a huge file is refused without
// blocking or reading it all.
func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == TokenEnv {
				return v
			}
			return ""
		}
	}
	write := func(name, content string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("ok", token+"\n", 0o600)
	write("crlf", token+"\r\n", 0o400)
	write("open", token, 0o644)
	write("two", token+"\n"+token+"\n", 0o600)
	write("key", `{"kty":"OKP","crv":"Ed25519","d":"secret-part","x":"…"}`, 0o600)
	write("big", strings.Repeat("a", maxTokenFile+1), 0o600)
	if err := os.Symlink(filepath.Join(dir, "ok"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		env, file string
		warn      bool
	}{
		{env: token}, {env: " " + token + "\n"}, {file: "ok"}, {file: "crlf"}, {file: "link"},
		{env: "aidop_other", file: "ok"}, {file: filepath.Join(dir, "ok")}, {file: "open", warn: true},
	} {
		var warn bytes.Buffer
		got, err := readToken(env(c.env), dir, c.file, &warn)
		if err != nil || got != token {
			t.Errorf("readToken(env %q, file %q) = %q, %v", c.env, c.file, got, err)
		}
		if w := strings.Contains(warn.String(), "may be read by other users (mode 0644)"); w != c.warn {
			t.Errorf("readToken(file %q): warning %q, want one: %v", c.file, warn.String(), c.warn)
		}
	}
	for _, c := range []struct{ env, file, want string }{
		{"", "", "no operator token: set AGENTID_OPERATOR_TOKEN or give --token-file PATH"},
		{"aidop_short", "", "AGENTID_OPERATOR_TOKEN does not hold an operator token"},
		{token + "x", "", "does not hold an operator token"},
		{"Bearer " + token, "", "does not hold an operator token"},
		{token, "two", "--token-file " + filepath.Join(dir, "two") + " does not hold an operator token"},
		{token, "key", "does not hold an operator token"},
		{token, "big", "is over 4096 bytes"},
		{token, "fifo", "is not a regular file"},
		{token, ".", "is not a regular file"},
		{token, "missing", "no such file"},
		{"", token, "--token-file takes the path of a file holding the token, not the token"},
		{"", " " + token, "not the token"},
	} {
		got, err := readToken(env(c.env), dir, c.file, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("readToken(env %q, file %q) = %q, %v; want an error with %q", c.env, c.file, got, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), token[6:16]) || strings.Contains(err.Error(), "secret-part")) {
			t.Errorf("the error repeats what it read: %v", err)
		}
	}
}

// TestHostileServer: what a server at --server answers cannot make the
// client follow a redirect with the token, print control characters or
// the token, or read an answer without bound.
func TestHostileServer(t *testing.T) {
	var gotAuth []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = append(gotAuth, r.Header.Get("Authorization"))
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/admin/v1/redirect":
			http.Redirect(w, r, other.URL+"/admin/v1/agents", http.StatusTemporaryRedirect)
		case "/admin/v1/echo":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":{"status":400,"code":"bad\u001b[2J","message":"you sent ` + r.Header.Get("Authorization") + `\u001b]0;pwned\u0007\nsecond line"}}`))
		case "/admin/v1/scope":
			w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="agents:write"`)
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"error":{"status":403,"code":"insufficient_scope","message":"no"}}`))
		case "/admin/v1/html":
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte("<html>bad gateway</html>"))
		case "/admin/v1/huge":
			w.Write([]byte(`{"agents":[`))
			for range maxAnswer / 64 {
				w.Write([]byte(`{"uid":"agent-000000000000000000000000","active_keys":1},         `))
			}
			w.Write([]byte(`]}`))
		}
	}))
	defer srv.Close()
	c := newClient(srv.URL, token)
	ctx := context.Background()
	call := func(path string) error {
		var out any
		return c.call(ctx, http.MethodGet, path, nil, nil, &out, "agents:read")
	}

	if err := call("/redirect"); err == nil || !strings.Contains(err.Error(), "a redirect to "+other.URL) || len(gotAuth) != 0 {
		t.Errorf("redirect: %v; the token was sent to the redirect's target: %v", err, len(gotAuth) != 0)
	}
	err := call("/echo")
	if err == nil || strings.Contains(err.Error(), token) || strings.ContainsAny(err.Error(), "\x1b\x07\n") ||
		!strings.Contains(err.Error(), "you sent Bearer [token]") {
		t.Errorf("an answer echoing the token with control characters: %q", err)
	}
	if err := call("/scope"); err == nil || !strings.HasPrefix(err.Error(), "the operator token lacks the scope agents:write:") {
		t.Errorf("403 insufficient_scope: %v", err)
	}
	if err := call("/html"); err == nil || !strings.Contains(err.Error(), "502 Bad Gateway, not the admin API's JSON") {
		t.Errorf("an HTML 502: %v", err)
	}
	if err := call("/huge"); err == nil || !strings.Contains(err.Error(), "the answer is over 16 MiB") {
		t.Errorf("a huge answer: %v", err)
	}
}

// TestLocalhostNamesStayOnLoopback: a --server under .localhost is dialed
// on loopback, never resolved (a resolver may ask DNS, and plain http
// would carry the token off the machine), and plain http is never sent
// to a proxy the environment names.
func TestLocalhostNamesStayOnLoopback(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Host + " " + r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	_, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "http://"), ":")
	// A name no resolver knows: only the dialer's own rule reaches srv.
	server := "http://no-such-host-" + port + ".agentid.localhost:" + port
	c := newClient(server, token)
	var out any
	if err := c.call(context.Background(), http.MethodGet, "/agents", nil, nil, &out, "agents:read"); err != nil {
		t.Fatalf("call to %s: %v", server, err)
	}
	if want := strings.TrimPrefix(server, "http://") + " Bearer " + token; got != want {
		t.Errorf("server saw %q, want %q", got, want)
	}
	if tr := c.http.Transport.(*http.Transport); tr.Proxy != nil {
		t.Error("plain http may go through a proxy from the environment")
	}
	if tr := newClient("https://agentid.example", token).http.Transport.(*http.Transport); tr.Proxy == nil {
		t.Error("https ignores the environment's proxy")
	}
}
