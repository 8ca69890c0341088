package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer/signertest"
)

// echoServers are two loopback servers behind the verification middleware,
// sharing one key source and one replay store (so a hop that reused a nonce
// would be refused). Server a redirects to server b.
type echoServers struct {
	a, b *httptest.Server
	mu   sync.Mutex
	hops []string // "<authority> <method> <path> <nonce>" of each verified request
}

func newEchoServers(t *testing.T, dir string) *echoServers {
	t.Helper()
	k := signertest.Key(20)
	uid := "agent-0123456789abcdef01234567"
	keys := middleware.NewStaticKeys()
	keys.Add("http://"+uid+".localhost:3000", k.Public)
	e := &echoServers{}
	// Each server answers for its own address only; the two share one
	// replay store.
	e.a = httptest.NewServer(nil)
	e.b = httptest.NewServer(nil)
	t.Cleanup(e.a.Close)
	t.Cleanup(e.b.Close)
	replay := middleware.NewMemoryReplayStore()
	mw := func(srv *httptest.Server) func(http.Handler) http.Handler {
		return mustNew(t, middleware.Config{Keys: keys, Replay: replay, Authorities: []string{srv.Listener.Addr().String()}}).Middleware
	}
	handler := func(w http.ResponseWriter, r *http.Request) {
		ag, _ := middleware.AgentFrom(r.Context())
		e.mu.Lock()
		e.hops = append(e.hops, fmt.Sprintf("%s %s %s %s", r.Host, r.Method, r.URL.Path, ag.Nonce))
		e.mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/echo":
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]string{
				"method": r.Method, "content_type": r.Header.Get("Content-Type"), "body": string(body),
				"x_test": r.Header.Get("X-Test"), "uid": ag.UID, "host": r.Host,
			})
		case "/text":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, "{not json} plain text\n")
		case "/fail":
			middleware.WriteError(w, r, middleware.Fail(middleware.CodeInvalidRequest, "nope"))
		case "/redirect":
			http.Redirect(w, r, e.b.URL+"/echo", http.StatusFound)
		case "/redirect307":
			http.Redirect(w, r, e.b.URL+"/echo", http.StatusTemporaryRedirect)
		default:
			http.NotFound(w, r)
		}
	}
	e.a.Config.Handler = mw(e.a)(http.HandlerFunc(handler))
	e.b.Config.Handler = mw(e.b)(http.HandlerFunc(handler))
	content := "AGENT_UID=" + uid + "\nAGENT_PRIVATE_JWK='" + string(k.MarshalPrivateJWK()) + "'\n"
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestAgentCurl(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       func(a, b string) []string
		wantExit22 bool
		wantStdout func(a, b string) string // exact, when set
		wantIn     []string                 // substrings of stdout
		wantErrIn  []string                 // substrings of stderr
		wantHops   func(a, b string) []string
	}{
		{
			name:       "GET prints the body as is",
			args:       func(a, b string) []string { return []string{a + "/echo"} },
			wantStdout: func(a, b string) string { return echo("GET", "", "", "", a) + "\n" },
			wantHops:   func(a, b string) []string { return []string{a + " GET /echo"} },
		},
		{
			name: "--pp indents JSON",
			args: func(a, b string) []string { return []string{a + "/echo", "--pp"} },
			wantStdout: func(a, b string) string {
				return "{\n  \"body\": \"\",\n  \"content_type\": \"\",\n  \"host\": \"" + a + "\",\n  \"method\": \"GET\",\n  \"uid\": \"agent-0123456789abcdef01234567\",\n  \"x_test\": \"\"\n}\n"
			},
		},
		{
			name:       "-d posts JSON",
			args:       func(a, b string) []string { return []string{a + "/echo", "-d", `{"a":1}`} },
			wantStdout: func(a, b string) string { return echo("POST", "application/json", `{"a":1}`, "", a) + "\n" },
		},
		{
			name:       "-X and -H after the URL",
			args:       func(a, b string) []string { return []string{a + "/echo", "-X", "PUT", "-d", `{}`, "-H", "X-Test: yes"} },
			wantStdout: func(a, b string) string { return echo("PUT", "application/json", `{}`, "yes", a) + "\n" },
		},
		{
			name:       "non-JSON printed as is with --pp",
			args:       func(a, b string) []string { return []string{"--pp", a + "/text"} },
			wantStdout: func(a, b string) string { return "{not json} plain text\n" },
		},
		{
			name:       "400 exits 22 and prints the body",
			args:       func(a, b string) []string { return []string{a + "/fail"} },
			wantExit22: true,
			wantIn:     []string{`"code":"invalid_request"`},
			wantErrIn:  []string{"400"},
		},
		{
			name:       "404 exits 22",
			args:       func(a, b string) []string { return []string{a + "/missing"} },
			wantExit22: true,
		},
		{
			name:   "-i prints the status line and headers",
			args:   func(a, b string) []string { return []string{"-i", a + "/echo"} },
			wantIn: []string{"HTTP/1.1 200 OK\n", "Content-Type: application/json\n", "\n\n{\"body\""},
		},
		{
			name:      "-v prints the signed request to stderr",
			args:      func(a, b string) []string { return []string{a + "/echo", "-v"} },
			wantErrIn: []string{"> GET /echo HTTP/1.1\n", "> Host: ", "> Signature-Input: sig1=(\"@authority\" \"signature-agent\";key=\"sig1\")", "> Signature-Agent: sig1=\"http://agent-0123456789abcdef01234567.localhost:3000\"", "< HTTP/1.1 200 OK"},
		},
		{
			name:      "--standards covers signature-agent",
			args:      func(a, b string) []string { return []string{a + "/echo", "-v", "--standards"} },
			wantErrIn: []string{`> Signature-Input: sig1=("@authority" "signature-agent";key="sig1")`},
		},
		{
			name:      "--legacy signs only @authority",
			args:      func(a, b string) []string { return []string{a + "/echo", "-v", "--legacy"} },
			wantErrIn: []string{`> Signature-Input: sig1=("@authority");`, `> Signature-Agent: sig1="http://agent-0123456789abcdef01234567.localhost:3000"`},
		},
		{
			name: "--metadata sends and covers Signed-Agent-Metadata",
			args: func(a, b string) []string {
				return []string{a + "/echo", "-v", "--metadata", "operator=Example", "--metadata", "contact=ops@example.com"}
			},
			wantErrIn: []string{`> Signature-Input: sig1=("@authority" "signature-agent";key="sig1" "signed-agent-metadata");`, `> Signed-Agent-Metadata: contact="ops@example.com", operator="Example"`},
		},
		{
			name: "--components signs the named components",
			args: func(a, b string) []string {
				return []string{a + "/echo", "-v", "--components", "@method,@authority,@path"}
			},
			wantErrIn: []string{`> Signature-Input: sig1=("@method" "@authority" "@path" "signature-agent";key="sig1");`, "< HTTP/1.1 200 OK"},
		},
		{
			name: "--components with content-digest sends and signs the body's digest",
			args: func(a, b string) []string {
				return []string{a + "/echo", "-v", "-d", `{"a":1}`, "--components", "@method,@authority,@path,content-digest"}
			},
			wantStdout: func(a, b string) string { return echo("POST", "application/json", `{"a":1}`, "", a) + "\n" },
			wantErrIn:  []string{`> Signature-Input: sig1=("@method" "@authority" "@path" "content-digest" "signature-agent";key="sig1");`, "> Content-Digest: sha-256=:"},
		},
		{
			name:       "redirect: each hop signed afresh",
			args:       func(a, b string) []string { return []string{a + "/redirect"} },
			wantStdout: func(a, b string) string { return echo("GET", "", "", "", b) + "\n" },
			wantHops:   func(a, b string) []string { return []string{a + " GET /redirect", b + " GET /echo"} },
		},
		{
			name:       "307 redirect keeps method and body, signed afresh",
			args:       func(a, b string) []string { return []string{a + "/redirect307", "-d", `{"x":2}`} },
			wantStdout: func(a, b string) string { return echo("POST", "application/json", `{"x":2}`, "", b) + "\n" },
			wantHops:   func(a, b string) []string { return []string{a + " POST /redirect307", b + " POST /echo"} },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			e := newEchoServers(t, dir)
			a, b := strings.TrimPrefix(e.a.URL, "http://"), strings.TrimPrefix(e.b.URL, "http://")
			args := tt.args(e.a.URL, e.b.URL)
			res := runCLI(t.Context(), dir, nil, append([]string{"agent", "curl"}, args...)...)
			if tt.wantExit22 {
				if !errors.Is(res.err, exitCode(22)) {
					t.Errorf("err = %v, want exit code 22", res.err)
				}
			} else if res.err != nil {
				t.Fatalf("err = %v\nstdout %s\nstderr %s", res.err, res.stdout, res.stderr)
			}
			if tt.wantStdout != nil {
				if want := tt.wantStdout(a, b); res.stdout != want {
					t.Errorf("stdout = %q, want %q", res.stdout, want)
				}
			}
			for _, w := range tt.wantIn {
				if !strings.Contains(res.stdout, w) {
					t.Errorf("stdout = %q, want it to contain %q", res.stdout, w)
				}
			}
			for _, w := range tt.wantErrIn {
				if !strings.Contains(res.stderr, w) {
					t.Errorf("stderr = %q, want it to contain %q", res.stderr, w)
				}
			}
			if strings.Contains(res.stdout+res.stderr, signertest.Key(20).JWK().D) {
				t.Error("output contains the private key")
			}
			if tt.wantHops != nil {
				want := tt.wantHops(a, b)
				e.mu.Lock()
				hops := append([]string(nil), e.hops...)
				e.mu.Unlock()
				nonces := map[string]bool{}
				for i, h := range hops {
					f := strings.Fields(h)
					if i < len(want) && strings.Join(f[:3], " ") != want[i] || len(f) != 4 {
						t.Errorf("hop %d = %q, want %q and a nonce", i, h, want[i])
						continue
					}
					nonces[f[3]] = true
				}
				if len(hops) != len(want) || len(nonces) != len(want) {
					t.Errorf("verified hops = %q, want %q, each with its own nonce", hops, want)
				}
			}
		})
	}
}

// echo is the compact JSON the echo handler writes (keys sorted).
func echo(method, ct, body, xtest, host string) string {
	b, _ := json.Marshal(map[string]string{"method": method, "content_type": ct, "body": body, "x_test": xtest,
		"uid": "agent-0123456789abcdef01234567", "host": host})
	return string(b)
}

func TestAgentCurlUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string // in the error, when set
	}{
		{name: "no scheme", args: []string{"agent", "curl", "localhost:3000/whoami"}, want: "did you mean http://localhost:3000/whoami?"},
		{name: "unknown component", args: []string{"agent", "curl", "http://127.0.0.1:1/", "--components", "@authority,@nope"}, want: `unknown component "@nope"`},
		{name: "no URL", args: []string{"agent", "curl"}},
		{name: "two URLs", args: []string{"agent", "curl", "http://a/", "http://b/"}},
		{name: "relative URL", args: []string{"agent", "curl", "/whoami"}},
		{name: "bad header", args: []string{"agent", "curl", "http://127.0.0.1:1/", "-H", "nocolon"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := credsDir(t, "agent-0123456789abcdef01234567", signertest.Key(21), "")
			res := runCLI(t.Context(), dir, nil, tt.args...)
			if res.err == nil || errors.Is(res.err, exitCode(22)) {
				t.Errorf("err = %v, want a usage error", res.err)
			} else if !strings.Contains(res.err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", res.err, tt.want)
			}
		})
	}
}

// TestAgentCurlHints: error answers whose cause is not in the status get a
// hint on stderr naming it.
func TestAgentCurlHints(t *testing.T) {
	t.Parallel()
	errorAPI := func(status int, contentType, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", contentType)
			w.WriteHeader(status)
			fmt.Fprint(w, body)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	ref := clitest.StartServer(t, clitest.ServerOptions{}) // no --vestauth-compat
	tests := []struct {
		name string
		args []string
		want string // in stderr; "" means no hint
	}{
		{"HTML error page", []string{errorAPI(http.StatusBadGateway, "text/html", "<html><h1>502 Bad Gateway</h1></html>") + "/whoami"}, "answered an HTML page, not a JSON API answer"},
		{"plain-HTTP signature agent refused", []string{errorAPI(http.StatusUnauthorized, "application/json",
			`{"error":{"status":401,"code":"untrusted_signature_agent","message":"signature agent http://agent-0123456789abcdef01234567.localhost:3000 is not trusted","reason":"http_refused"}}`) + "/whoami"},
			"refuses your plain-HTTP signature agent http://agent-0123456789abcdef01234567.localhost:3000"},
		{"untrusted without a reason names both causes", []string{errorAPI(http.StatusUnauthorized, "application/json",
			`{"error":{"status":401,"code":"untrusted_signature_agent","message":"signature agent http://agent-0123456789abcdef01234567.localhost:3000 is not trusted"}}`) + "/whoami"},
			"either its trust patterns do not match that host, or it does not accept plain http://"},
		{"key directory unreachable", []string{errorAPI(http.StatusServiceUnavailable, "application/json",
			`{"error":{"status":503,"code":"key_fetch_failed","message":"the key directory could not be fetched"}}`) + "/whoami"},
			"could not fetch the key directory of http://agent-0123456789abcdef01234567.localhost:3000"},
		{"vestauth's /register without compat", []string{ref.URL + "/register", "-d", "{}"}, "idcli server start --vestauth-compat"},
		{"vestauth's /rotate without compat", []string{ref.URL + "/rotate", "-d", "{}"}, "idcli server start --vestauth-compat"},
		{"plain 401", []string{errorAPI(http.StatusUnauthorized, "application/json", `{"error":{"status":401,"code":"invalid_signature","message":"no"}}`) + "/x"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := credsDir(t, "agent-0123456789abcdef01234567", signertest.Key(22), "")
			res := runCLI(t.Context(), dir, nil, append([]string{"agent", "curl"}, tt.args...)...)
			if !errors.Is(res.err, exitCode(22)) {
				t.Fatalf("err = %v, want exit code 22", res.err)
			}
			if tt.want == "" {
				if strings.Contains(res.stderr, "hint:") {
					t.Errorf("stderr = %q, want no hint", res.stderr)
				}
				return
			}
			if !strings.Contains(res.stderr, "hint: ") || !strings.Contains(res.stderr, tt.want) {
				t.Errorf("stderr = %q, want a hint containing %q", res.stderr, tt.want)
			}
		})
	}
}

// TestAgentCurlHintNamesReason: behind a real verifier (middleware and
// keyfetch), the hint for a refused signature agent names the cause the
// verifier put in the error body's "reason", not always plain HTTP: a
// trust pattern that does not match the host, http not allowed, a private
// address.
func TestAgentCurlHintNamesReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		keys       keyfetch.Config
		wantCode   string
		wantReason keyfetch.Reason
		want       string
		notWant    string
	}{
		{"no trust pattern matches", keyfetch.Config{TrustedHosts: []string{"*.agents.example"}, AllowHTTP: true, AllowPrivateNetworks: true},
			"untrusted_signature_agent", keyfetch.ReasonUntrustedHost, "trust patterns do not match the host of your signature agent", "plain-HTTP"},
		{"http not allowed", keyfetch.Config{TrustedHosts: []string{"*.localhost:*"}, AllowPrivateNetworks: true},
			"untrusted_signature_agent", keyfetch.ReasonHTTPRefused, "refuses your plain-HTTP signature agent", "trust patterns"},
		{"private address", keyfetch.Config{TrustedHosts: []string{"*.localhost:*"}, AllowHTTP: true},
			"key_fetch_failed", keyfetch.ReasonPrivateAddress, "it is on a loopback or private address", "plain-HTTP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The server's address is the authority the requests are signed for.
			srv := httptest.NewUnstartedServer(nil)
			t.Cleanup(srv.Close)
			v, err := middleware.New(middleware.Config{Keys: keyfetch.New(tt.keys), Authorities: []string{srv.Listener.Addr().String()}})
			if err != nil {
				t.Fatal(err)
			}
			srv.Config.Handler = v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintln(w, "verified")
			}))
			srv.Start()
			dir := credsDir(t, "agent-0123456789abcdef01234567", signertest.Key(22), "")
			res := runCLI(t.Context(), dir, nil, "agent", "curl", srv.URL+"/whoami")
			if !errors.Is(res.err, exitCode(22)) {
				t.Fatalf("err = %v, want exit code 22; stdout %q", res.err, res.stdout)
			}
			var body struct {
				Error struct {
					Code   string          `json:"code"`
					Reason keyfetch.Reason `json:"reason"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(res.stdout), &body); err != nil || body.Error.Code != tt.wantCode || body.Error.Reason != tt.wantReason {
				t.Errorf("body = %q (%v), want code %q with reason %q", res.stdout, err, tt.wantCode, tt.wantReason)
			}
			if !strings.Contains(res.stderr, "hint: ") || !strings.Contains(res.stderr, tt.want) || strings.Contains(res.stderr, tt.notWant) {
				t.Errorf("stderr = %q, want a hint containing %q and not %q", res.stderr, tt.want, tt.notWant)
			}
		})
	}
}

// mustNew returns middleware.New(cfg), failing tb on an error.
func mustNew(tb testing.TB, cfg middleware.Config) *middleware.Verifier {
	tb.Helper()
	v, err := middleware.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}
