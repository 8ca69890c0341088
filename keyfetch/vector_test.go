package keyfetch_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
)

// e23 is protocol-01's E.2.3 example: a key directory at
// signature-agent.test whose response is signed over `"@authority";req`
// and `content-digest`.
type e23 struct {
	Key struct {
		JWK        map[string]string `json:"jwk"`
		Thumbprint string            `json:"thumbprint"`
	} `json:"key"`
	Response struct {
		Authority     string            `json:"request_authority"`
		Body          string            `json:"response_body"`
		Headers       map[string]string `json:"response_headers"`
		SignatureBase string            `json:"signature_base"`
	} `json:"signed_directory_response"`
}

func loadE23(t *testing.T) e23 {
	t.Helper()
	b, err := os.ReadFile("testdata/webbotauth_01_e23.json")
	if err != nil {
		t.Fatal(err)
	}
	var v e23
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// e23Fetcher returns a Fetcher that reaches http://<authority> on srv (its
// own dialer sends every connection there), requiring signed directories.
func e23Fetcher(t *testing.T, authority string, srv *httptest.Server) *keyfetch.Fetcher {
	t.Helper()
	addr := srv.Listener.Addr().String()
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return keyfetch.New(keyfetch.Config{
		TrustedHosts:             []string{authority},
		AllowHTTP:                true,
		HTTPClient:               &http.Client{Transport: tr},
		RequireSignedDirectories: true,
		Now:                      newClock().Now, // inside the example's validity window
	})
}

// TestProtocol01SignedDirectoryVector fetches E.2.3's response as published
// (headers and body byte for byte) and accepts its keys as authenticated;
// the signature base keyfetch verifies is the example's, byte for byte. A
// key injected into the body, or a signature over the authority alone,
// is refused.
func TestProtocol01SignedDirectoryVector(t *testing.T) {
	t.Parallel()
	v := loadE23(t)
	seed, err := base64.RawURLEncoding.DecodeString(v.Key.JWK["d"])
	if err != nil {
		t.Fatal(err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	serve := func(headers map[string]string, body string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for k, val := range headers {
				w.Header().Set(k, val)
			}
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	set := agentSet(t, "http://"+v.Response.Authority)

	t.Run("as published", func(t *testing.T) {
		f := e23Fetcher(t, v.Response.Authority, serve(v.Response.Headers, v.Response.Body))
		pk, err := f.Key(context.Background(), set, v.Key.Thumbprint)
		if err != nil || pk.Thumbprint != v.Key.Thumbprint {
			t.Fatalf("Key = %s, %v; want %s", pk.Thumbprint, err, v.Key.Thumbprint)
		}
		r, err := f.CheckKeySet(context.Background(), set)
		if err != nil || !r.Signed || !r.Verified || !r.Authenticated || len(r.SignedBy) != 1 || r.SignedBy[0] != v.Key.Thumbprint {
			t.Errorf("CheckKeySet = Signed %v Verified %v Authenticated %v SignedBy %q, %v; want all true, signed by %s",
				r.Signed, r.Verified, r.Authenticated, r.SignedBy, err, v.Key.Thumbprint)
		}
	})

	t.Run("signature base byte for byte", func(t *testing.T) {
		h := http.Header{}
		for k, val := range v.Response.Headers {
			h.Set(k, val)
		}
		sigs, err := signer.ParseSignatures(h.Values("Signature-Input"), h.Values("Signature"))
		if err != nil || len(sigs) != 1 {
			t.Fatalf("ParseSignatures = %d signatures, %v", len(sigs), err)
		}
		req := httptest.NewRequest(http.MethodGet, "http://"+v.Response.Authority+signer.DirectoryPath, nil)
		base, err := sigs[0].AppendResponseBase(nil, &http.Response{StatusCode: 200, Header: h, Request: req})
		if err != nil {
			t.Fatal(err)
		}
		if string(base) != v.Response.SignatureBase {
			t.Errorf("signature base:\n%s\nwant:\n%s", base, v.Response.SignatureBase)
		}
		if !ed25519.Verify(priv.Public().(ed25519.PublicKey), base, sigs[0].Value) {
			t.Error("the example's signature does not verify over the base")
		}
	})

	// The attacker's key, added to the published keys.
	injected := strings.Replace(v.Response.Body, `]}`, `,`+string(testKey(7).JWK.MarshalPublic())+`]}`, 1)

	t.Run("key injected into the body", func(t *testing.T) {
		f := e23Fetcher(t, v.Response.Authority, serve(v.Response.Headers, injected))
		_, err := f.Key(context.Background(), set, testKey(7).Thumbprint)
		if !errors.Is(err, keyfetch.ErrDirectorySignature) {
			t.Errorf("Key(injected) error = %v, want ErrDirectorySignature (Content-Digest does not match)", err)
		}
	})

	t.Run("signature over the authority alone", func(t *testing.T) {
		// Re-signed with the example's key over "@authority";req only: valid,
		// but it says nothing about the body.
		params := fmt.Sprintf(`("@authority";req);created=1735689600;expires=4889289600;keyid=%q;tag="http-message-signatures-directory"`, v.Key.Thumbprint)
		base := `"@authority";req: ` + v.Response.Authority + "\n\"@signature-params\": " + params
		headers := map[string]string{
			"Content-Type":    v.Response.Headers["Content-Type"],
			"Signature-Input": "binding=" + params,
			"Signature":       "binding=:" + base64.StdEncoding.EncodeToString(ed25519.Sign(priv, []byte(base))) + ":",
		}
		f := e23Fetcher(t, v.Response.Authority, serve(headers, injected))
		_, err := f.Key(context.Background(), set, testKey(7).Thumbprint)
		if !errors.Is(err, keyfetch.ErrUnsignedDirectory) {
			t.Errorf("Key(injected) error = %v, want ErrUnsignedDirectory (the signature does not cover the body)", err)
		}
	})
}
