package signer_test

import (
	"encoding/base64"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// fencedAfter returns the body of the first fenced code block after the
// line marker in doc.
func fencedAfter(t *testing.T, doc, marker string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, marker+"\n")
	if !ok {
		t.Fatalf("docs/signing.md has no %s", marker)
	}
	open, rest, ok := strings.Cut(rest, "\n")
	if !ok || !strings.HasPrefix(open, "```") {
		t.Fatalf("%s is not followed by a fenced block", marker)
	}
	body, _, ok := strings.Cut(rest, "\n```")
	if !ok {
		t.Fatalf("the block after %s is not closed", marker)
	}
	return body
}

// TestSigningDocWorkedExample rebuilds the worked example of
// docs/signing.md with the signer: the documented base must be the bytes
// the signer signs, and the documented headers the ones it sends.
func TestSigningDocWorkedExample(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/signing.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	wantBase := fencedAfter(t, doc, "<!-- worked-example-base -->")
	wantHeaders := fencedAfter(t, doc, "<!-- worked-example-headers -->")

	// The fixed inputs the page lists.
	key, err := signer.ParsePrivateJWK([]byte(`{"kty":"OKP","crv":"Ed25519","d":"nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(doc, "`"+key.KeyID()+"`") {
		t.Errorf("the page does not give the kid %s", key.KeyID())
	}
	var nonce [64]byte
	for i := range nonce {
		nonce[i] = byte(i)
	}
	svc, err := signer.ParseServiceURL("https://agentid.example")
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, "https://api.example/whoami", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = signer.Sign(req, key, signer.Options{
		Created:        time.Unix(1735689600, 0),
		Nonce:          base64.RawURLEncoding.EncodeToString(nonce[:]),
		SignatureAgent: svc.AgentOrigin("agent-0123456789abcdef01234567"),
	})
	if err != nil {
		t.Fatal(err)
	}

	sig, base := signertest.FirstBase(t, req)
	if string(base) != wantBase {
		t.Errorf("documented base =\n%q\nsigner's base =\n%q", wantBase, base)
	}
	if err := key.Public.Verify("", []byte(wantBase), sig.Value); err != nil {
		t.Errorf("the signature does not verify over the documented base: %v", err)
	}
	gotHeaders := "Signature-Input: " + req.Header.Get("Signature-Input") + "\n" +
		"Signature: " + req.Header.Get("Signature") + "\n" +
		"Signature-Agent: " + req.Header.Get("Signature-Agent")
	if gotHeaders != wantHeaders {
		t.Errorf("documented headers =\n%s\nsigner's headers =\n%s", wantHeaders, gotHeaders)
	}
}
