package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
	"github.com/agentid/agentid/signer/signertest"
)

func fixedKey(b byte) signer.PrivateKey {
	return signertest.Key(b)
}

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// secret returns the d member of k: the text that must never be printed.
func secret(k signer.PrivateKey) string { return k.JWK().D }

// uid returns a valid uid whose hex part repeats c.
func uid(c string) string { return "agent-" + strings.Repeat(c, 24) }

func TestLoadHostname(t *testing.T) {
	t.Parallel()
	priv := string(fixedKey(1).MarshalPrivateJWK())
	tests := []struct {
		in, want string
		wantErr  string
	}{
		{in: "http://localhost:3000", want: "http://localhost:3000"},
		{in: "agentid.example", want: "https://agentid.example"},
		{in: "agentid.example:8443", want: "https://agentid.example:8443"},
		{in: "HTTPS://AgentID.Example/", want: "https://agentid.example"},
		{in: "https://agentid.example:443", want: "https://agentid.example"},
		{in: "http://127.0.0.1:8080", want: "http://127.0.0.1:8080"},
		{in: "https://agentid.example/api", wantErr: "path"},
		{in: "https://agentid.example/?x=1", wantErr: "query"},
		{in: "https://agentid.example#frag", wantErr: "fragment"},
		{in: "ftp://agentid.example", wantErr: "scheme"},
		{in: "https://user@agentid.example", wantErr: "user"},
		{in: "https://", wantErr: "no host"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			c, err := agent.Load(agent.LoadOptions{Dir: t.TempDir(), Hostname: tt.in,
				Getenv: envOf(map[string]string{"AGENT_UID": uid("a"), "AGENT_PRIVATE_JWK": priv})})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, signer.ErrInvalidServiceURL) {
					t.Fatalf("Load(hostname %q) = %v, %v; want an invalid service URL error containing %q", tt.in, c, err, tt.wantErr)
				}
				return
			}
			if err != nil || c.Hostname != tt.want {
				t.Fatalf("Load(hostname %q) = %v, %v; want hostname %q", tt.in, c, err, tt.want)
			}
		})
	}
}

func TestCredentialsOrigin(t *testing.T) {
	t.Parallel()
	k := fixedKey(1)
	tests := []struct {
		hostname, uid, want, wantErr string
	}{
		{hostname: "http://localhost:3000", uid: "agent-0123456789abcdef01234567", want: "http://agent-0123456789abcdef01234567.localhost:3000"},
		{hostname: "agentid.example", uid: uid("a"), want: "https://" + uid("a") + ".agentid.example"},
		{hostname: "http://127.0.0.1:4000", uid: uid("b"), want: "http://" + uid("b") + ".127.0.0.1:4000"},
		{hostname: "http://localhost:3000", uid: "agent.evil", wantErr: "invalid AGENT_UID"},
		{hostname: "http://localhost:3000", uid: "a/b", wantErr: "invalid AGENT_UID"},
		{hostname: "http://localhost:3000", uid: "agent-aa", wantErr: "invalid AGENT_UID"},
		{hostname: "http://localhost:3000", uid: "AGENT-" + strings.Repeat("A", 24), wantErr: "invalid AGENT_UID"},
		{hostname: "http://localhost:3000", uid: "", wantErr: "missing AGENT_UID"},
		{hostname: "http://localhost:3000/x", uid: uid("a"), wantErr: "path"},
	}
	for _, tt := range tests {
		t.Run(tt.hostname+"/"+tt.uid, func(t *testing.T) {
			got, err := agent.Credentials{UID: tt.uid, Key: k, Hostname: tt.hostname}.Origin()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Origin = %q, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Origin = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestLoadPrecedence(t *testing.T) {
	t.Parallel()
	fileKey, envKey, flagKey := fixedKey(1), fixedKey(2), fixedKey(3)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".env"), "# agent\nAGENT_UID="+uid("f")+"\n"+
		"AGENT_PRIVATE_JWK='"+string(fileKey.MarshalPrivateJWK())+"'\nAGENT_HOSTNAME=http://file.example:1\n")
	env := map[string]string{
		"AGENT_UID":         uid("e"),
		"AGENT_PRIVATE_JWK": string(envKey.MarshalPrivateJWK()),
		"AGENT_HOSTNAME":    "env.example",
	}
	tests := []struct {
		name              string
		opts              agent.LoadOptions
		wantUID, wantHost string
		wantKid           string
	}{
		{name: "file", opts: agent.LoadOptions{Dir: dir, Getenv: envOf(nil)},
			wantUID: uid("f"), wantHost: "http://file.example:1", wantKid: fileKey.KeyID()},
		{name: "environment over file", opts: agent.LoadOptions{Dir: dir, Getenv: envOf(env)},
			wantUID: uid("e"), wantHost: "https://env.example", wantKid: envKey.KeyID()},
		{name: "flags over environment", opts: agent.LoadOptions{Dir: dir, Getenv: envOf(env),
			UID: uid("c"), PrivateJWK: string(flagKey.MarshalPrivateJWK()), Hostname: "http://flag.example"},
			wantUID: uid("c"), wantHost: "http://flag.example", wantKid: flagKey.KeyID()},
		{name: "per variable", opts: agent.LoadOptions{Dir: dir, Getenv: envOf(map[string]string{"AGENT_UID": uid("e")}), Hostname: "flag.example"},
			wantUID: uid("e"), wantHost: "https://flag.example", wantKid: fileKey.KeyID()},
		{name: "default hostname", opts: agent.LoadOptions{Dir: t.TempDir(), Getenv: envOf(map[string]string{
			"AGENT_UID": uid("e"), "AGENT_PRIVATE_JWK": string(envKey.MarshalPrivateJWK())})},
			wantUID: uid("e"), wantHost: "http://localhost:3000", wantKid: envKey.KeyID()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := agent.Load(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if c.UID != tt.wantUID || c.Hostname != tt.wantHost || c.Key.KeyID() != tt.wantKid {
				t.Errorf("Load = %v; want uid=%s hostname=%s kid=%s", c, tt.wantUID, tt.wantHost, tt.wantKid)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	k := fixedKey(4)
	other := fixedKey(5)
	priv := string(k.MarshalPrivateJWK())
	wrongD := strings.Replace(priv, secret(k), secret(other), 1)
	noD := string(k.Public.JWK.MarshalPublic())
	shortD := strings.Replace(priv, secret(k), secret(k)[:20], 1)
	tests := []struct {
		name     string
		env      map[string]string
		wantIs   error
		wantText []string
	}{
		{name: "nothing", env: nil, wantIs: agent.ErrMissing,
			wantText: []string{"missing AGENT_UID", "idcli agent init", "set AGENT_UID"}},
		{name: "no key", env: map[string]string{"AGENT_UID": uid("d")}, wantIs: agent.ErrMissing,
			wantText: []string{"missing AGENT_PRIVATE_JWK", "idcli agent init", "set AGENT_PRIVATE_JWK"}},
		{name: "not JSON", env: map[string]string{"AGENT_UID": uid("d"), "AGENT_PRIVATE_JWK": "{" + secret(k)},
			wantIs: agent.ErrInvalid, wantText: []string{"invalid AGENT_PRIVATE_JWK"}},
		{name: "d does not match x", env: map[string]string{"AGENT_UID": uid("d"), "AGENT_PRIVATE_JWK": wrongD},
			wantIs: agent.ErrInvalid, wantText: []string{"invalid AGENT_PRIVATE_JWK", "does not match"}},
		{name: "public key only", env: map[string]string{"AGENT_UID": uid("d"), "AGENT_PRIVATE_JWK": noD},
			wantIs: agent.ErrInvalid, wantText: []string{"invalid AGENT_PRIVATE_JWK", "missing"}},
		{name: "short d", env: map[string]string{"AGENT_UID": uid("d"), "AGENT_PRIVATE_JWK": shortD},
			wantIs: agent.ErrInvalid, wantText: []string{"invalid AGENT_PRIVATE_JWK"}},
		{name: "bad uid", env: map[string]string{"AGENT_UID": "agent.x/y", "AGENT_PRIVATE_JWK": priv},
			wantIs: agent.ErrInvalid, wantText: []string{"invalid AGENT_UID"}},
		{name: "bad hostname", env: map[string]string{"AGENT_UID": uid("d"), "AGENT_PRIVATE_JWK": priv, "AGENT_HOSTNAME": "https://h.example/path"},
			wantText: []string{"invalid service URL", "path", "AGENT_HOSTNAME"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := agent.Load(agent.LoadOptions{Dir: t.TempDir(), Getenv: envOf(tt.env)})
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("Load error %q is not %v", err, tt.wantIs)
			}
			for _, w := range tt.wantText {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Load error = %q, want it to contain %q", err, w)
				}
			}
			for _, s := range []string{secret(k), secret(k)[:20], secret(other)} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("Load error = %q contains private key material", err)
				}
			}
		})
	}
}

// TestLoadVestauthFile reads a credentials file exactly as the vestauth CLI
// writes it: a comment line, then JSON inside double quotes with unescaped
// inner quotes.
func TestLoadVestauthFile(t *testing.T) {
	t.Parallel()
	k := fixedKey(6)
	dir := t.TempDir()
	content := "# vestauth agent credentials (do not commit)\n" +
		`AGENT_UID="agent-4b94ccd4ce2c3e6ab3cb2b0f"` + "\n" +
		`AGENT_PUBLIC_JWK="` + string(k.Public.JWK.MarshalPublic()) + `"` + "\n" +
		`AGENT_PRIVATE_JWK="{"crv":"Ed25519","x":"` + k.Public.JWK.X + `","kty":"OKP","kid":"` + k.KeyID() + `","d":"` + secret(k) + `"}"` + "\n"
	writeFile(t, filepath.Join(dir, ".env"), content)
	c, err := agent.Load(agent.LoadOptions{Dir: dir, Getenv: envOf(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if c.UID != "agent-4b94ccd4ce2c3e6ab3cb2b0f" || c.Key.KeyID() != k.KeyID() || c.Hostname != agent.DefaultHostname {
		t.Errorf("Load = %v; want uid agent-4b94ccd4ce2c3e6ab3cb2b0f kid %s hostname %s", c, k.KeyID(), agent.DefaultHostname)
	}
}

func TestCredentialsNeverPrintKey(t *testing.T) {
	t.Parallel()
	k := fixedKey(7)
	c := agent.Credentials{UID: uid("d"), Key: k, Hostname: agent.DefaultHostname}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if got := fmt.Sprintf(format, c); strings.Contains(got, secret(k)) || !strings.Contains(got, k.KeyID()) {
			t.Errorf("Sprintf(%q) = %q; want the kid and not d", format, got)
		}
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	k := fixedKey(8)
	c := agent.Credentials{UID: "agent-0123456789abcdef01234567", Key: k, Hostname: "http://localhost:3000"}
	tests := []struct {
		name, method, url, tag, nonce string
		wantTag                       string
	}{
		{name: "defaults", method: "GET", url: "https://api.example/x?y=1", wantTag: "web-bot-auth"},
		{name: "tag and nonce", method: "POST", url: "http://127.0.0.1:9/whoami", tag: "custom", nonce: "n-1", wantTag: "custom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := agent.Headers(tt.method, tt.url, c, tt.tag, tt.nonce)
			if err != nil {
				t.Fatal(err)
			}
			if want := `sig1="http://agent-0123456789abcdef01234567.localhost:3000"`; h.SignatureAgent != want {
				t.Errorf("Signature-Agent = %s, want %s", h.SignatureAgent, want)
			}
			if !strings.HasPrefix(h.SignatureInput, `sig1=("@authority" "signature-agent";key="sig1");created=`) {
				t.Errorf("Signature-Input = %s, want @authority and the sig1 member covered (protocol-01)", h.SignatureInput)
			}
			r := httptest.NewRequest(tt.method, tt.url, nil)
			r.Header.Set("Signature", h.Signature)
			r.Header.Set("Signature-Input", h.SignatureInput)
			r.Header.Set("Signature-Agent", h.SignatureAgent)
			s, err := verifyLabel(r, "sig1", k.Public.Key)
			if err != nil {
				t.Fatalf("verify: %v", err)
			}
			if s.Params.Tag != tt.wantTag || s.Params.KeyID != k.KeyID() || s.Params.Expires-s.Params.Created != 300 {
				t.Errorf("params = %+v; want tag %s, keyid %s, 300 s", s.Params, tt.wantTag, k.KeyID())
			}
			if tt.nonce != "" && s.Params.Nonce != tt.nonce {
				t.Errorf("nonce = %q, want %q", s.Params.Nonce, tt.nonce)
			}
			if tt.nonce == "" && len(s.Params.Nonce) != 86 {
				t.Errorf("nonce = %q, want 64 random bytes base64url (86 chars)", s.Params.Nonce)
			}
		})
	}
	if _, err := agent.Headers("GET", "/relative", c, "", ""); err == nil {
		t.Error("Headers with a relative URL succeeded, want an error")
	}
}

func TestInitRotateWhoami(t *testing.T) {
	t.Parallel()
	svc := newFakeService(t)
	dir := t.TempDir()
	path := filepath.Join(dir, ".env")
	writeFile(t, path, "# my bot\nOPENAI_KEY=sk-keep-me\n\nexport OTHER='x y'\n")
	ctx := context.Background()
	getenv := envOf(nil)

	res, err := agent.Init(ctx, agent.InitOptions{Dir: dir, Hostname: svc.URL(), Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsNew || !regexp.MustCompile(`^agent-[0-9a-f]{24}$`).MatchString(res.UID) || res.Path != path {
		t.Errorf("Init = %+v; want a new agent-<24 hex> written to %s", res, path)
	}
	if res.PublicJWK.D != "" {
		t.Errorf("Init PublicJWK carries d")
	}
	assertFile(t, path, res.UID, res.PublicJWK.Kid, svc.URL())

	creds, err := agent.Load(agent.LoadOptions{Dir: dir, Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	if creds.Hostname != svc.URL() || creds.UID != res.UID {
		t.Errorf("Load after Init = %v; want uid %s hostname %s", creds, res.UID, svc.URL())
	}
	whoami(t, creds, svc.URL(), http.StatusOK)

	again, err := agent.Init(ctx, agent.InitOptions{Dir: dir, Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	if again.IsNew || again.UID != res.UID || again.PublicJWK.Kid != res.PublicJWK.Kid {
		t.Errorf("second Init = %+v; want the same agent, IsNew false", again)
	}

	rot, err := agent.Rotate(ctx, agent.RotateOptions{Dir: dir, Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	if rot.UID != res.UID || rot.PublicJWK.Kid == res.PublicJWK.Kid || rot.PublicJWK.D != "" {
		t.Errorf("Rotate = %+v; want uid %s and a new key", rot, res.UID)
	}
	assertFile(t, path, res.UID, rot.PublicJWK.Kid, svc.URL())
	whoami(t, creds, svc.URL(), http.StatusUnauthorized) // old key
	creds2, err := agent.Load(agent.LoadOptions{Dir: dir, Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	whoami(t, creds2, svc.URL(), http.StatusOK)
}

// assertFile checks the credentials file after Init or Rotate.
func assertFile(t *testing.T, path, uid, kid, hostname string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", st.Mode().Perm())
	}
	got := readFile(t, path)
	for _, want := range []string{"# my bot\nOPENAI_KEY=sk-keep-me\n\nexport OTHER='x y'\n", "AGENT_UID=\"" + uid + "\"\n",
		`"kid":"` + kid + `"`, "AGENT_HOSTNAME=\"" + hostname + "\"\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("file =\n%s\nwant it to contain %q", got, want)
		}
	}
	if n := strings.Count(got, "AGENT_PRIVATE_JWK="); n != 1 {
		t.Errorf("file has %d AGENT_PRIVATE_JWK lines, want 1", n)
	}
}

func whoami(t *testing.T, c agent.Credentials, base string, want int) {
	t.Helper()
	resp, err := c.Client(nil).Get(base + "/whoami")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Errorf("GET /whoami = %d, want %d", resp.StatusCode, want)
	}
}

func TestInitHostnameWritten(t *testing.T) {
	t.Parallel()
	svc := newFakeService(t)
	// dialService sends every connection to the fake service, so the default
	// host http://localhost:3000 reaches it too.
	dialService := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", svc.srv.Listener.Addr().String())
		},
	}}
	tests := []struct {
		name     string
		hostname string
		env      map[string]string
		want     string // "" means no AGENT_HOSTNAME line
	}{
		{name: "default", want: ""},
		{name: "explicit default", hostname: "http://localhost:3000", want: ""},
		{name: "explicit", hostname: "http://Agents.Example:3000/", want: "AGENT_HOSTNAME=\"http://agents.example:3000\"\n"},
		{name: "environment", env: map[string]string{"AGENT_HOSTNAME": "http://agents.example:8080"}, want: "AGENT_HOSTNAME=\"http://agents.example:8080\"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			res, err := agent.Init(context.Background(), agent.InitOptions{Dir: dir, Hostname: tt.hostname, Getenv: envOf(tt.env), HTTPClient: dialService})
			if err != nil {
				t.Fatal(err)
			}
			got := readFile(t, res.Path)
			if tt.want == "" && strings.Contains(got, "AGENT_HOSTNAME") || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Errorf("file =\n%s\nwant AGENT_HOSTNAME line %q", got, tt.want)
			}
		})
	}
}

func TestInitUnreachable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := agent.Init(context.Background(), agent.InitOptions{Dir: dir, Hostname: "http://127.0.0.1:1", Getenv: envOf(nil)})
	if err == nil || !strings.Contains(err.Error(), "is the service running at http://127.0.0.1:1?") {
		t.Fatalf("Init against a closed port: %v; want a connection error with a hint", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".env")); !os.IsNotExist(err) {
		t.Errorf("stat .env after a failed Init: %v, want not exist", err)
	}
}

func TestInitReusesKey(t *testing.T) {
	t.Parallel()
	svc := newFakeService(t)
	k := fixedKey(9)
	tests := []struct {
		name string
		file string
		env  map[string]string
	}{
		{name: "from file", file: "AGENT_PRIVATE_JWK='" + string(k.MarshalPrivateJWK()) + "'\n"},
		{name: "from environment", env: map[string]string{"AGENT_PRIVATE_JWK": string(k.MarshalPrivateJWK())}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.file != "" {
				writeFile(t, filepath.Join(dir, ".env"), tt.file)
			}
			res, err := agent.Init(context.Background(), agent.InitOptions{Dir: dir, Hostname: svc.URL(), Getenv: envOf(tt.env)})
			if err != nil {
				t.Fatal(err)
			}
			if res.PublicJWK.Kid != k.KeyID() {
				t.Errorf("kid = %s, want the reused %s", res.PublicJWK.Kid, k.KeyID())
			}
		})
	}
}

func TestInitServerError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusConflict, "key_conflict", "key belongs to another agent")
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	_, err := agent.Init(context.Background(), agent.InitOptions{Dir: dir, Hostname: srv.URL, Getenv: envOf(nil)})
	var se *agent.ServerError
	if !errors.As(err, &se) || se.Status != 409 || se.Code != "key_conflict" || !strings.Contains(err.Error(), "key belongs to another agent") {
		t.Fatalf("Init error = %v; want ServerError 409 key_conflict with the message", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".env")); !os.IsNotExist(err) {
		t.Errorf("stat .env after a failed Init: %v, want not exist", err)
	}
}

func TestParseErrorBody(t *testing.T) {
	tests := []struct {
		body          string
		code, message string
		ok            bool
	}{
		{`{"error":{"status":401,"code":"invalid_signature","message":"bad"}}`, "invalid_signature", "bad", true},
		{`{"error":{"code":401,"message":"vestauth"}}`, "401", "vestauth", true},
		{`{"error":{"message":"no code"}}`, "", "no code", true},
		{`{"error":{}}`, "", "", false},
		{`{"uid":"agent-0123456789abcdef01234567"}`, "", "", false},
		{`<html>oops</html>`, "", "", false},
		{``, "", "", false},
	}
	for _, tt := range tests {
		code, message, ok := agent.ParseErrorBody([]byte(tt.body))
		if code != tt.code || message != tt.message || ok != tt.ok {
			t.Errorf("ParseErrorBody(%s) = %q, %q, %v; want %q, %q, %v", tt.body, code, message, ok, tt.code, tt.message, tt.ok)
		}
	}
}

func TestInitInvalidExistingKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".env"), `AGENT_PRIVATE_JWK='{"kty":"OKP","crv":"Ed25519","x":"bad","d":"c2VjcmV0LXNlZWQ"}'`+"\n")
	_, err := agent.Init(context.Background(), agent.InitOptions{Dir: dir, Hostname: "http://127.0.0.1:1", Getenv: envOf(nil)})
	if !errors.Is(err, agent.ErrInvalid) || !strings.Contains(err.Error(), "invalid") || strings.Contains(err.Error(), "c2VjcmV0LXNlZWQ") {
		t.Fatalf("Init error = %v; want an invalid-key error without the key", err)
	}
}

func TestRotateMissing(t *testing.T) {
	t.Parallel()
	_, err := agent.Rotate(context.Background(), agent.RotateOptions{Dir: t.TempDir(), Getenv: envOf(nil)})
	if !errors.Is(err, agent.ErrMissing) || !strings.Contains(err.Error(), "missing AGENT_UID") {
		t.Fatalf("Rotate error = %v; want missing AGENT_UID", err)
	}
}

// TestTransportRedirect follows a redirect from one server to another and
// checks that each hop carries its own signature for its own @authority.
func TestTransportRedirect(t *testing.T) {
	t.Parallel()
	k := fixedKey(10)
	type hop struct{ authority, nonce string }
	hops := make(chan hop, 4)
	check := func(w http.ResponseWriter, r *http.Request) bool {
		s, err := verifyLabel(r, "sig1", k.Public.Key)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return false
		}
		hops <- hop{authority: r.Host, nonce: s.Params.Nonce}
		return true
	}
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if check(w, r) {
			fmt.Fprint(w, "landed")
		}
	}))
	t.Cleanup(b.Close)
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if check(w, r) {
			http.Redirect(w, r, b.URL+"/target", http.StatusFound)
		}
	}))
	t.Cleanup(a.Close)
	c := agent.Credentials{UID: uid("d"), Key: k, Hostname: agent.DefaultHostname}
	resp, err := c.Client(nil).Get(a.URL + "/start")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d, want 200", resp.StatusCode)
	}
	close(hops)
	var got []hop
	for h := range hops {
		got = append(got, h)
	}
	if len(got) != 2 || got[0].authority != strings.TrimPrefix(a.URL, "http://") || got[1].authority != strings.TrimPrefix(b.URL, "http://") || got[0].nonce == got[1].nonce {
		t.Errorf("hops = %+v; want one verified signature per server, with different nonces", got)
	}
}

func TestGitIgnoreWarning(t *testing.T) {
	t.Parallel()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not installed")
	}
	svc := newFakeService(t)
	dir := t.TempDir()
	if out, err := exec.Command(git, "-C", dir, "init", "-q").CombinedOutput(); err != nil {
		t.Skipf("git init: %v %s", err, out)
	}
	res, err := agent.Init(context.Background(), agent.InitOptions{Dir: dir, Hostname: svc.URL(), Getenv: envOf(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Warning, "not git-ignored") {
		t.Errorf("Warning = %q, want a not git-ignored warning", res.Warning)
	}
	writeFile(t, filepath.Join(dir, ".gitignore"), ".env\n")
	res, err = agent.Init(context.Background(), agent.InitOptions{Dir: dir, Hostname: svc.URL(), Getenv: envOf(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Warning != "" {
		t.Errorf("Warning = %q with .env ignored, want none", res.Warning)
	}
	// Outside a work tree: no warning.
	res, err = agent.Init(context.Background(), agent.InitOptions{Dir: t.TempDir(), Hostname: svc.URL(), Getenv: envOf(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Warning != "" {
		t.Errorf("Warning = %q outside a work tree, want none", res.Warning)
	}
}
