package signer_test

import (
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/agentid/agentid/signer"
)

// Signing the protocol-01 E.2.1 request (member keyed by the label) with
// the default profile reproduces the draft's Signature-Input, Signature
// and Signature-Agent byte for byte (Ed25519 is deterministic).
func TestSignReproducesProtocol01E21(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		E21 struct {
			Request struct{ Method, Authority string } `json:"request"`
			Headers map[string]string                  `json:"headers"`
		} `json:"webbotauth_01_e21_member_keyed_by_label"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	want := doc.E21.Headers
	sigs, err := signer.ParseSignatures([]string{want["Signature-Input"]}, []string{want["Signature"]})
	if err != nil || len(sigs) != 1 {
		t.Fatalf("vector: %v", err)
	}
	p := sigs[0].Params
	key := loadVectors(t).PrivateKey(t)
	req, _ := http.NewRequest(doc.E21.Request.Method, "https://"+doc.E21.Request.Authority+"/path/to/resource", nil)
	err = signer.Sign(req, key, signer.Options{
		Label:          sigs[0].Label,
		SignatureAgent: "https://signature-agent.test",
		Created:        time.Unix(p.Created, 0),
		Expires:        time.Unix(p.Expires, 0),
		Nonce:          p.Nonce,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"Signature-Input", "Signature", "Signature-Agent"} {
		if got := req.Header.Get(h); got != want[h] {
			t.Errorf("%s =\n%s\nwant\n%s", h, got, want[h])
		}
	}
}
