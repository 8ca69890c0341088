package main

// Interop suite (issue 8): agentid against the published peers, npm
// `web-bot-auth` (Cloudflare) and npm `vestauth`, driven with node through the
// scripts in testdata/interop. It runs only when AGENTID_INTEROP_NODE_MODULES
// names the node_modules directory made by testdata/interop/install.sh:
//
//	cmd/idcli/testdata/interop/install.sh /tmp/agentid-interop
//	AGENTID_INTEROP_NODE_MODULES=/tmp/agentid-interop/node_modules go test -run Interop ./cmd/idcli
//
// No network besides loopback. Every failure names the peer, the request and
// the reason.

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
	"gorm.io/gorm"
)

// interopEnvVar names the node_modules directory holding the peers.
const interopEnvVar = "AGENTID_INTEROP_NODE_MODULES"

// Fixed test identities (never real keys).
var (
	interopKey   = signer.NewPrivateKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x42}, ed25519.SeedSize)))
	interopOther = signer.NewPrivateKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x17}, ed25519.SeedSize)))
)

const (
	interopUID    = "agent-0123456789abcdef01234567"
	interopOrigin = "http://" + interopUID + ".localhost:3000"
	interopURL    = "http://localhost:3000/whoami"
)

// interop locates node, the peers and the driver scripts.
type interop struct {
	node        string
	nodeModules string
	scripts     string
}

// needInterop skips the test unless the peers are installed. With CI set,
// a configured suite whose node or packages are missing fails instead.
func needInterop(t *testing.T) *interop {
	t.Helper()
	nm := os.Getenv(interopEnvVar)
	if nm == "" {
		t.Skipf("%s is not set: interop with vestauth and web-bot-auth skipped "+
			"(run cmd/idcli/testdata/interop/install.sh DIR, then set %s=DIR/node_modules)", interopEnvVar, interopEnvVar)
	}
	fail := t.Skipf
	if os.Getenv("CI") != "" {
		fail = t.Fatalf
	}
	node, err := exec.LookPath("node")
	if err != nil {
		fail("%s is set but node is not installed: %v", interopEnvVar, err)
	}
	for _, pkg := range []string{"web-bot-auth", "vestauth"} {
		if _, err := os.Stat(filepath.Join(nm, pkg, "package.json")); err != nil {
			fail("%s=%s but %s is not installed there (run cmd/idcli/testdata/interop/install.sh): %v", interopEnvVar, nm, pkg, err)
		}
	}
	scripts, err := filepath.Abs(filepath.Join("testdata", "interop"))
	if err != nil {
		t.Fatal(err)
	}
	return &interop{node: node, nodeModules: nm, scripts: scripts}
}

// iopVerdict is a driver's answer: OK, or the peer's reason for refusing.
type iopVerdict struct {
	OK    bool   `json:"ok"`
	Peer  string `json:"peer"`
	Error string `json:"error"`
	raw   []byte
}

// drive runs script with args (JSON on stdin) and decodes its answer into
// out (when the peer accepted). A peer refusal (exit 1) is returned as a
// verdict with OK false; a broken driver (any other failure) fails the test.
func (in *interop) drive(t *testing.T, script string, args, out any) iopVerdict {
	t.Helper()
	payload, err := json.Marshal(args)
	if err != nil {
		t.Fatalf("%s: encode arguments: %v", script, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard only
	defer cancel()
	cmd := exec.CommandContext(ctx, in.node, filepath.Join(in.scripts, script), "-")
	cmd.Stdin = bytes.NewReader(payload)
	cmd.Env = append(os.Environ(), interopEnvVar+"="+in.nodeModules, "NO_COLOR=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		t.Fatalf("%s: driver failed: %v\nstderr: %s\nstdout: %s", script, err, stderr.String(), stdout.String())
	}
	var v iopVerdict
	if jerr := json.Unmarshal(stdout.Bytes(), &v); jerr != nil {
		t.Fatalf("%s: driver printed no JSON verdict (%v)\nstderr: %s\nstdout: %s", script, jerr, stderr.String(), stdout.String())
	}
	v.raw = stdout.Bytes()
	if v.OK && out != nil {
		if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
			t.Fatalf("%s: decode answer: %v\n%s", script, err, stdout.String())
		}
	}
	return v
}

func iopPublicJWK(t *testing.T, k signer.PrivateKey) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(k.Public.JWK.MarshalPublic(), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func iopPrivateJWK(t *testing.T, k signer.PrivateKey) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(k.MarshalPrivateJWK(), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func iopHeaderMap(h signer.SignatureHeaders) map[string]string {
	m := map[string]string{"Signature": h.Signature, "Signature-Input": h.SignatureInput}
	if h.SignatureAgent != "" {
		m["Signature-Agent"] = h.SignatureAgent
	}
	return m
}

// iopSignedRequest builds the request a server would see for method and url
// carrying headers.
func iopSignedRequest(method, url string, headers map[string]string) *http.Request {
	r := httptest.NewRequest(method, url, nil)
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	return r
}

// Group 1: requests signed by web-bot-auth verify in agentid's middleware.
func TestInteropWebBotAuthSignsAgentidVerifies(t *testing.T) {
	t.Parallel()
	in := needInterop(t)
	tests := []struct {
		name, mode string
		// wantCode is "" when agentid must accept the request.
		wantCode  string
		wantBound bool
		why       string
	}{
		{name: "no Signature-Agent", mode: "none"},
		{name: "whole Signature-Agent field covered (web-bot-auth 0.1.3 default)", mode: "whole-field", wantBound: true},
		{name: `"signature-agent";key="sig1" covered`, mode: "member", wantBound: true},
		{name: `"signature-agent";key="sig1" with web-bot-auth 0.1.3's own base`, mode: "member-raw", wantCode: "invalid_signature",
			why: "web-bot-auth 0.1.3 signs the whole field as the value of the keyed component, which RFC 9421 §2.1.2 does not allow"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := map[string]any{"method": "GET", "url": interopURL, "private_jwk": iopPrivateJWK(t, interopKey), "mode": tc.mode}
			if tc.mode != "none" {
				args["signature_agent"] = interopOrigin
			}
			var signed struct {
				Headers map[string]string `json:"headers"`
				KeyID   string            `json:"keyid"`
				Base    string            `json:"base"`
			}
			if v := in.drive(t, "wba-sign.mjs", args, &signed); !v.OK {
				t.Fatalf("%s could not sign GET %s (mode %s): %s", v.Peer, interopURL, tc.mode, v.Error)
			}
			if signed.KeyID != interopKey.KeyID() {
				t.Errorf("web-bot-auth keyid = %q, want agentid's kid %q", signed.KeyID, interopKey.KeyID())
			}
			keys := middleware.NewStaticKeys()
			keys.Add(interopOrigin, interopKey.Public)
			if tc.mode == "none" {
				keys.Add("", interopKey.Public)
			}
			v, err := middleware.NewVerifier(middleware.Config{Keys: keys, AllowMissingSignatureAgent: tc.mode == "none"})
			if err != nil {
				t.Fatal(err)
			}
			r := iopSignedRequest(http.MethodGet, interopURL, signed.Headers)

			// Same signature base, byte for byte (except where the peer is wrong).
			sigs, err := signer.ParseSignatures(r.Header.Values("Signature-Input"), r.Header.Values("Signature"))
			if err != nil || len(sigs) != 1 {
				t.Fatalf("agentid cannot parse web-bot-auth's headers %v: %v", signed.Headers, err)
			}
			ours, err := sigs[0].Base(r)
			if err != nil {
				t.Fatalf("agentid cannot build the base of web-bot-auth's GET %s: %v", interopURL, err)
			}
			if same := string(ours) == signed.Base; same != (tc.wantCode == "") {
				t.Errorf("signature base of GET %s (mode %s): agentid and web-bot-auth agree = %v, want %v\nagentid:\n%s\nweb-bot-auth:\n%s",
					interopURL, tc.mode, same, tc.wantCode == "", ours, signed.Base)
			}

			a, err := v.Verify(r)
			if tc.wantCode != "" {
				var me *middleware.Error
				if !errors.As(err, &me) || string(me.Code) != tc.wantCode {
					t.Fatalf("agentid on web-bot-auth's GET %s (mode %s): got %v, want error %s (%s)", interopURL, tc.mode, err, tc.wantCode, tc.why)
				}
				return
			}
			if err != nil {
				t.Fatalf("agentid rejected web-bot-auth's GET %s (mode %s, headers %v): %v", interopURL, tc.mode, signed.Headers, err)
			}
			if a.KeyID != interopKey.KeyID() || a.Bound != tc.wantBound {
				t.Errorf("agent = {KeyID:%q Bound:%v}, want {KeyID:%q Bound:%v}", a.KeyID, a.Bound, interopKey.KeyID(), tc.wantBound)
			}
			if tc.mode != "none" && (a.SignatureAgent != interopOrigin || a.UID != interopUID) {
				t.Errorf("agent = {SignatureAgent:%q UID:%q}, want {%q %q}", a.SignatureAgent, a.UID, interopOrigin, interopUID)
			}

			// The same peer-made headers, replayed, and moved to another host.
			if _, err := v.Verify(iopSignedRequest(http.MethodGet, interopURL, signed.Headers)); !iopIsCode(err, "replayed_nonce") {
				t.Errorf("agentid on a replay of web-bot-auth's GET %s: got %v, want replayed_nonce", interopURL, err)
			}
			moved := iopSignedRequest(http.MethodGet, "http://evil-tool.example/whoami", signed.Headers)
			if _, err := v.Verify(moved); !iopIsCode(err, "invalid_signature") {
				t.Errorf("agentid on web-bot-auth's headers for %s sent to evil-tool.example: got %v, want invalid_signature", interopURL, err)
			}
		})
	}
}

func iopIsCode(err error, code string) bool {
	var me *middleware.Error
	return errors.As(err, &me) && string(me.Code) == code
}

// Group 2: requests signed by agentid verify with the peers' verifiers.
func TestInteropAgentidSignsPeersVerify(t *testing.T) {
	t.Parallel()
	in := needInterop(t)
	type peerCheck struct {
		script string
		args   map[string]any
		// wantErr is "" when the peer must accept; else a substring of its refusal.
		wantErr string
		why     string
	}
	tests := []struct {
		name   string
		opts   signer.Options
		url    string // verified as this URL; "" = signed URL
		checks []peerCheck
	}{
		{
			name: "default profile",
			opts: signer.Options{SignatureAgent: interopOrigin},
			checks: []peerCheck{
				{script: "vestauth-verify.mjs"},
				{script: "wba-verify.mjs"},
			},
		},
		{
			name: "default profile without Signature-Agent",
			opts: signer.Options{},
			checks: []peerCheck{
				{script: "vestauth-verify.mjs"},
				{script: "wba-verify.mjs"},
			},
		},
		{
			name: "standards profile",
			opts: signer.Options{SignatureAgent: interopOrigin, Standards: true},
			checks: []peerCheck{
				{script: "wba-verify.mjs", args: map[string]any{"member_adapter": true}},
				{script: "wba-verify.mjs", wantErr: "invalid signature",
					why: "web-bot-auth 0.1.3 rebuilds a keyed signature-agent component from the whole field; if this now passes, drop member_adapter"},
				{script: "vestauth-verify.mjs", wantErr: "INVALID_SIGNATURE",
					why: "vestauth 0.21.1 always rebuilds an @authority-only base"},
			},
		},
		{
			name: "whole Signature-Agent field covered",
			opts: signer.Options{SignatureAgent: interopOrigin, Components: []string{"@authority", "signature-agent"}},
			checks: []peerCheck{
				{script: "wba-verify.mjs"},
			},
		},
		{
			name: "default profile presented for another host",
			opts: signer.Options{SignatureAgent: interopOrigin},
			url:  "http://evil-tool.example/whoami",
			checks: []peerCheck{
				{script: "vestauth-verify.mjs", wantErr: "INVALID_SIGNATURE", why: "the signature covers localhost:3000"},
				{script: "wba-verify.mjs", wantErr: "invalid signature", why: "the signature covers localhost:3000"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := signer.Headers(http.MethodGet, interopURL, interopKey, tc.opts)
			if err != nil {
				t.Fatalf("signer.Headers(GET %s): %v", interopURL, err)
			}
			url := tc.url
			if url == "" {
				url = interopURL
			}
			for _, pc := range tc.checks {
				args := map[string]any{"method": "GET", "url": url, "headers": iopHeaderMap(h), "public_jwk": iopPublicJWK(t, interopKey)}
				for k, v := range pc.args {
					args[k] = v
				}
				var got struct {
					KeyID        string `json:"keyid"`
					KeyIDMatches *bool  `json:"keyid_matches"`
					Result       struct {
						UID string `json:"uid"`
						Kid string `json:"kid"`
					} `json:"result"`
				}
				v := in.drive(t, pc.script, args, &got)
				req := fmt.Sprintf("GET %s with agentid headers %v", url, iopHeaderMap(h))
				if pc.wantErr != "" {
					if v.OK || !strings.Contains(v.Error, pc.wantErr) {
						t.Errorf("%s (%s) on %s: ok=%v error=%q, want a refusal containing %q (%s)", v.Peer, pc.script, req, v.OK, v.Error, pc.wantErr, pc.why)
					}
					continue
				}
				if !v.OK {
					t.Errorf("%s (%s) rejected %s: %s", v.Peer, pc.script, req, v.Error)
					continue
				}
				switch pc.script {
				case "vestauth-verify.mjs":
					wantUID := ""
					if tc.opts.SignatureAgent != "" {
						wantUID = interopUID
					}
					if got.Result.Kid != interopKey.KeyID() || got.Result.UID != wantUID || got.KeyIDMatches == nil || !*got.KeyIDMatches {
						t.Errorf("%s on %s: uid=%q kid=%q keyid_matches=%v, want uid=%q kid=%q true", v.Peer, req, got.Result.UID, got.Result.Kid, got.KeyIDMatches, wantUID, interopKey.KeyID())
					}
				case "wba-verify.mjs":
					if got.KeyID != interopKey.KeyID() {
						t.Errorf("%s on %s: keyid=%q, want %q", v.Peer, req, got.KeyID, interopKey.KeyID())
					}
				}
			}
		})
	}
}

// iopStartRefServer serves a reference server over db on a loopback port, with
// Hostname http://localhost:PORT, and returns it with that hostname.
func iopStartRefServer(t *testing.T, db *gorm.DB, configure func(*refserver.Config)) (*refserver.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hostname := fmt.Sprintf("http://localhost:%d", ln.Addr().(*net.TCPAddr).Port)
	cfg := refserver.Config{DB: db, Hostname: hostname}
	if configure != nil {
		configure(&cfg)
	}
	srv, err := refserver.New(cfg)
	if err != nil {
		ln.Close()
		t.Fatalf("refserver.New: %v", err)
	}
	hs := &httptest.Server{Listener: ln, Config: &http.Server{Handler: srv.Handler()}}
	hs.Start()
	t.Cleanup(hs.Close)
	return srv, hostname
}

func iopNoEnv(string) string { return "" }

// Group 5: every key in a directory served by agentid has the kid that
// web-bot-auth's jwkToKeyID computes, under the drafts' media type.
func TestInteropDirectoryKeyIDs(t *testing.T) {
	t.Parallel()
	in := needInterop(t)
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		if err := refserver.Migrate(ctx, db, nil); err != nil {
			t.Fatalf("migrate: %v", err)
		}
		srv, hostname := iopStartRefServer(t, db, nil)
		dir := t.TempDir()
		res, err := agent.Init(ctx, agent.InitOptions{Dir: dir, Hostname: hostname, Getenv: iopNoEnv})
		if err != nil {
			t.Fatalf("agent init against %s: %v", hostname, err)
		}
		iopCheckDirectory(t, in, srv.WellKnownURL(res.UID), res.PublicJWK.Kid)

		rot, err := agent.Rotate(ctx, agent.RotateOptions{Dir: dir, Getenv: iopNoEnv})
		if err != nil {
			t.Fatalf("agent rotate against %s: %v", hostname, err)
		}
		iopCheckDirectory(t, in, srv.WellKnownURL(res.UID), rot.PublicJWK.Kid)
	})
}

// iopCheckDirectory fetches url with web-bot-auth's driver and wants exactly
// one key, kid wantKid, each kid equal to jwkToKeyID, and the drafts' media type.
func iopCheckDirectory(t *testing.T, in *interop, url, wantKid string) {
	t.Helper()
	var got struct {
		Status            int    `json:"status"`
		ContentType       string `json:"content_type"`
		MediaTypeExpected string `json:"media_type_expected"`
		Keys              []struct {
			Kid      string `json:"kid"`
			Computed string `json:"computed"`
			Match    bool   `json:"match"`
		} `json:"keys"`
	}
	v := in.drive(t, "wba-keyid.mjs", map[string]any{"url": url}, &got)
	if !v.OK {
		t.Fatalf("%s could not read agentid's directory GET %s: %s", v.Peer, url, v.Error)
	}
	if got.Status != http.StatusOK {
		t.Errorf("%s: GET %s: status %d, want 200", v.Peer, url, got.Status)
	}
	mt, _, err := mime.ParseMediaType(got.ContentType)
	if err != nil || mt != got.MediaTypeExpected {
		t.Errorf("%s: GET %s: Content-Type %q, want media type %q", v.Peer, url, got.ContentType, got.MediaTypeExpected)
	}
	if len(got.Keys) != 1 || got.Keys[0].Kid != wantKid {
		t.Errorf("%s: GET %s: keys %+v, want exactly the active key %q", v.Peer, url, got.Keys, wantKid)
	}
	for _, k := range got.Keys {
		if !k.Match {
			t.Errorf("%s: GET %s: key kid %q, but web-bot-auth's jwkToKeyID computes %q", v.Peer, url, k.Kid, k.Computed)
		}
	}
}

// vestauthCLI runs the vestauth command line (its package.json bin) in dir
// with a scrubbed environment: only PATH (for its curl), a private HOME and
// NO_COLOR, so AGENT_* settings come from dir/.env alone.
func (in *interop) vestauthCLI(t *testing.T, dir string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	b, rerr := os.ReadFile(filepath.Join(in.nodeModules, "vestauth", "package.json"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	var pkg struct {
		Version string            `json:"version"`
		Bin     map[string]string `json:"bin"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil || pkg.Bin["vestauth"] == "" {
		t.Fatalf("vestauth package.json has no bin: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard only
	defer cancel()
	cmd := exec.CommandContext(ctx, in.node, append([]string{filepath.Join(in.nodeModules, "vestauth", pkg.Bin["vestauth"])}, args...)...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NO_COLOR=1"}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// iopNeedCurl: vestauth's `agent curl` runs the curl binary.
func iopNeedCurl(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("vestauth agent curl needs the curl binary: %v", err)
		}
		t.Skipf("vestauth agent curl needs the curl binary: %v", err)
	}
}

// iopCLI runs the idcli command line in dir with an empty process environment.
func iopCLI(dir string, args ...string) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	env := &cliEnv{Stdin: strings.NewReader(""), Stdout: &o, Stderr: &e, Getenv: iopNoEnv, Dir: dir}
	err = run(context.Background(), args, env)
	return o.String(), e.String(), err
}

type iopWhoami struct {
	UID          string          `json:"uid"`
	Kid          string          `json:"kid"`
	PublicJWK    json.RawMessage `json:"public_jwk"`
	WellKnownURL string          `json:"well_known_url"`
	Error        json.RawMessage `json:"error"`
}

// vestauthWhoami runs `vestauth agent curl <hostname>/whoami` in dir and
// wants agentid to answer for uid with key kid. vestauth exits 0 even on
// HTTP 401, so the printed body is what counts.
func (in *interop) vestauthWhoami(t *testing.T, dir, hostname, uid, kid string) {
	t.Helper()
	url := hostname + "/whoami"
	out, errOut, err := in.vestauthCLI(t, dir, "agent", "curl", url)
	if err != nil {
		t.Fatalf("vestauth agent curl %s (GET, signed by vestauth from %s/.env): %v\nstdout: %s\nstderr: %s", url, dir, err, out, errOut)
	}
	var got iopWhoami
	if jerr := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); jerr != nil {
		t.Fatalf("vestauth agent curl %s printed no JSON (%v): %s\nstderr: %s", url, jerr, out, errOut)
	}
	if got.Error != nil || got.UID != uid || got.Kid != kid {
		t.Errorf("agentid on vestauth's GET %s: answered %s, want uid %s kid %s", url, strings.TrimSpace(out), uid, kid)
	}
}

// iopEnvValue returns KEY's value from dir/.env as agentid reads it.
func iopEnvValue(t *testing.T, dir, key string) string {
	t.Helper()
	f, err := agent.ReadEnvFile(filepath.Join(dir, ".env"))
	if err != nil {
		t.Fatalf("read %s/.env: %v", dir, err)
	}
	v, _ := f.Get(key)
	return v
}

// Groups 3 and 4, the parts that need no vestauth-compat routes: vestauth's
// CLI signs with credentials written by `idcli agent init`, and reads them
// back after `idcli agent rotate`; agentid's /whoami accepts its requests.
func TestInteropVestauthCLIUsesIdcliCredentials(t *testing.T) {
	t.Parallel()
	in := needInterop(t)
	iopNeedCurl(t)
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		if err := refserver.Migrate(context.Background(), db, nil); err != nil {
			t.Fatalf("migrate: %v", err)
		}
		_, hostname := iopStartRefServer(t, db, nil)
		dir := t.TempDir()
		if out, errOut, err := iopCLI(dir, "agent", "init", "--hostname", hostname); err != nil {
			t.Fatalf("idcli agent init --hostname %s: %v\n%s%s", hostname, err, out, errOut)
		}
		uid := iopEnvValue(t, dir, agent.EnvUID)
		pub, err := signer.ParsePublicJWK([]byte(iopEnvValue(t, dir, agent.EnvPublicJWK)))
		if err != nil {
			t.Fatalf("AGENT_PUBLIC_JWK written by idcli: %v", err)
		}
		in.vestauthWhoami(t, dir, hostname, uid, pub.JWK.Kid)

		if out, errOut, err := iopCLI(dir, "agent", "rotate"); err != nil {
			t.Fatalf("idcli agent rotate: %v\n%s%s", err, out, errOut)
		}
		next, err := signer.ParsePublicJWK([]byte(iopEnvValue(t, dir, agent.EnvPublicJWK)))
		if err != nil {
			t.Fatalf("AGENT_PUBLIC_JWK after idcli agent rotate: %v", err)
		}
		if next.JWK.Kid == pub.JWK.Kid {
			t.Fatalf("idcli agent rotate kept kid %s", pub.JWK.Kid)
		}
		in.vestauthWhoami(t, dir, hostname, uid, next.JWK.Kid)

		// vestauth's own reading of the rotated file: the key it signs with.
		out, errOut, err := in.vestauthCLI(t, dir, "agent", "headers", "GET", hostname+"/whoami")
		if err != nil {
			t.Fatalf("vestauth agent headers after idcli agent rotate: %v\n%s%s", err, out, errOut)
		}
		var h map[string]string
		if err := json.Unmarshal([]byte(out), &h); err != nil {
			t.Fatalf("vestauth agent headers printed %q: %v", out, err)
		}
		if want := `keyid="` + next.JWK.Kid + `"`; !strings.Contains(h["Signature-Input"], want) {
			t.Errorf("vestauth agent headers after idcli agent rotate: Signature-Input %q, want %s", h["Signature-Input"], want)
		}
		if want := `sig1="http://` + uid + `.` + strings.TrimPrefix(hostname, "http://") + `"`; h["Signature-Agent"] != want {
			t.Errorf("vestauth agent headers: Signature-Agent %q, want %q", h["Signature-Agent"], want)
		}
	})
}

// iopAnswer is a response status with its error code, if any.
type iopAnswer struct {
	status int
	code   string
	body   string
}

// iopSend makes one request to url (host, if set, replaces the Host header)
// carrying headers, and returns the status and the error code of the body.
func iopSend(t *testing.T, method, url, host string, headers map[string]string, body []byte) iopAnswer {
	t.Helper()
	a, err := iopDo(method, url, host, headers, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// iopDo is iopSend for any goroutine.
func iopDo(method, url, host string, headers map[string]string, body []byte) (iopAnswer, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return iopAnswer{}, err
	}
	if host != "" {
		req.Host = host
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return iopAnswer{}, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return iopAnswer{}, fmt.Errorf("%s %s: read body: %w", method, url, err)
	}
	var e struct {
		Error struct {
			Code any `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	code := ""
	if e.Error.Code != nil {
		code = fmt.Sprint(e.Error.Code)
	}
	return iopAnswer{status: resp.StatusCode, code: code, body: string(b)}, nil
}

// iopRegisteredAgent registers key with the reference server at hostname
// through `idcli agent init` and returns the credentials folder and uid.
func iopRegisteredAgent(t *testing.T, hostname string, key signer.PrivateKey) (dir, uid string) {
	t.Helper()
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte("AGENT_PRIVATE_JWK='"+string(key.MarshalPrivateJWK())+"'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, err := iopCLI(dir, "agent", "init", "--hostname", hostname); err != nil {
		t.Fatalf("idcli agent init --hostname %s: %v\n%s%s", hostname, err, out, errOut)
	}
	return dir, iopEnvValue(t, dir, agent.EnvUID)
}

// iopHandBuilt signs an @authority-only request for rawURL with a
// Signature-Input given as text (for parameters signer.Options cannot make,
// such as no expires).
func iopHandBuilt(t *testing.T, rawURL, params, origin string, key signer.PrivateKey) map[string]string {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, rawURL, nil)
	base, err := signer.SignatureBase(r, params)
	if err != nil {
		t.Fatalf("signature base for %s: %v", params, err)
	}
	sig := ed25519.Sign(key.Key, base)
	return map[string]string{
		"Signature":       "sig1=:" + base64.StdEncoding.EncodeToString(sig) + ":",
		"Signature-Input": "sig1=" + params,
		"Signature-Agent": `sig1="` + origin + `"`,
	}
}

// The signatures vestauth's verifier wrongly accepts (PEERS.md weaknesses
// 1–4), each shown accepted by vestauth 0.21.1's primitives.verify — the
// check its own server runs — and rejected by agentid's reference server.
func TestInteropAttacksVestauthAcceptsAgentidRejects(t *testing.T) {
	t.Parallel()
	in := needInterop(t)
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		if err := refserver.Migrate(context.Background(), db, nil); err != nil {
			t.Fatalf("migrate: %v", err)
		}
		srv, hostname := iopStartRefServer(t, db, nil)
		_, uid := iopRegisteredAgent(t, hostname, interopKey)
		origin := srv.AgentOrigin(uid)
		whoami := hostname + "/whoami"
		serverURL := "http://127.0.0.1" + hostname[strings.LastIndex(hostname, ":"):]
		pub := iopPublicJWK(t, interopKey)

		vestauthSign := func(t *testing.T, method, url string) map[string]string {
			return iopVestauthSign(t, in, method, url, uid, hostname)
		}
		// vestauthAccepts shows the attack working against vestauth's verifier.
		vestauthAccepts := func(t *testing.T, method, url string, h map[string]string, attack string) {
			t.Helper()
			v := in.drive(t, "vestauth-verify.mjs", map[string]any{"method": method, "url": url, "headers": h, "public_jwk": pub}, nil)
			if !v.OK {
				t.Errorf("attack %q no longer works on %s: it rejects %s %s: %s", attack, v.Peer, method, url, v.Error)
			}
		}
		rejects := func(t *testing.T, got iopAnswer, want int, codes ...string) {
			t.Helper()
			if got.status != want || (len(codes) > 0 && !iopContains(codes, got.code)) {
				t.Errorf("agentid answered %d %s, want %d %v", got.status, got.body, want, codes)
			}
		}

		t.Run("replayed nonce", func(t *testing.T) {
			h := vestauthSign(t, "GET", whoami)
			vestauthAccepts(t, "GET", whoami, h, "replay")
			vestauthAccepts(t, "GET", whoami, h, "replay")
			if got := iopSend(t, "GET", whoami, "", h, nil); got.status != http.StatusOK {
				t.Fatalf("agentid rejected vestauth's first GET %s: %d %s", whoami, got.status, got.body)
			}
			rejects(t, iopSend(t, "GET", whoami, "", h, nil), http.StatusUnauthorized, "replayed_nonce")
		})

		t.Run("created far in the future without expires", func(t *testing.T) {
			params := `("@authority");created=9999999999;keyid="` + interopKey.KeyID() + `";alg="ed25519";nonce="future-1";tag="web-bot-auth"`
			h := iopHandBuilt(t, whoami, params, origin, interopKey)
			vestauthAccepts(t, "GET", whoami, h, "created=9999999999, no expires")
			rejects(t, iopSend(t, "GET", whoami, "", h, nil), http.StatusUnauthorized, "invalid_signature_input", "signature_not_yet_valid")

			params = `("@authority");created=9999999999;keyid="` + interopKey.KeyID() + `";alg="ed25519";expires=10000000299;nonce="future-2";tag="web-bot-auth"`
			h = iopHandBuilt(t, whoami, params, origin, interopKey)
			vestauthAccepts(t, "GET", whoami, h, "created=9999999999")
			rejects(t, iopSend(t, "GET", whoami, "", h, nil), http.StatusUnauthorized, "signature_not_yet_valid")
		})

		t.Run("Host header swap", func(t *testing.T) {
			// Headers the agent made for a third-party tool, replayed to the
			// service with that tool's name in Host.
			h := vestauthSign(t, "GET", "https://evil-tool.example/x")
			// vestauth's server rebuilds the URL from Host: http://evil-tool.example/rotate.
			vestauthAccepts(t, "POST", "http://evil-tool.example/rotate", h, "Host swap")
			body := []byte(`{"public_jwk":` + string(interopOther.Public.JWK.MarshalPublic()) + `}`)
			rejects(t, iopSend(t, "PUT", serverURL+"/agents/"+uid+"/keys", "evil-tool.example", h, body), http.StatusMisdirectedRequest, "misdirected_request")
			rejects(t, iopSend(t, "GET", serverURL+"/whoami", "evil-tool.example", h, nil), http.StatusMisdirectedRequest, "misdirected_request")
		})

		t.Run("signature for one route reused on another", func(t *testing.T) {
			h := vestauthSign(t, "GET", whoami)
			vestauthAccepts(t, "POST", hostname+"/rotate", h, "route reuse")
			body := []byte(`{"public_jwk":` + string(interopOther.Public.JWK.MarshalPublic()) + `}`)
			rejects(t, iopSend(t, "PUT", hostname+"/agents/"+uid+"/keys", "", h, body), http.StatusUnauthorized, "missing_components")
			iopCheckDirectory(t, in, srv.WellKnownURL(uid), interopKey.KeyID())
		})
	})
}

func iopContains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// iopCompat turns on the vestauth-compat routes (POST /register, POST /rotate).
func iopCompat(c *refserver.Config) { c.VestauthCompat = true }

// Group 3: the vestauth CLI works against agentid with the vestauth-compat
// routes: init (twice), curl /whoami, rotate, curl again; the directory then
// lists only the new key and the old key is refused.
func TestInteropVestauthCLIAgainstCompat(t *testing.T) {
	t.Parallel()
	in := needInterop(t)
	iopNeedCurl(t)
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		if err := refserver.Migrate(context.Background(), db, nil); err != nil {
			t.Fatalf("migrate: %v", err)
		}
		srv, hostname := iopStartRefServer(t, db, iopCompat)
		dir := t.TempDir()

		out, errOut, err := in.vestauthCLI(t, dir, "agent", "init", "--hostname", hostname)
		if err != nil {
			t.Fatalf("vestauth agent init --hostname %s (POST %s/register): %v\nstdout: %s\nstderr: %s", hostname, hostname, err, out, errOut)
		}
		uid := iopEnvValue(t, dir, agent.EnvUID)
		if !signer.ValidUID(uid) {
			t.Fatalf("vestauth agent init wrote AGENT_UID=%q, want agent-<24 hex>", uid)
		}
		for _, want := range []string{"✔ agent created (.env/AGENT_UID=" + uid + ")", "⮕ next run: [vestauth agent curl " + hostname + "/whoami]"} {
			if !strings.Contains(out, want) {
				t.Errorf("vestauth agent init printed %q, want a line %q", out, want)
			}
		}
		out, errOut, err = in.vestauthCLI(t, dir, "agent", "init", "--hostname", hostname)
		if want := "• agent exists (.env/AGENT_UID=" + uid + ")"; err != nil || !strings.Contains(out, want) {
			t.Errorf("second vestauth agent init (POST %s/register, same key): err=%v stdout=%q stderr=%q, want a line %q", hostname, err, out, errOut, want)
		}
		first, err := signer.ParsePublicJWK([]byte(iopEnvValue(t, dir, agent.EnvPublicJWK)))
		if err != nil {
			t.Fatalf("AGENT_PUBLIC_JWK written by vestauth: %v", err)
		}
		oldPriv := iopEnvValue(t, dir, agent.EnvPrivateJWK)
		in.vestauthWhoami(t, dir, hostname, uid, first.JWK.Kid)

		out, errOut, err = in.vestauthCLI(t, dir, "agent", "rotate")
		if err != nil {
			t.Fatalf("vestauth agent rotate (POST %s/rotate): %v\nstdout: %s\nstderr: %s", hostname, err, out, errOut)
		}
		if want := "✔ agent keys rotated (.env/AGENT_UID=" + uid + ")"; !strings.Contains(out, want) {
			t.Errorf("vestauth agent rotate printed %q, want a line %q", out, want)
		}
		next, err := signer.ParsePublicJWK([]byte(iopEnvValue(t, dir, agent.EnvPublicJWK)))
		if err != nil || next.JWK.Kid == first.JWK.Kid {
			t.Fatalf("AGENT_PUBLIC_JWK after vestauth agent rotate: kid %q (was %q), err %v", next.JWK.Kid, first.JWK.Kid, err)
		}
		in.vestauthWhoami(t, dir, hostname, uid, next.JWK.Kid)
		iopCheckDirectory(t, in, srv.WellKnownURL(uid), next.JWK.Kid)

		// The old key is refused now.
		var oldJWK map[string]any
		if err := json.Unmarshal([]byte(oldPriv), &oldJWK); err != nil {
			t.Fatal(err)
		}
		var signed struct {
			Headers map[string]string `json:"headers"`
		}
		if v := in.drive(t, "vestauth-sign.mjs", map[string]any{"method": "GET", "url": hostname + "/whoami", "uid": uid, "private_jwk": oldJWK, "hostname": hostname}, &signed); !v.OK {
			t.Fatalf("%s could not sign with the old key: %s", v.Peer, v.Error)
		}
		if got := iopSend(t, "GET", hostname+"/whoami", "", signed.Headers, nil); got.status != http.StatusUnauthorized || got.code != "revoked_key" {
			t.Errorf("agentid on vestauth's GET %s/whoami signed by the rotated-out key: %d %s, want 401 revoked_key", hostname, got.status, got.body)
		}
	})
}

// Group 4: a .env written by the vestauth CLI is used unchanged by `idcli
// agent curl`; after `idcli agent rotate` on it, vestauth reads it back
// (curl and a further vestauth rotate), and idcli reads vestauth's rewrite.
func TestInteropEnvFileSharedWithVestauth(t *testing.T) {
	t.Parallel()
	in := needInterop(t)
	iopNeedCurl(t)
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		if err := refserver.Migrate(context.Background(), db, nil); err != nil {
			t.Fatalf("migrate: %v", err)
		}
		_, hostname := iopStartRefServer(t, db, iopCompat)
		dir := t.TempDir()
		if out, errOut, err := in.vestauthCLI(t, dir, "agent", "init", "--hostname", hostname); err != nil {
			t.Fatalf("vestauth agent init --hostname %s: %v\nstdout: %s\nstderr: %s", hostname, err, out, errOut)
		}
		envPath := filepath.Join(dir, ".env")
		written, err := os.ReadFile(envPath)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(written, []byte(`AGENT_PUBLIC_JWK="{"`)) {
			t.Fatalf("vestauth wrote an unexpected .env format (want JSON in double quotes, unescaped):\n%s", written)
		}
		uid := iopEnvValue(t, dir, agent.EnvUID)
		first, err := signer.ParsePublicJWK([]byte(iopEnvValue(t, dir, agent.EnvPublicJWK)))
		if err != nil {
			t.Fatalf("AGENT_PUBLIC_JWK written by vestauth, as idcli reads it: %v", err)
		}

		idcliWhoami := func(t *testing.T, kid string) {
			t.Helper()
			out, errOut, err := iopCLI(dir, "agent", "curl", hostname+"/whoami")
			var got iopWhoami
			if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.UID != uid || got.Kid != kid {
				t.Errorf("idcli agent curl %s/whoami with vestauth's .env: err=%v stdout=%q stderr=%q, want uid %s kid %s", hostname, err, out, errOut, uid, kid)
			}
		}
		idcliWhoami(t, first.JWK.Kid)
		if after, _ := os.ReadFile(envPath); !bytes.Equal(after, written) {
			t.Errorf("idcli agent curl changed vestauth's .env:\nbefore:\n%s\nafter:\n%s", written, after)
		}

		if out, errOut, err := iopCLI(dir, "agent", "rotate"); err != nil {
			t.Fatalf("idcli agent rotate on vestauth's .env (PUT %s/agents/%s/keys): %v\n%s%s", hostname, uid, err, out, errOut)
		}
		second, err := signer.ParsePublicJWK([]byte(iopEnvValue(t, dir, agent.EnvPublicJWK)))
		if err != nil || second.JWK.Kid == first.JWK.Kid {
			t.Fatalf("after idcli agent rotate: kid %q (was %q), err %v", second.JWK.Kid, first.JWK.Kid, err)
		}
		in.vestauthWhoami(t, dir, hostname, uid, second.JWK.Kid)

		out, errOut, err := in.vestauthCLI(t, dir, "agent", "rotate")
		if err != nil {
			t.Fatalf("vestauth agent rotate after idcli agent rotate (POST %s/rotate): %v\nstdout: %s\nstderr: %s", hostname, err, out, errOut)
		}
		third, err := signer.ParsePublicJWK([]byte(iopEnvValue(t, dir, agent.EnvPublicJWK)))
		if err != nil || third.JWK.Kid == second.JWK.Kid {
			t.Fatalf("after vestauth agent rotate: kid %q (was %q), err %v", third.JWK.Kid, second.JWK.Kid, err)
		}
		idcliWhoami(t, third.JWK.Kid)
	})
}

// The compat routes keep the native protections against what vestauth's
// own server accepts: a captured rotation cannot be replayed, and headers
// made for another host cannot be presented with that Host.
func TestInteropCompatAttacksRejected(t *testing.T) {
	t.Parallel()
	in := needInterop(t)
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		if err := refserver.Migrate(context.Background(), db, nil); err != nil {
			t.Fatalf("migrate: %v", err)
		}
		srv, hostname := iopStartRefServer(t, db, iopCompat)
		_, uid := iopRegisteredAgent(t, hostname, interopKey)
		serverURL := "http://127.0.0.1" + hostname[strings.LastIndex(hostname, ":"):]
		sign := func(t *testing.T, method, url string) map[string]string {
			return iopVestauthSign(t, in, method, url, uid, hostname)
		}
		body := func(k signer.PrivateKey) []byte {
			return []byte(`{"public_jwk":` + string(k.Public.JWK.MarshalPublic()) + `}`)
		}

		t.Run("Host header swap on /rotate", func(t *testing.T) {
			h := sign(t, "GET", "https://evil-tool.example/x")
			got := iopSend(t, "POST", serverURL+"/rotate", "evil-tool.example", h, body(interopOther))
			if got.status != http.StatusMisdirectedRequest {
				t.Errorf("agentid on vestauth headers for evil-tool.example sent to POST /rotate with Host evil-tool.example: %d %s, want 421", got.status, got.body)
			}
			iopCheckDirectory(t, in, srv.WellKnownURL(uid), interopKey.KeyID())
		})

		t.Run("one captured /rotate sent three times at once", func(t *testing.T) {
			h := sign(t, "POST", hostname+"/rotate")
			keys := make([]signer.PrivateKey, 3)
			answers := make([]iopAnswer, 3)
			errs := make([]error, 3)
			var wg sync.WaitGroup
			for i := range keys {
				keys[i] = signer.NewPrivateKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{byte(0x51 + i)}, ed25519.SeedSize)))
				wg.Add(1)
				go func() {
					defer wg.Done()
					answers[i], errs[i] = iopDo("POST", hostname+"/rotate", "", h, body(keys[i]))
				}()
			}
			wg.Wait()
			won := -1
			for i, a := range answers {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				switch {
				case a.status == http.StatusOK && won < 0:
					won = i
				case a.status == http.StatusOK:
					t.Errorf("agentid accepted vestauth's captured POST %s/rotate twice (answers %d and %d)", hostname, won, i)
				case a.status != http.StatusUnauthorized && a.status != http.StatusConflict:
					t.Errorf("agentid on a concurrent copy of vestauth's POST %s/rotate: %d %s, want 401 or 409", hostname, a.status, a.body)
				}
			}
			if won < 0 {
				t.Fatalf("agentid accepted no copy of vestauth's POST %s/rotate: %+v", hostname, answers)
			}
			iopCheckDirectory(t, in, srv.WellKnownURL(uid), keys[won].KeyID())
		})

		t.Run("a /whoami request already served cannot rotate", func(t *testing.T) {
			key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x61}, ed25519.SeedSize)))
			_, uid := iopRegisteredAgent(t, hostname, key)
			var out struct {
				Headers map[string]string `json:"headers"`
			}
			if v := in.drive(t, "vestauth-sign.mjs", map[string]any{"method": "GET", "url": hostname + "/whoami", "uid": uid,
				"private_jwk": iopPrivateJWK(t, key), "hostname": hostname}, &out); !v.OK {
				t.Fatalf("%s could not sign GET %s/whoami: %s", v.Peer, hostname, v.Error)
			}
			if got := iopSend(t, "GET", hostname+"/whoami", "", out.Headers, nil); got.status != http.StatusOK {
				t.Fatalf("agentid on vestauth's GET %s/whoami: %d %s, want 200", hostname, got.status, got.body)
			}
			got := iopSend(t, "POST", hostname+"/rotate", "", out.Headers, body(interopOther))
			if got.status != http.StatusUnauthorized || got.code != "replayed_nonce" {
				t.Errorf("agentid on vestauth's headers of a served GET %s/whoami replayed to POST /rotate: %d %s, want 401 replayed_nonce", hostname, got.status, got.body)
			}
			iopCheckDirectory(t, in, srv.WellKnownURL(uid), key.KeyID())
		})
	})
}

// `idcli server start --vestauth-compat` serves vestauth's POST /register
// and POST /rotate; without the flag both are 404. Needs no peers.
func TestServerStartVestauthCompat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		args         []string
		wantRegister int
		wantRotate   int
		wantWarning  bool
	}{
		{"default off", nil, http.StatusNotFound, http.StatusNotFound, false},
		{"on", []string{"--vestauth-compat"}, http.StatusOK, http.StatusOK, true},
		{"explicitly off", []string{"--vestauth-compat=false"}, http.StatusNotFound, http.StatusNotFound, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			databaseURL := "sqlite://" + filepath.Join(dir, "agentid.db")
			if r := runServerCmd(context.Background(), dir, nil, "server", "db:migrate", "--database-url", databaseURL); r.err != nil {
				t.Fatal(r.err)
			}
			srv := startServer(t, dir, databaseURL, tt.args...)
			cur, next := scaleKey(byte(160+2*i)), scaleKey(byte(161+2*i))

			// vestauth's `agent init`: tag "null", no Signature-Agent, @authority only.
			reg, _ := http.NewRequest(http.MethodPost, srv.base+"/register", bytes.NewReader(scaleJWKBody(cur)))
			reg.Header.Set("Content-Type", "application/json")
			a := mustSend(t, http.DefaultClient, scaleSign(t, reg, cur, signer.Options{Tag: refserver.NullTag}))
			if a.status != tt.wantRegister {
				t.Fatalf("idcli server start %v: vestauth-style POST /register: status %d (%s), want %d", tt.args, a.status, a.code, tt.wantRegister)
			}
			uid := a.uid
			if uid == "" { // compat off: register natively to try /rotate
				uid = mustSend(t, http.DefaultClient, srv.registerReq(t, cur)).uid
			}

			// vestauth's `agent rotate`: the current key, Signature-Agent naming the agent.
			rot, _ := http.NewRequest(http.MethodPost, srv.base+"/rotate", bytes.NewReader(scaleJWKBody(next)))
			rot.Header.Set("Content-Type", "application/json")
			origin := "http://" + uid + "." + strings.TrimPrefix(srv.base, "http://")
			if a := mustSend(t, http.DefaultClient, scaleSign(t, rot, cur, signer.Options{SignatureAgent: origin})); a.status != tt.wantRotate {
				t.Errorf("idcli server start %v: vestauth-style POST /rotate: status %d (%s), want %d", tt.args, a.status, a.code, tt.wantRotate)
			}
			r := srv.stop(t)
			if got := strings.Contains(r.stderr, "vestauth compatibility on"); got != tt.wantWarning {
				t.Errorf("idcli server start %v: stderr has the compat warning = %v, want %v\n%s", tt.args, got, tt.wantWarning, r.stderr)
			}
		})
	}
}

// iopVestauthSign returns the headers vestauth's own signer makes for the
// interop agent (interopKey, uid at hostname) for method and url.
func iopVestauthSign(t *testing.T, in *interop, method, url, uid, hostname string) map[string]string {
	t.Helper()
	var out struct {
		Headers map[string]string `json:"headers"`
	}
	v := in.drive(t, "vestauth-sign.mjs", map[string]any{"method": method, "url": url, "uid": uid,
		"private_jwk": iopPrivateJWK(t, interopKey), "hostname": hostname}, &out)
	if !v.OK {
		t.Fatalf("%s could not sign %s %s: %s", v.Peer, method, url, v.Error)
	}
	return out.Headers
}
