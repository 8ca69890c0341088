package agent_test

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
)

// tokenSigner stands in for a key in an HSM: a crypto.Signer whose private
// bytes the agent package cannot see.
type tokenSigner struct{ priv ed25519.PrivateKey }

func (s tokenSigner) Public() crypto.PublicKey { return s.priv.Public() }
func (s tokenSigner) Sign(_ io.Reader, msg []byte, _ crypto.SignerOpts) ([]byte, error) {
	return ed25519.Sign(s.priv, msg), nil
}

func heldKey(t *testing.T, b byte) signer.PrivateKey {
	t.Helper()
	k, err := signer.NewSignerKey(tokenSigner{fixedKey(b).Key})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestInitRotateExternalKey registers, uses and rotates a key held outside
// the credentials file; no private key is ever written to it.
func TestInitRotateExternalKey(t *testing.T) {
	t.Parallel()
	svc := newFakeService(t)
	dir := t.TempDir()
	path := filepath.Join(dir, ".env")
	ctx := context.Background()
	getenv := envOf(nil)
	cur := heldKey(t, 41)

	res, err := agent.Init(ctx, agent.InitOptions{Dir: dir, Hostname: svc.URL(), Getenv: getenv, Key: cur})
	if err != nil {
		t.Fatal(err)
	}
	if res.PublicJWK.Kid != cur.KeyID() {
		t.Errorf("registered kid = %s, want the external key's %s", res.PublicJWK.Kid, cur.KeyID())
	}
	noPrivate(t, path)

	creds, err := agent.Load(agent.LoadOptions{Dir: dir, Getenv: getenv, Key: cur})
	if err != nil {
		t.Fatal(err)
	}
	whoami(t, creds, svc.URL(), http.StatusOK)
	// Without the external key, the file alone cannot sign.
	if _, err := agent.Load(agent.LoadOptions{Dir: dir, Getenv: getenv}); err == nil || !strings.Contains(err.Error(), "missing AGENT_PRIVATE_JWK") {
		t.Errorf("Load without the key: error = %v, want missing AGENT_PRIVATE_JWK", err)
	}

	next := heldKey(t, 42)
	rot, err := agent.Rotate(ctx, agent.RotateOptions{Dir: dir, Getenv: getenv, Key: cur, Next: next})
	if err != nil {
		t.Fatal(err)
	}
	if rot.PublicJWK.Kid != next.KeyID() || rot.UID != res.UID {
		t.Errorf("Rotate = %+v, want uid %s and kid %s", rot, res.UID, next.KeyID())
	}
	noPrivate(t, path)
	if got := readFile(t, path); !strings.Contains(got, `"kid":"`+next.KeyID()+`"`) {
		t.Errorf("file =\n%s\nwant AGENT_PUBLIC_JWK of the new key", got)
	}
	whoami(t, creds, svc.URL(), http.StatusUnauthorized)
	creds2, err := agent.Load(agent.LoadOptions{Dir: dir, Getenv: getenv, Key: next})
	if err != nil {
		t.Fatal(err)
	}
	whoami(t, creds2, svc.URL(), http.StatusOK)
}

// TestExternalKeyRefusesFileKey: a credentials file that holds another
// private key is not silently paired with an external key.
func TestExternalKeyRefusesFileKey(t *testing.T) {
	t.Parallel()
	svc := newFakeService(t)
	dir := t.TempDir()
	path := filepath.Join(dir, ".env")
	fileKey := fixedKey(43)
	writeFile(t, path, "AGENT_UID=\""+uid("a")+"\"\nAGENT_PRIVATE_JWK='"+string(fileKey.MarshalPrivateJWK())+"'\n")
	before := readFile(t, path)
	ctx := context.Background()
	_, err := agent.Init(ctx, agent.InitOptions{Dir: dir, Hostname: svc.URL(), Getenv: envOf(nil), Key: heldKey(t, 44)})
	if err == nil || !strings.Contains(err.Error(), "remove AGENT_PRIVATE_JWK") {
		t.Errorf("Init error = %v, want one asking to remove AGENT_PRIVATE_JWK", err)
	}
	_, err = agent.Rotate(ctx, agent.RotateOptions{Dir: dir, Hostname: svc.URL(), Getenv: envOf(nil), Key: heldKey(t, 44), Next: heldKey(t, 45)})
	if err == nil || !strings.Contains(err.Error(), "remove AGENT_PRIVATE_JWK") {
		t.Errorf("Rotate error = %v, want one asking to remove AGENT_PRIVATE_JWK", err)
	}
	if err != nil && strings.Contains(err.Error(), secret(fileKey)) {
		t.Error("error shows the file's private key")
	}
	if got := readFile(t, path); got != before {
		t.Errorf("file changed after refusals:\n%s", got)
	}
	svc.mu.Lock()
	n := len(svc.requests)
	svc.mu.Unlock()
	if n != 0 {
		t.Errorf("%d requests reached the service, want 0", n)
	}
}

func noPrivate(t *testing.T, path string) {
	t.Helper()
	got := readFile(t, path)
	if strings.Contains(got, "AGENT_PRIVATE_JWK") || strings.Contains(got, `"d"`) {
		t.Errorf("file =\n%s\nwant no private key", got)
	}
}
