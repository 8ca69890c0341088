package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

func TestParseInterspersed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantPos []string
		wantX   string
		wantH   []string
	}{
		{name: "flags first", args: []string{"-X", "PUT", "http://h/x"}, wantPos: []string{"http://h/x"}, wantX: "PUT"},
		{name: "flags after", args: []string{"http://h/x", "-X", "PUT", "-H", "A: 1"}, wantPos: []string{"http://h/x"}, wantX: "PUT", wantH: []string{"A: 1"}},
		{name: "mixed", args: []string{"-H", "A: 1", "GET", "-X=POST", "http://h/x", "-H", "B: 2"},
			wantPos: []string{"GET", "http://h/x"}, wantX: "POST", wantH: []string{"A: 1", "B: 2"}},
		{name: "double dash", args: []string{"a", "--", "-X", "b"}, wantPos: []string{"a", "-X", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			x := fs.String("X", "", "")
			var h stringsFlag
			fs.Var(&h, "H", "")
			pos, err := (&cliEnv{}).parseInterspersed(fs, tt.args, -1)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(pos, "|") != strings.Join(tt.wantPos, "|") || *x != tt.wantX || strings.Join(h, "|") != strings.Join(tt.wantH, "|") {
				t.Errorf("parse = %q, X=%q, H=%q; want %q, %q, %q", pos, *x, h, tt.wantPos, tt.wantX, tt.wantH)
			}
		})
	}
}

func TestAgentHeadersCommand(t *testing.T) {
	t.Parallel()
	k := signertest.Key(1)
	uid := "agent-0123456789abcdef01234567"
	dir := credsDir(t, uid, k, "")
	tests := []struct {
		name      string
		method    string
		args      []string
		environ   map[string]string
		wantLines int
		wantTag   string
		wantNonce string
		wantAgent string
		// wantCovered is a component that must be covered besides @authority.
		wantCovered string
		// wantInput, when set, starts Signature-Input instead (the
		// components are then checked there).
		wantInput string
		// wantMetadata is the Signed-Agent-Metadata printed, if any.
		wantMetadata string
	}{
		{name: "compact", method: "GET", args: []string{"agent", "headers", "GET", "https://api.example/x"}, wantLines: 1,
			wantTag: "web-bot-auth", wantAgent: `sig1="http://` + uid + `.localhost:3000"`, wantCovered: `"signature-agent";key="sig1"`},
		{name: "legacy", method: "GET", args: []string{"agent", "headers", "GET", "https://api.example/x", "--legacy"}, wantLines: 1,
			wantTag: "web-bot-auth", wantAgent: `sig1="http://` + uid + `.localhost:3000"`},
		{name: "metadata", method: "GET", args: []string{"agent", "headers", "GET", "https://api.example/x", "--metadata", "operator=Example Corp", "--metadata", "purpose=search"}, wantLines: 1,
			wantTag: "web-bot-auth", wantAgent: `sig1="http://` + uid + `.localhost:3000"`, wantInput: `sig1=("@authority" "signature-agent";key="sig1" "signed-agent-metadata");`,
			wantMetadata: `operator="Example Corp", purpose="search"`},
		{name: "pretty, flags after the URL", method: "POST", args: []string{"agent", "headers", "POST", "https://api.example/x", "--pp", "--tag", "t2", "--nonce", "abc"},
			wantLines: 5, wantTag: "t2", wantNonce: "abc", wantAgent: `sig1="http://` + uid + `.localhost:3000"`, wantCovered: `"signature-agent";key="sig1"`},
		{name: "standards", method: "GET", args: []string{"agent", "headers", "GET", "https://api.example/x", "--standards"}, wantLines: 1,
			wantTag: "web-bot-auth", wantAgent: `sig1="http://` + uid + `.localhost:3000"`, wantCovered: `"signature-agent";key="sig1"`},
		{name: "components", method: "POST", args: []string{"agent", "headers", "POST", "https://api.example/x", "--components", "@method,@authority,@path"}, wantLines: 1,
			wantTag: "web-bot-auth", wantAgent: `sig1="http://` + uid + `.localhost:3000"`, wantInput: `sig1=("@method" "@authority" "@path" "signature-agent";key="sig1");`},
		{name: "components and standards", method: "GET", args: []string{"agent", "headers", "--components", "@authority, @target-uri", "--standards", "GET", "https://api.example/x"}, wantLines: 1,
			wantTag: "web-bot-auth", wantAgent: `sig1="http://` + uid + `.localhost:3000"`, wantInput: `sig1=("@authority" "@target-uri" "signature-agent";key="sig1");`},
		{name: "environment hostname", method: "GET", args: []string{"agent", "headers", "GET", "https://api.example/x"}, wantLines: 1,
			environ: map[string]string{"AGENT_HOSTNAME": "agentid.example"}, wantTag: "web-bot-auth", wantAgent: `sig1="https://` + uid + `.agentid.example"`, wantCovered: `"signature-agent";key="sig1"`},
		{name: "flags override", method: "GET", args: []string{"agent", "headers", "--uid", "agent-ffffffffffffffffffffffff", "--private-jwk", string(k.MarshalPrivateJWK()), "GET", "https://api.example/x"},
			wantLines: 1, wantTag: "web-bot-auth", wantAgent: `sig1="http://agent-ffffffffffffffffffffffff.localhost:3000"`, wantCovered: `"signature-agent";key="sig1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runCLI(t.Context(), dir, tt.environ, tt.args...)
			if res.err != nil {
				t.Fatalf("run: %v (stderr %q)", res.err, res.stderr)
			}
			if n := strings.Count(res.stdout, "\n"); n != tt.wantLines {
				t.Errorf("output has %d lines, want %d:\n%s", n, tt.wantLines, res.stdout)
			}
			var h map[string]string
			if err := json.Unmarshal([]byte(res.stdout), &h); err != nil {
				t.Fatal(err)
			}
			if len(h) != 3+min(len(tt.wantMetadata), 1) || h["Signature-Agent"] != tt.wantAgent || h["Signed-Agent-Metadata"] != tt.wantMetadata {
				t.Errorf("headers = %v; want Signature, Signature-Input, Signature-Agent %s and Signed-Agent-Metadata %q", h, tt.wantAgent, tt.wantMetadata)
			}
			r := httptest.NewRequest(tt.method, "https://api.example/x", nil)
			for name, v := range h {
				r.Header.Set(name, v)
			}
			sigs, err := signer.ParseSignatures(r.Header.Values("Signature-Input"), r.Header.Values("Signature"))
			if err != nil || len(sigs) != 1 {
				t.Fatalf("parse: %v, %d signatures", err, len(sigs))
			}
			base, err := sigs[0].Base(r)
			if err != nil {
				t.Fatal(err)
			}
			if !ed25519.Verify(k.Public.Key, base, sigs[0].Value) {
				t.Errorf("signature does not verify over\n%s", base)
			}
			if tt.wantInput != "" {
				if !strings.HasPrefix(h["Signature-Input"], tt.wantInput) {
					t.Errorf("Signature-Input = %q, want it to start with %q", h["Signature-Input"], tt.wantInput)
				}
			} else if tt.wantCovered != "" && !sigs[0].Covers(tt.wantCovered) || len(sigs[0].Components) != 1+min(len(tt.wantCovered), 1) {
				t.Errorf("covered = %v; want @authority and %q", sigs[0].Components, tt.wantCovered)
			}
			if p := sigs[0].Params; p.Tag != tt.wantTag || (tt.wantNonce != "" && p.Nonce != tt.wantNonce) {
				t.Errorf("params = %+v; want tag %q nonce %q", p, tt.wantTag, tt.wantNonce)
			}
			if strings.Contains(res.stdout+res.stderr, k.JWK().D) {
				t.Error("output contains the private key")
			}
		})
	}
}

func TestAgentHeadersErrors(t *testing.T) {
	t.Parallel()
	dir := credsDir(t, "agent-0123456789abcdef01234567", signertest.Key(1), "")
	checkUsage(t, dir, []string{"agent", "headers"}, []usageCase{
		{"content-digest without a body", []string{"GET", "https://api.example/x", "--components", "@authority,content-digest"}, "content-digest needs a body"},
		{"unknown component", []string{"GET", "https://api.example/x", "--components", "@authority,@bogus"}, `unknown component "@bogus"`},
		{"empty component", []string{"GET", "https://api.example/x", "--components", "@authority,,@path"}, "empty component"},
		{"missing scheme, public host", []string{"GET", "api.example/x"}, "did you mean https://api.example/x?"},
		{"missing scheme, local host", []string{"GET", "localhost:3000/whoami"}, "did you mean http://localhost:3000/whoami?"},
	})
}

func TestAgentCommandsMissingCredentials(t *testing.T) {
	t.Parallel()
	k := signertest.Key(2)
	tests := []struct {
		name     string
		args     []string
		environ  map[string]string
		wantText []string
	}{
		{name: "headers", args: []string{"agent", "headers", "GET", "https://a.example/"}, wantText: []string{"missing AGENT_UID", "idcli agent init"}},
		{name: "curl", args: []string{"agent", "curl", "https://a.example/"}, wantText: []string{"missing AGENT_UID"}},
		{name: "rotate", args: []string{"agent", "rotate"}, wantText: []string{"missing AGENT_UID"}},
		{name: "no key", args: []string{"agent", "curl", "https://a.example/"}, environ: map[string]string{"AGENT_UID": "agent-0123456789abcdef01234567"},
			wantText: []string{"missing AGENT_PRIVATE_JWK", "set AGENT_PRIVATE_JWK"}},
		{name: "invalid key", args: []string{"agent", "headers", "GET", "https://a.example/"},
			environ:  map[string]string{"AGENT_UID": "agent-0123456789abcdef01234567", "AGENT_PRIVATE_JWK": strings.Replace(string(k.MarshalPrivateJWK()), `"d":"`, `"d":"xx`, 1)},
			wantText: []string{"invalid AGENT_PRIVATE_JWK"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runCLI(t.Context(), t.TempDir(), tt.environ, tt.args...)
			if res.err == nil {
				t.Fatal("run succeeded, want an error")
			}
			for _, w := range tt.wantText {
				if !strings.Contains(res.err.Error(), w) {
					t.Errorf("error = %q, want it to contain %q", res.err, w)
				}
			}
			if strings.Contains(res.err.Error()+res.stdout+res.stderr, k.JWK().D) {
				t.Error("output contains the private key")
			}
		})
	}
}

type whoamiBody struct {
	UID          string     `json:"uid"`
	Kid          string     `json:"kid"`
	PublicJWK    signer.JWK `json:"public_jwk"`
	WellKnownURL string     `json:"well_known_url"`
}

func curlWhoami(t *testing.T, dir, url string) whoamiBody {
	t.Helper()
	res := runCLI(t.Context(), dir, nil, "agent", "curl", url+"/whoami")
	if res.err != nil {
		t.Fatalf("agent curl /whoami: %v\nstdout %s\nstderr %s", res.err, res.stdout, res.stderr)
	}
	var w whoamiBody
	if err := json.Unmarshal([]byte(res.stdout), &w); err != nil {
		t.Fatalf("whoami body %q: %v", res.stdout, err)
	}
	return w
}

// TestAgentEndToEnd drives the CLI against the reference server over
// loopback: init → curl /whoami → rotate → curl /whoami, a second init, the
// old key refused, the directory serving the new key.
func TestAgentEndToEnd(t *testing.T) {
	clitest.EachServer(t, clitest.ServerOptions{Host: "127.0.0.1"}, func(t *testing.T, srv *clitest.Server) {
		url := srv.URL
		host := strings.TrimPrefix(url, "http://")
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ".env"), []byte("# keep me\nOTHER=1\n"), 0o600); err != nil {
			t.Fatal(err)
		}

		res := runCLI(t.Context(), dir, nil, "agent", "init", "--hostname", url)
		if res.err != nil {
			t.Fatalf("agent init: %v\n%s%s", res.err, res.stdout, res.stderr)
		}
		m := regexp.MustCompile(`^✔ agent created \(\.env/AGENT_UID=(agent-[0-9a-f]{24})\)\n⮕ next run: \[idcli agent curl ` + regexp.QuoteMeta(url) + `/whoami\]\n✔ key directory signed until [0-9TZ:-]+\n$`).FindStringSubmatch(res.stdout)
		if m == nil {
			t.Fatalf("agent init printed %q", res.stdout)
		}
		uid := m[1]
		env, _ := os.ReadFile(filepath.Join(dir, ".env"))
		if !strings.HasPrefix(string(env), "# keep me\nOTHER=1\n") || !strings.Contains(string(env), "AGENT_HOSTNAME=\""+url+"\"\n") {
			t.Errorf(".env =\n%s\nwant the old lines kept and AGENT_HOSTNAME", env)
		}
		if st, _ := os.Stat(filepath.Join(dir, ".env")); st.Mode().Perm() != 0o600 {
			t.Errorf(".env mode = %v, want 0600", st.Mode().Perm())
		}

		w1 := curlWhoami(t, dir, url)
		if w1.UID != uid || w1.Kid != w1.PublicJWK.Kid || w1.WellKnownURL != "http://"+uid+"."+host+"/.well-known/http-message-signatures-directory" {
			t.Errorf("whoami = %+v; want uid %s and its well-known URL on %s", w1, uid, host)
		}

		// headers: the Signature-Agent value, and the headers work on a real request.
		res = runCLI(t.Context(), dir, nil, "agent", "headers", "GET", url+"/whoami")
		if res.err != nil {
			t.Fatal(res.err)
		}
		var h map[string]string
		if err := json.Unmarshal([]byte(res.stdout), &h); err != nil {
			t.Fatal(err)
		}
		if want := `sig1="http://` + uid + `.` + host + `"`; h["Signature-Agent"] != want {
			t.Errorf("Signature-Agent = %s, want %s", h["Signature-Agent"], want)
		}
		oldHeaders := h
		if got := clitest.MustDo(t, http.MethodGet, url+"/whoami", "", h, nil).Status; got != http.StatusOK {
			t.Errorf("GET /whoami with printed headers = %d, want 200", got)
		}

		res = runCLI(t.Context(), dir, nil, "agent", "rotate")
		if res.err != nil {
			t.Fatalf("agent rotate: %v\n%s%s", res.err, res.stdout, res.stderr)
		}
		w2 := curlWhoami(t, dir, url)
		if w2.UID != uid || w2.Kid == w1.Kid {
			t.Errorf("whoami after rotate = %+v; want uid %s with a new kid (old %s)", w2, uid, w1.Kid)
		}
		if want := "✔ agent keys rotated (.env/AGENT_UID=" + uid + ")\n⮕ new kid " + w2.Kid + " (every older key of the agent is revoked)\n✔ key directory signed by the new key until "; !strings.HasPrefix(res.stdout, want) {
			t.Errorf("agent rotate printed %q, want %q", res.stdout, want)
		}

		// The old key no longer verifies: its earlier headers (replayed
		// nonce aside) and a fresh request signed by it are refused.
		if got := clitest.MustDo(t, http.MethodGet, url+"/whoami", "", oldHeaders, nil).Status; got != http.StatusUnauthorized {
			t.Errorf("GET /whoami with the old key's headers = %d, want 401", got)
		}
		oldJWK := oldPrivateJWK(t, w1.Kid, string(env))
		res = runCLI(t.Context(), t.TempDir(), map[string]string{"AGENT_UID": uid, "AGENT_PRIVATE_JWK": oldJWK, "AGENT_HOSTNAME": url}, "agent", "curl", url+"/whoami")
		if !errors.Is(res.err, exitCode(22)) || !strings.Contains(res.stdout, "revoked_key") {
			t.Errorf("curl with the old key: err %v, body %q; want exit 22 and revoked_key", res.err, res.stdout)
		}

		res = runCLI(t.Context(), dir, nil, "agent", "init")
		if res.err != nil {
			t.Fatal(res.err)
		}
		if want := "• agent exists (.env/AGENT_UID=" + uid + ")\n⮕ next run: [idcli agent curl " + url + "/whoami]\n✔ key directory signed until "; !strings.HasPrefix(res.stdout, want) {
			t.Errorf("second agent init printed %q, want %q", res.stdout, want)
		}

		// The directory on the agent host serves the new key only.
		resp, err := srv.Client.Get(w2.WellKnownURL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var dirBody struct {
			Keys []signer.JWK `json:"keys"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&dirBody); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || len(dirBody.Keys) != 1 || dirBody.Keys[0].Kid != w2.Kid {
			t.Errorf("directory = %d %+v; want only kid %s", resp.StatusCode, dirBody.Keys, w2.Kid)
		}

	})
}

// oldPrivateJWK returns the AGENT_PRIVATE_JWK value from an .env text.
func oldPrivateJWK(t *testing.T, kid, envText string) string {
	t.Helper()
	for _, line := range strings.Split(envText, "\n") {
		if v, ok := strings.CutPrefix(line, "AGENT_PRIVATE_JWK="); ok {
			v = strings.Trim(v, "'")
			if !strings.Contains(v, kid) {
				t.Fatalf("saved key is not kid %s", kid)
			}
			return v
		}
	}
	t.Fatal("no AGENT_PRIVATE_JWK in .env")
	return ""
}

// TestAgentHeadersNodeVerify feeds `agent headers` output to an independent
// verifier: Node's crypto over the signature base rebuilt in JavaScript.
func TestAgentHeadersNodeVerify(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	k := signertest.Key(3)
	dir := credsDir(t, "agent-0123456789abcdef01234567", k, "")
	for _, u := range []string{"https://API.example:443/x?y=1", "http://127.0.0.1:8080/whoami"} {
		t.Run(u, func(t *testing.T) {
			res := runCLI(t.Context(), dir, nil, "agent", "headers", "GET", u)
			if res.err != nil {
				t.Fatal(res.err)
			}
			in, _ := json.Marshal(map[string]any{"headers": json.RawMessage(res.stdout), "url": u, "jwk": k.Public.JWK})
			cmd := exec.Command(node, "-e", nodeVerify)
			cmd.Stdin = bytes.NewReader(in)
			out, err := cmd.CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "ok" {
				t.Errorf("node verify: %v: %s", err, out)
			}
		})
	}
	// A tampered signature must not verify (the check can fail).
	res := runCLI(t.Context(), dir, nil, "agent", "headers", "GET", "https://a.example/")
	var h map[string]string
	json.Unmarshal([]byte(res.stdout), &h)
	in, _ := json.Marshal(map[string]any{"headers": h, "url": "https://b.example/", "jwk": k.Public.JWK})
	cmd := exec.Command(node, "-e", nodeVerify)
	cmd.Stdin = bytes.NewReader(in)
	if out, _ := cmd.CombinedOutput(); strings.TrimSpace(string(out)) != "bad" {
		t.Errorf("node verify of a signature for another authority = %s, want bad", out)
	}
}

const nodeVerify = `
const crypto = require('crypto');
const inp = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const h = inp.headers;
const m = /^sig1=(\(([^)]*)\).*)$/.exec(h['Signature-Input']);
if (!m) throw new Error('bad Signature-Input ' + h['Signature-Input']);
const params = m[1];
const comps = m[2].split(' ').filter(Boolean);
const u = new URL(inp.url);
const lines = comps.map(c => {
  if (c === '"signature-agent";key="sig1"') {
    // RFC 9421 §2.1.2: the member's serialized value.
    const mm = /(?:^|,\s*)sig1=("[^"\\]*")\s*(?:,|$)/.exec(h['Signature-Agent']);
    if (!mm) throw new Error('no sig1 member in ' + h['Signature-Agent']);
    return c + ': ' + mm[1];
  }
  if (c !== '"@authority"') throw new Error('unexpected component ' + c);
  return '"@authority": ' + u.host;
});
lines.push('"@signature-params": ' + params);
if (!/;tag="web-bot-auth"/.test(params) || !/;alg="ed25519"/.test(params)) throw new Error('params ' + params);
const created = +/;created=(\d+)/.exec(params)[1], expires = +/;expires=(\d+)/.exec(params)[1];
const now = Math.floor(Date.now() / 1000);
if (created > now + 5 || expires < now) throw new Error('window');
const sig = Buffer.from(/^sig1=:(.*):$/.exec(h['Signature'])[1], 'base64');
const key = crypto.createPublicKey({key: inp.jwk, format: 'jwk'});
console.log(crypto.verify(null, Buffer.from(lines.join('\n')), key, sig) ? 'ok' : 'bad');
`
