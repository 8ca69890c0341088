package signer_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// heldSigner is a crypto.Signer whose private key the caller cannot read,
// as in an HSM: it counts calls and can be told to misbehave.
type heldSigner struct {
	priv  ed25519.PrivateKey
	calls int
	err   error
	wrong ed25519.PrivateKey // signs with this key instead when set
}

func (s *heldSigner) Public() crypto.PublicKey { return s.priv.Public() }

func (s *heldSigner) Sign(_ io.Reader, msg []byte, opts crypto.SignerOpts) ([]byte, error) {
	s.calls++
	if opts.HashFunc() != 0 {
		return nil, errors.New("held signer: Ed25519 signs the message, not a digest")
	}
	if s.err != nil {
		return nil, s.err
	}
	if s.wrong != nil {
		return ed25519.Sign(s.wrong, msg), nil
	}
	return ed25519.Sign(s.priv, msg), nil
}

// messageSigner also implements crypto.MessageSigner; SignMessage must be
// the method used.
type messageSigner struct {
	heldSigner
	messages int
}

func (s *messageSigner) SignMessage(r io.Reader, msg []byte, opts crypto.SignerOpts) ([]byte, error) {
	s.messages++
	return ed25519.Sign(s.priv, msg), nil
}

func TestSignWithCryptoSigner(t *testing.T) {
	t.Parallel()
	seed := signertest.Key(7)
	fixed := signer.Options{
		Created: time.Unix(1735689600, 0), Nonce: "n", SignatureAgent: "https://agent.example",
		Components: []string{"@method", "@authority", "@path"},
	}
	want, err := signer.Headers("GET", "https://api.example/whoami", seed, fixed)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("Signer", func(t *testing.T) {
		t.Parallel()
		hs := &heldSigner{priv: seed.Key}
		key, err := signer.NewSignerKey(hs)
		if err != nil {
			t.Fatal(err)
		}
		if key.Exportable() || len(key.Key) != 0 {
			t.Fatal("a signer-held key reports exportable bytes")
		}
		if key.KeyID() != seed.KeyID() {
			t.Errorf("kid = %s, want %s", key.KeyID(), seed.KeyID())
		}
		if j := key.JWK(); j.D != "" || strings.Contains(string(key.MarshalPrivateJWK()), `"d"`) {
			t.Errorf("signer-held key's JWK carries d: %s", key.MarshalPrivateJWK())
		}
		got, err := signer.Headers("GET", "https://api.example/whoami", key, fixed)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("headers = %+v, want %+v", got, want)
		}
		if hs.calls != 1 {
			t.Errorf("Sign calls = %d, want 1", hs.calls)
		}
	})
	t.Run("MessageSigner", func(t *testing.T) {
		t.Parallel()
		ms := &messageSigner{heldSigner: heldSigner{priv: seed.Key}}
		key, err := signer.NewSignerKey(ms)
		if err != nil {
			t.Fatal(err)
		}
		got, err := signer.Headers("GET", "https://api.example/whoami", key, fixed)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("headers = %+v, want %+v", got, want)
		}
		if ms.messages != 1 || ms.calls != 0 {
			t.Errorf("SignMessage calls = %d, Sign calls = %d, want 1 and 0", ms.messages, ms.calls)
		}
	})
}

func TestSignerKeyErrors(t *testing.T) {
	t.Parallel()
	seed := signertest.Key(8)
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := signer.NewSignerKey(ec); err == nil || !strings.Contains(err.Error(), "want an Ed25519 key") {
		t.Errorf("NewSignerKey(ECDSA) error = %v, want one asking for Ed25519", err)
	}
	if _, err := signer.NewSignerKey(nil); err == nil {
		t.Error("NewSignerKey(nil) succeeded")
	}
	tests := []struct {
		name string
		hs   *heldSigner
		want string
	}{
		{"signer fails", &heldSigner{priv: seed.Key, err: errors.New("token removed")}, "token removed"},
		{"signer answers for another key", &heldSigner{priv: seed.Key, wrong: signertest.Key(9).Key}, "does not verify"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, err := signer.NewSignerKey(tt.hs)
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest("GET", "https://api.example/", nil)
			err = signer.Sign(req, key, signer.Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Sign error = %v, want one containing %q", err, tt.want)
			}
			if req.Header.Get("Signature") != "" || req.Header.Get("Signature-Input") != "" {
				t.Error("a failed Sign left signature headers on the request")
			}
		})
	}
	if err := signer.Sign(httptest.NewRequest("GET", "https://api.example/", nil), signer.PrivateKey{}, signer.Options{}); err == nil {
		t.Error("Sign with the zero PrivateKey succeeded")
	}
}

func TestTransportWithCryptoSigner(t *testing.T) {
	t.Parallel()
	seed := signertest.Key(10)
	hs := &heldSigner{priv: seed.Key}
	key, err := signer.NewSignerKey(hs)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sigs, err := signer.ParseSignatures(r.Header.Values("Signature-Input"), r.Header.Values("Signature"))
		if err != nil || len(sigs) != 1 {
			http.Error(w, fmt.Sprintf("signatures: %v", err), http.StatusBadRequest)
			return
		}
		base, err := sigs[0].Base(r)
		if err == nil {
			err = seed.Public.Verify("", base, sigs[0].Value)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
		}
	}))
	defer srv.Close()
	tr := &signer.Transport{Key: key}
	for i := range 2 {
		req, _ := http.NewRequest("GET", srv.URL+"/whoami", nil)
		req.Host = "api.example"
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("round trip %d: status = %d, want 200", i, resp.StatusCode)
		}
	}
	if hs.calls != 2 {
		t.Errorf("Sign calls = %d, want 2 (one per round trip)", hs.calls)
	}
}

// BenchmarkSignCryptoSigner compares signing a request with the key's own
// bytes (the baseline) and through a crypto.Signer holding the same key
// (ed25519.PrivateKey itself), which adds the check of each signature
// against the public key.
func BenchmarkSignCryptoSigner(b *testing.B) {
	seed := signertest.Key(42)
	held, err := signer.NewSignerKey(seed.Key)
	if err != nil {
		b.Fatal(err)
	}
	opts := signer.Options{SignatureAgent: "https://agent.example", Created: time.Unix(1735689600, 0), Nonce: "n"}
	for _, bc := range []struct {
		name string
		key  signer.PrivateKey
	}{{"private-key", seed}, {"crypto.Signer", held}} {
		b.Run(bc.name, func(b *testing.B) {
			r := httptest.NewRequest("GET", "https://api.example/whoami", nil)
			b.ReportAllocs()
			for b.Loop() {
				delete(r.Header, "Signature")
				delete(r.Header, "Signature-Input")
				if err := signer.Sign(r, bc.key, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
