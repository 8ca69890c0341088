package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/envfile"
	"github.com/agentid/agentid/signer/pkcs11"
	"github.com/agentid/agentid/signer/pkcs11/softhsmtest"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/agentid/agentid/signer/signertest/testenv"
)

// buildIdcli builds this command into a temporary folder and returns the
// binary's path.
func buildIdcli(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the idcli binary: skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "idcli")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// needTool returns the path of the first of names found, skipping the
// test without it (failing under CI, which installs them).
func needTool(t *testing.T, why string, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	testenv.SkipOrFail(t, "%s not found: %s skipped", names[0], why)
	return ""
}

// procEnv is the test process's environment without any AGENT_*
// variable, plus extra ("K=V").
func procEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AGENT_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// runBin runs a program in dir with env and returns stdout, stderr and the
// exit status.
func runBin(t *testing.T, dir string, env []string, name string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out.String(), errb.String(), code
}

func envValue(t *testing.T, path, key string) string {
	t.Helper()
	f, err := envfile.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := f.Get(key)
	return v
}

// pythonWithCryptography is a python3 that imports cryptography ("" if none).
func pythonWithCryptography() string {
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import cryptography").Run() == nil {
			return p
		}
	}
	return ""
}

// TestSigningRecipes runs each recipe of docs/recipes against a reference
// server on PostgreSQL with an agent registered by the built idcli: each
// must get /whoami answered 200 with the agent's uid.
func TestSigningRecipes(t *testing.T) {
	srv := clitest.StartServer(t, clitest.ServerOptions{DatabaseURL: dbtest.PostgresURL(t)})
	bin := buildIdcli(t)
	home := t.TempDir()
	if out, errOut, code := runBin(t, home, procEnv(), bin, "agent", "init", "--hostname", srv.URL); code != 0 {
		t.Fatalf("agent init: exit %d\n%s%s", code, out, errOut)
	}
	envPath := filepath.Join(home, ".env")
	uid := envValue(t, envPath, "AGENT_UID")
	creds := []string{
		"AGENT_UID=" + uid,
		"AGENT_PRIVATE_JWK=" + envValue(t, envPath, "AGENT_PRIVATE_JWK"),
		"AGENT_HOSTNAME=" + envValue(t, envPath, "AGENT_HOSTNAME"),
	}
	if !strings.HasPrefix(uid, "agent-") || !strings.HasSuffix(creds[2], srv.URL) {
		t.Fatalf(".env after init: uid %q, %s; want an agent uid and %s", uid, creds[2], srv.URL)
	}
	recipes, err := filepath.Abs("../../docs/recipes")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		prog func(t *testing.T) []string
	}{
		{"python", func(t *testing.T) []string {
			py := pythonWithCryptography()
			if py == "" {
				needTool(t, "python3 with cryptography runs whoami.py", "python3-with-cryptography")
			}
			return []string{py, filepath.Join(recipes, "whoami.py")}
		}},
		{"node", func(t *testing.T) []string {
			return []string{needTool(t, "node runs whoami.mjs", "node"), filepath.Join(recipes, "whoami.mjs")}
		}},
		{"shell", func(t *testing.T) []string {
			needTool(t, "whoami.sh uses curl", "curl")
			needTool(t, "whoami.sh uses jq", "jq")
			return []string{needTool(t, "whoami.sh is bash", "bash"), filepath.Join(recipes, "whoami.sh")}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prog := tt.prog(t)
			// An empty folder: the recipe gets its credentials from the
			// environment only. The shell recipe finds idcli on PATH.
			env := procEnv(append(creds, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))...)
			out, errOut, code := runBin(t, t.TempDir(), env, prog[0], prog[1:]...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			var who struct {
				UID string `json:"uid"`
			}
			if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &who); err != nil || who.UID != uid {
				t.Errorf("/whoami answer = %q, want JSON with uid %s", out, uid)
			}
		})
	}
	// A recipe signing with a key the server does not know is refused:
	// the check above can fail.
	t.Run("unregistered key", func(t *testing.T) {
		node := needTool(t, "node runs whoami.mjs", "node")
		other := string(signertest.Key(0x5e).MarshalPrivateJWK())
		env := procEnv(creds[0], "AGENT_PRIVATE_JWK="+other, creds[2])
		if out, _, code := runBin(t, t.TempDir(), env, node, filepath.Join(recipes, "whoami.mjs")); code == 0 {
			t.Errorf("whoami.mjs with an unregistered key: exit 0, answer %s", out)
		}
	})
}

// TestExplainWrongMethod: headers signed for POST, verified as a GET,
// through the built binary; --explain names @method as the mismatch.
func TestExplainWrongMethod(t *testing.T) {
	t.Parallel()
	bin := buildIdcli(t)
	dir := t.TempDir()
	key := signertest.Key(0x77)
	uid := "agent-0123456789abcdef01234567"
	env := procEnv("AGENT_UID="+uid, "AGENT_PRIVATE_JWK="+string(key.MarshalPrivateJWK()), "AGENT_HOSTNAME=https://agentid.example")
	const target = "https://api.example/things"
	out, errOut, code := runBin(t, dir, env, bin, "agent", "headers", "POST", target, "--components", "@method,@authority,@path", "--explain")
	if code != 0 {
		t.Fatalf("agent headers: exit %d\n%s", code, errOut)
	}
	var h signer.SignatureHeaders
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		t.Fatalf("agent headers --explain stdout is not the JSON alone: %v\n%s", err, out)
	}
	for _, want := range []string{`"@method": POST`, `"@authority": api.example`, `"@path": /things`, `"@signature-params": ("@method" "@authority" "@path" "signature-agent";key="sig1")`, "✔ signature: verifies"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("agent headers --explain stderr =\n%s\nwant it to contain %q", errOut, want)
		}
	}
	jwk := string(key.Public.JWK.MarshalPublic())
	verify := func(method string) (string, int) {
		out, errOut, code := runBin(t, dir, env, bin, "tool", "verify", method, target,
			"--signature", h.Signature, "--signature-input", h.SignatureInput, "--signature-agent", h.SignatureAgent,
			"--jwk", jwk, "--explain")
		return out + errOut, code
	}
	got, code := verify("GET")
	if code != 1 {
		t.Fatalf("tool verify GET: exit %d, want 1\n%s", code, got)
	}
	for _, want := range []string{`"@method": GET`, "✘ signature: does not verify", `mismatch: the signature verifies with "@method": POST, not GET`, "invalid_signature"} {
		if !strings.Contains(got, want) {
			t.Errorf("tool verify GET --explain =\n%s\nwant it to contain %q", got, want)
		}
	}
	got, code = verify("POST")
	if code != 0 || !strings.Contains(got, "✔ signature: verifies") || strings.Contains(got, "mismatch") {
		t.Errorf("tool verify POST --explain: exit %d\n%s\nwant exit 0, verified, no mismatch", code, got)
	}
	d := key.JWK().D
	for _, s := range []string{out, errOut, got} {
		if strings.Contains(s, d) {
			t.Error("--explain output contains the private key")
		}
	}
}

// TestAgentPKCS11 registers, uses and rotates a key generated on a
// SoftHSM2 token through the built idcli, against a reference server on
// PostgreSQL; the private key never reaches .env and stays
// non-extractable on the token.
func TestAgentPKCS11(t *testing.T) {
	module, err := softhsmtest.Module()
	if err != nil {
		needTool(t, err.Error(), "softhsm2-util")
	}
	needTool(t, "a SoftHSM2 token is created with it", "softhsm2-util")
	// The token's user PIN: no digits alone, which a port or an id in the
	// output could contain.
	const pin = "pin-not-printed"
	srv := clitest.StartServer(t, clitest.ServerOptions{DatabaseURL: dbtest.PostgresURL(t)})
	bin := buildIdcli(t)
	conf, err := softhsmtest.NewToken(t.TempDir(), "idcli-test", pin)
	if err != nil {
		t.Fatal(err)
	}
	// The module reads SOFTHSM2_CONF when this process first loads it
	// (below); no other test of this package loads it.
	t.Setenv("SOFTHSM2_CONF", conf)
	uri := "pkcs11:token=idcli-test;object=crawler?module-path=" + module
	env := procEnv("SOFTHSM2_CONF="+conf, "AGENT_PKCS11_PIN="+pin)
	dir := t.TempDir()
	envPath := filepath.Join(dir, ".env")
	idcli := func(args ...string) string {
		t.Helper()
		out, errOut, code := runBin(t, dir, env, bin, args...)
		if code != 0 {
			t.Fatalf("idcli %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		if strings.Contains(out+errOut, pin) {
			t.Errorf("idcli %s printed the PIN", args[1])
		}
		return out
	}
	noPrivateKey := func() {
		t.Helper()
		b, err := os.ReadFile(envPath)
		if err != nil {
			t.Fatal(err)
		}
		if s := string(b); strings.Contains(s, "AGENT_PRIVATE_JWK") || strings.Contains(s, `"d"`) {
			t.Fatalf(".env holds a private key:\n%s", s)
		}
	}
	kidOf := func() string {
		t.Helper()
		pk, err := signer.ParsePublicJWK([]byte(envValue(t, envPath, "AGENT_PUBLIC_JWK")))
		if err != nil {
			t.Fatal(err)
		}
		return pk.JWK.Kid
	}

	if out := idcli("agent", "init", "--hostname", srv.URL, "--pkcs11-uri", uri); !strings.Contains(out, "agent created") {
		t.Fatalf("agent init = %q, want agent created", out)
	}
	noPrivateKey()
	uid, kid1 := envValue(t, envPath, "AGENT_UID"), kidOf()
	if out := idcli("agent", "curl", srv.URL+"/whoami", "--pkcs11-uri", uri); !strings.Contains(out, uid) {
		t.Fatalf("agent curl /whoami = %q, want uid %s", out, uid)
	}
	var before signer.SignatureHeaders
	if err := json.Unmarshal([]byte(idcli("agent", "headers", "GET", srv.URL+"/whoami", "--pkcs11-uri", uri)), &before); err != nil {
		t.Fatal(err)
	}
	// Without the token, .env alone cannot sign.
	if _, errOut, code := runBin(t, dir, env, bin, "agent", "curl", srv.URL+"/whoami"); code == 0 || !strings.Contains(errOut, "AGENT_PRIVATE_JWK") {
		t.Errorf("agent curl without --pkcs11-uri: exit %d, stderr %q; want a missing AGENT_PRIVATE_JWK error", code, errOut)
	}

	idcli("agent", "rotate", "--pkcs11-uri", uri)
	noPrivateKey()
	kid2 := kidOf()
	if kid2 == kid1 || envValue(t, envPath, "AGENT_UID") != uid {
		t.Fatalf("after rotate: uid %s kid %s, want uid %s and a kid other than %s", envValue(t, envPath, "AGENT_UID"), kid2, uid, kid1)
	}
	if out := idcli("agent", "curl", srv.URL+"/whoami", "--pkcs11-uri", uri); !strings.Contains(out, uid) {
		t.Fatalf("agent curl /whoami after rotate = %q, want uid %s", out, uid)
	}
	// Headers made with the old key before the rotation are refused now.
	req, _ := http.NewRequest("GET", srv.URL+"/whoami", nil)
	req.Header.Set("Signature", before.Signature)
	req.Header.Set("Signature-Input", before.SignatureInput)
	req.Header.Set("Signature-Agent", before.SignatureAgent)
	if ans := clitest.MustSend(t, srv.Client, req); ans.Status != http.StatusUnauthorized {
		t.Errorf("old key's headers after rotation: status %d, want 401", ans.Status)
	}

	// On the token: one key with that label, the new one, not extractable.
	u, err := pkcs11.ParseURI(uri, func(k string) string { return map[string]string{pkcs11.EnvPIN: pin}[k] })
	if err != nil {
		t.Fatal(err)
	}
	k, err := pkcs11.Open(u)
	if err != nil {
		t.Fatalf("open the token key after rotation (the old one must be gone): %v", err)
	}
	defer k.Close()
	if got := signer.Thumbprint(k.Public().(ed25519.PublicKey)); got != kid2 {
		t.Errorf("token key kid = %s, want %s", got, kid2)
	}
	if err := k.CheckProtected(); err != nil {
		t.Error(err)
	}
}
