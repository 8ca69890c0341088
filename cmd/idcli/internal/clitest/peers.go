package clitest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/envfile"
	"github.com/agentid/agentid/signer/signertest/testenv"
)

// PeersEnvVar names the node_modules directory holding the interop peers,
// made by cmd/idcli/testdata/interop/install.sh:
//
//	cmd/idcli/testdata/interop/install.sh /tmp/agentid-interop
//	AGENTID_INTEROP_NODE_MODULES=/tmp/agentid-interop/node_modules go test -run Interop ./cmd/idcli
const PeersEnvVar = "AGENTID_INTEROP_NODE_MODULES"

// Peers locates node, the installed peers (npm vestauth 0.21.1 and
// web-bot-auth 0.1.3) and the driver scripts in cmd/idcli/testdata/interop.
type Peers struct {
	node        string
	nodeModules string
	scripts     string
}

// NeedPeers skips the test, saying why, unless the peers are installed.
// With CI set, it fails instead (variable unset, node or packages
// missing).
func NeedPeers(t testing.TB) *Peers {
	t.Helper()
	if testing.Short() {
		t.Skip("interop with the npm peers: skipped with -short")
	}
	nm := os.Getenv(PeersEnvVar)
	if nm == "" {
		testenv.SkipOrFail(t, "%s is not set: interop with vestauth and web-bot-auth skipped "+
			"(run cmd/idcli/testdata/interop/install.sh DIR, then set %s=DIR/node_modules)", PeersEnvVar, PeersEnvVar)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.SkipOrFail(t, "%s is set but node is not installed: %v", PeersEnvVar, err)
	}
	for _, pkg := range []string{"web-bot-auth", "vestauth"} {
		if _, err := os.Stat(filepath.Join(nm, pkg, "package.json")); err != nil {
			testenv.SkipOrFail(t, "%s=%s but %s is not installed there (run cmd/idcli/testdata/interop/install.sh): %v", PeersEnvVar, nm, pkg, err)
		}
	}
	return &Peers{node: node, nodeModules: nm, scripts: InteropDir()}
}

// InteropDir returns the absolute path of cmd/idcli/testdata/interop.
func InteropDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "interop")
}

// NeedVestauthCLI is NeedPeers for a test that runs the vestauth command
// line: its `agent curl` runs the curl binary, so the test is skipped too
// (with CI set, fails) when curl is not installed.
func NeedVestauthCLI(t testing.TB) *Peers {
	t.Helper()
	p := NeedPeers(t)
	if _, err := exec.LookPath("curl"); err != nil {
		testenv.SkipOrFail(t, "vestauth agent curl needs the curl binary: %v", err)
	}
	return p
}

// Verdict is a driver's answer: OK, or the peer's reason for refusing.
type Verdict struct {
	OK    bool   `json:"ok"`
	Peer  string `json:"peer"`
	Error string `json:"error"`
}

// Drive runs a driver script with args (JSON on stdin) and decodes its
// answer into out (when the peer accepted). A peer refusal (exit 1) is a
// Verdict with OK false; a broken driver (any other failure) fails the test.
func (p *Peers) Drive(t testing.TB, script string, args, out any) Verdict {
	t.Helper()
	payload, err := json.Marshal(args)
	if err != nil {
		t.Fatalf("%s: encode arguments: %v", script, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard only
	defer cancel()
	cmd := exec.CommandContext(ctx, p.node, filepath.Join(p.scripts, script), "-")
	cmd.Stdin = bytes.NewReader(payload)
	cmd.Env = append(os.Environ(), PeersEnvVar+"="+p.nodeModules, "NO_COLOR=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		t.Fatalf("%s: driver failed: %v\nstderr: %s\nstdout: %s", script, err, stderr.String(), stdout.String())
	}
	var v Verdict
	if jerr := json.Unmarshal(stdout.Bytes(), &v); jerr != nil {
		t.Fatalf("%s: driver printed no JSON verdict (%v)\nstderr: %s\nstdout: %s", script, jerr, stderr.String(), stdout.String())
	}
	if v.OK && out != nil {
		if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
			t.Fatalf("%s: decode answer: %v\n%s", script, err, stdout.String())
		}
	}
	return v
}

// VestauthCLI runs the vestauth command line (its package.json bin) in dir
// with a scrubbed environment: only PATH (for its curl), a private HOME and
// NO_COLOR, so AGENT_* settings come from dir/.env alone.
func (p *Peers) VestauthCLI(t testing.TB, dir string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	b, rerr := os.ReadFile(filepath.Join(p.nodeModules, "vestauth", "package.json"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	var pkg struct {
		Bin map[string]string `json:"bin"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil || pkg.Bin["vestauth"] == "" {
		t.Fatalf("vestauth package.json has no bin: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard only
	defer cancel()
	cmd := exec.CommandContext(ctx, p.node, append([]string{filepath.Join(p.nodeModules, "vestauth", pkg.Bin["vestauth"])}, args...)...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NO_COLOR=1"}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// Whoami is the body of a /whoami answer (or an error body).
type Whoami struct {
	UID          string          `json:"uid"`
	Kid          string          `json:"kid"`
	PublicJWK    json.RawMessage `json:"public_jwk"`
	WellKnownURL string          `json:"well_known_url"`
	Error        json.RawMessage `json:"error"`
}

// VestauthWhoami runs `vestauth agent curl <hostname>/whoami` in dir and
// wants the answer for uid with key kid. vestauth exits 0 even on HTTP 401,
// so the printed body is what counts.
func (p *Peers) VestauthWhoami(t testing.TB, dir, hostname, uid, kid string) {
	t.Helper()
	url := hostname + "/whoami"
	out, errOut, err := p.VestauthCLI(t, dir, "agent", "curl", url)
	if err != nil {
		t.Fatalf("vestauth agent curl %s (GET, signed by vestauth from %s/.env): %v\nstdout: %s\nstderr: %s", url, dir, err, out, errOut)
	}
	var got Whoami
	if jerr := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); jerr != nil {
		t.Fatalf("vestauth agent curl %s printed no JSON (%v): %s\nstderr: %s", url, jerr, out, errOut)
	}
	if got.Error != nil || got.UID != uid || got.Kid != kid {
		t.Errorf("agentid on vestauth's GET %s: answered %s, want uid %s kid %s", url, strings.TrimSpace(out), uid, kid)
	}
}

// VestauthSign returns the headers vestauth's own signer makes for the agent
// uid at hostname holding key, for method and url.
func (p *Peers) VestauthSign(t testing.TB, method, url, uid, hostname string, key signer.PrivateKey) map[string]string {
	t.Helper()
	var out struct {
		Headers map[string]string `json:"headers"`
	}
	v := p.Drive(t, "vestauth-sign.mjs", map[string]any{"method": method, "url": url, "uid": uid,
		"private_jwk": PrivateJWKMap(t, key), "hostname": hostname}, &out)
	if !v.OK {
		t.Fatalf("%s could not sign %s %s: %s", v.Peer, method, url, v.Error)
	}
	return out.Headers
}

// CheckDirectory fetches the key directory at url with web-bot-auth's
// driver and wants exactly one key, kid wantKid, each kid equal to
// web-bot-auth's jwkToKeyID, and the drafts' media type.
func (p *Peers) CheckDirectory(t testing.TB, url, wantKid string) {
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
	v := p.Drive(t, "wba-keyid.mjs", map[string]any{"url": url}, &got)
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

// PublicJWKMap is k's public JWK as a JSON object.
func PublicJWKMap(t testing.TB, k signer.PrivateKey) map[string]any {
	t.Helper()
	return jsonObject(t, k.Public.JWK.MarshalPublic())
}

// PrivateJWKMap is k's private JWK as a JSON object.
func PrivateJWKMap(t testing.TB, k signer.PrivateKey) map[string]any {
	t.Helper()
	return jsonObject(t, k.MarshalPrivateJWK())
}

func jsonObject(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// HeaderMap is h as header name → value (Signature-Agent only when set).
func HeaderMap(h signer.SignatureHeaders) map[string]string {
	m := map[string]string{"Signature": h.Signature, "Signature-Input": h.SignatureInput}
	if h.SignatureAgent != "" {
		m["Signature-Agent"] = h.SignatureAgent
	}
	return m
}

// SignedRequest builds the request a server would see for method and url
// carrying headers.
func SignedRequest(method, url string, headers map[string]string) *http.Request {
	r := httptest.NewRequest(method, url, nil)
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	return r
}

// HandSigned signs an @authority-only GET of rawURL with a Signature-Input
// given as text (for parameters signer.Options cannot make, such as no
// expires) and returns the three headers.
func HandSigned(t testing.TB, rawURL, params, origin string, key signer.PrivateKey) map[string]string {
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

// EnvValue returns key's value in dir/.env as agentid reads it.
func EnvValue(t testing.TB, dir, key string) string {
	t.Helper()
	f, err := envfile.Read(filepath.Join(dir, ".env"))
	if err != nil {
		t.Fatalf("read %s/.env: %v", dir, err)
	}
	v, _ := f.Get(key)
	return v
}
