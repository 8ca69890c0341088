package signer_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// e23 is the protocol-01 E.2.3 signed directory response of
// testdata/vectors.json.
type e23 struct {
	Authority string            `json:"request_authority"`
	Body      string            `json:"response_body"`
	Headers   map[string]string `json:"response_headers"`
	Base      string            `json:"signature_base"`
}

func loadE23(t *testing.T) e23 {
	t.Helper()
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		V e23 `json:"webbotauth_01_e23_signed_directory_response"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.V
}

// The directory signature base is the vector's byte for byte, the
// vector's signature verifies, and signing its parameters with the
// vector's key reproduces its Signature (Ed25519 is deterministic).
func TestDirectorySignatureProtocol01E23(t *testing.T) {
	t.Parallel()
	v := loadE23(t)
	sigs, err := signer.ParseSignatures([]string{v.Headers["Signature-Input"]}, []string{v.Headers["Signature"]})
	if err != nil || len(sigs) != 1 {
		t.Fatalf("vector: %v", err)
	}
	resp, err := signer.DirectoryResponse("https", v.Authority, []byte(v.Body))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.Header.Get("Content-Digest"), v.Headers["Content-Digest"]; got != want {
		t.Errorf("Content-Digest = %s, want %s", got, want)
	}
	base, err := sigs[0].AppendResponseBase(nil, resp)
	if err != nil || string(base) != v.Base {
		t.Fatalf("base =\n%s\nwant\n%s (err %v)", base, v.Base, err)
	}
	key := loadVectors(t).PrivateKey(t)
	if err := signer.VerifyDirectory(&sigs[0], key.Public, "https", v.Authority, []byte(v.Body)); err != nil {
		t.Errorf("VerifyDirectory(vector) = %v", err)
	}
	// Given the vector's Content-Digest the body is not needed; given
	// another body's, the signature does not verify.
	if err := signer.VerifyDirectoryDigest(&sigs[0], key.Public, "https", v.Authority, v.Headers["Content-Digest"]); err != nil {
		t.Errorf("VerifyDirectoryDigest(vector) = %v", err)
	}
	other, _ := signer.ContentDigest([]byte(v.Body+" "), signer.DirectoryDigestAlg)
	if err := signer.VerifyDirectoryDigest(&sigs[0], key.Public, "https", v.Authority, other); err == nil {
		t.Error("VerifyDirectoryDigest with another body's digest verified")
	}
	if err := signer.VerifyDirectoryDigest(&sigs[0], key.Public, "https", "bad/authority", v.Headers["Content-Digest"]); !errors.Is(err, signer.ErrInvalidAuthority) {
		t.Errorf("VerifyDirectoryDigest with a bad authority = %v, want ErrInvalidAuthority", err)
	}
	ds, err := signer.SignDirectoryAs(key, &sigs[0], "https", v.Authority, []byte(v.Body))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimPrefix(v.Headers["Signature"], "binding=")
	if got := ":" + base64.StdEncoding.EncodeToString(ds.Value) + ":"; got != want {
		t.Errorf("Signature = %s, want %s", got, want)
	}
	if got, want := ds.Input, strings.TrimPrefix(v.Headers["Signature-Input"], "binding="); got != want {
		t.Errorf("Input = %s, want %s", got, want)
	}
}

// A signature made by SignDirectory verifies over the same response only:
// another agent, port or body fails.
func TestSignDirectoryRoundTrip(t *testing.T) {
	t.Parallel()
	key := signertest.Key(3)
	body := signer.DirectoryBody([]signer.JWK{key.Public.JWK})
	created := time.Unix(1_800_000_000, 0)
	ds, err := signer.SignDirectory(key, "http", "agent-0123456789abcdef01234567.localhost:3000", body, created, created.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := `("@authority";req "content-digest");created=1800000000;keyid="` + key.Public.Thumbprint +
		`";alg="ed25519";expires=1800003600;tag="http-message-signatures-directory"`
	if ds.Input != want {
		t.Errorf("Input = %s, want %s", ds.Input, want)
	}
	sig, err := signer.ParseDirectorySignature(ds)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, scheme, authority string
		body                    []byte
		ok                      bool
	}{
		{"same response", "http", "agent-0123456789abcdef01234567.localhost:3000", body, true},
		{"other agent", "http", "agent-0123456789abcdef01234568.localhost:3000", body, false},
		{"other port", "http", "agent-0123456789abcdef01234567.localhost:3001", body, false},
		{"other body", "http", "agent-0123456789abcdef01234567.localhost:3000", append([]byte(" "), body...), false},
	}
	for _, tt := range tests {
		err := signer.VerifyDirectory(&sig, key.Public, tt.scheme, tt.authority, tt.body)
		if (err == nil) != tt.ok {
			t.Errorf("%s: VerifyDirectory = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
	if _, err := signer.SignDirectory(key, "http", "a:1:2", body, created, created.Add(time.Hour)); !errors.Is(err, signer.ErrInvalidAuthority) {
		t.Errorf("SignDirectory(bad authority) = %v, want ErrInvalidAuthority", err)
	}
	if _, err := signer.SignDirectory(key, "http", "a.example", body, created, created); err == nil {
		t.Error("SignDirectory(expires = created) succeeded")
	}
	if _, err := signer.ParseDirectorySignature(signer.DirectorySignature{Input: strings.Repeat("a", 600)}); !errors.Is(err, signer.ErrFieldTooLarge) {
		t.Errorf("ParseDirectorySignature(huge) = %v, want ErrFieldTooLarge", err)
	}
	if _, err := signer.ParseDirectorySignature(signer.DirectorySignature{Input: `("@authority";req), x=("a")`}); err == nil {
		t.Error("ParseDirectorySignature(two members) succeeded")
	}
}
