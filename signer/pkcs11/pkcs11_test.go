//go:build cgo

package pkcs11

import (
	"crypto"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	p11 "github.com/miekg/pkcs11"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/pkcs11/softhsmtest"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/agentid/agentid/signer/signertest/testenv"
)

const (
	testToken = "agentid-test"
	testPIN   = "1234"
)

// testModule is the SoftHSM2 module, "" when SoftHSM2 is absent (the
// tests then skip, or fail under CI).
var testModule, skipReason string

// TestMain gives the test process its own SoftHSM2 token in a temporary
// folder: SOFTHSM2_CONF must be set before the module is first loaded.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		mod, err := softhsmtest.Module()
		if err != nil {
			skipReason = err.Error()
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "agentid-softhsm-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		conf, err := softhsmtest.NewToken(dir, testToken, testPIN)
		if err != nil {
			skipReason = err.Error()
			return m.Run()
		}
		os.Setenv("SOFTHSM2_CONF", conf)
		testModule = mod
		return m.Run()
	}())
}

func needToken(t *testing.T) {
	t.Helper()
	if testModule == "" {
		testenv.SkipOrFail(t, "SoftHSM2 is missing: %s", skipReason)
	}
}

func testURI(object string) URI {
	return URI{Token: testToken, Object: object, ModulePath: testModule, PIN: testPIN}
}

func TestGenerateSignOpen(t *testing.T) {
	needToken(t)
	u := testURI("gen-sign-open")
	k, err := Generate(u)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	pub, ok := k.Public().(ed25519.PublicKey)
	if !ok || len(pub) != ed25519.PublicKeySize {
		t.Fatalf("Public() = %T, want a 32-byte ed25519.PublicKey", k.Public())
	}
	msg := []byte("\"@authority\": api.example\n")
	sig, err := k.Sign(nil, msg, crypto.Hash(0))
	if err != nil {
		t.Fatal(err)
	}
	if !ed25519.Verify(pub, msg, sig) {
		t.Fatal("the token's signature does not verify with its public key")
	}
	if _, err := k.Sign(nil, msg, crypto.SHA256); err == nil {
		t.Error("Sign with a digest option succeeded")
	}

	// The key never leaves the token.
	if err := k.CheckProtected(); err != nil {
		t.Fatal(err)
	}
	attrs, err := k.ctx.GetAttributeValue(k.session, k.priv, []*p11.Attribute{p11.NewAttribute(p11.CKA_VALUE, nil)})
	if err == nil && len(attrs) == 1 && len(attrs[0].Value) > 0 {
		t.Fatalf("CKA_VALUE of the private key is readable (%d bytes)", len(attrs[0].Value))
	}

	// Open finds the same key by label in a new session.
	k2, err := Open(u)
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Close()
	if !pub.Equal(k2.Public()) {
		t.Error("Open found a different public key")
	}
	if string(k2.ID()) != string(k.ID()) {
		t.Errorf("Open id = %x, want %x", k2.ID(), k.ID())
	}

	// Through the signer seam, the same headers verify.
	key, err := signer.NewSignerKey(k2)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "https://api.example/whoami", nil)
	if err := signer.Sign(req, key, signer.Options{}); err != nil {
		t.Fatal(err)
	}
	first, base := signertest.FirstBase(t, req)
	if !ed25519.Verify(pub, base, first.Value) {
		t.Error("signed request does not verify")
	}
	if strings.Contains(string(key.MarshalPrivateJWK()), `"d"`) {
		t.Error("the token key's JWK carries d")
	}
}

func TestConcurrentSign(t *testing.T) {
	needToken(t)
	k, err := Generate(testURI("concurrent"))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			msg := []byte(fmt.Sprintf("message %d", i))
			sig, err := k.Sign(nil, msg, crypto.Hash(0))
			if err == nil && !ed25519.Verify(k.Public().(ed25519.PublicKey), msg, sig) {
				err = fmt.Errorf("signature %d does not verify", i)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	needToken(t)
	dup := testURI("duplicate")
	for range 2 {
		k, err := Generate(dup)
		if err != nil {
			t.Fatal(err)
		}
		k.Close()
	}
	gone := testURI("destroyed")
	k, err := Generate(gone)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Destroy(); err != nil {
		t.Fatal(err)
	}
	k.Close()
	if _, err := k.Sign(nil, []byte("x"), crypto.Hash(0)); err == nil {
		t.Error("Sign after Close succeeded")
	}
	wrongPIN := testURI("duplicate")
	wrongPIN.PIN = "9999"
	noToken := testURI("x")
	noToken.Token = "no-such-token"
	noPIN := testURI("x")
	noPIN.PIN = ""
	badModule := testURI("x")
	badModule.ModulePath = "/nonexistent/module.so"
	tests := []struct {
		name string
		u    URI
		want string
	}{
		{"no such object", testURI("never-created"), "no private key labelled"},
		{"destroyed", gone, "no private key labelled"},
		{"two keys share the label", dup, "several private keys"},
		{"wrong PIN", wrongPIN, "wrong PIN"},
		{"no PIN", noPIN, "no PIN"},
		{"no such token", noToken, "no token labelled"},
		{"no such module", badModule, "cannot load module"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := Open(tt.u)
			if err == nil {
				k.Close()
				t.Fatalf("Open succeeded, want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to contain %q", err, tt.want)
			}
			if strings.Contains(tt.want, "no private key") != errors.Is(err, ErrNoKey) {
				t.Errorf("errors.Is(%v, ErrNoKey) = %v", err, errors.Is(err, ErrNoKey))
			}
			if tt.u.PIN != "" && strings.Contains(err.Error(), tt.u.PIN) {
				t.Errorf("error %q contains the PIN", err)
			}
		})
	}
	// With the id, one of the two duplicates is chosen.
	k1, err := Generate(testURI("by-id"))
	if err != nil {
		t.Fatal(err)
	}
	defer k1.Close()
	k2, err := Generate(testURI("by-id"))
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Close()
	byID := testURI("by-id")
	byID.ID = k2.ID()
	k3, err := Open(byID)
	if err != nil {
		t.Fatal(err)
	}
	defer k3.Close()
	if !k3.Public().(ed25519.PublicKey).Equal(k2.Public()) {
		t.Error("Open with id= found the other key")
	}
}
