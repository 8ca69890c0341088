package signer_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/dunglas/httpsfv"
)

func TestSignMetadata(t *testing.T) {
	t.Parallel()
	key := signertest.Key(9)
	req, _ := http.NewRequest("GET", "https://api.example/x", nil)
	md := map[string]string{"operator": `Example "Corp"`, "contact": "mailto:bots@example.com", "purpose": "search"}
	if err := signer.Sign(req, key, signer.Options{SignatureAgent: "https://agent-x.example", Metadata: md, Created: fixedCreated, Nonce: "n"}); err != nil {
		t.Fatal(err)
	}
	got := req.Header.Get(signer.MetadataHeader)
	if want := `contact="mailto:bots@example.com", operator="Example \"Corp\"", purpose="search"`; got != want {
		t.Errorf("%s = %s, want %s", signer.MetadataHeader, got, want)
	}
	// The reference parser reads back what was asked for.
	d, err := httpsfv.UnmarshalDictionary([]string{got})
	if err != nil {
		t.Fatalf("httpsfv cannot parse %s: %v", got, err)
	}
	for k, v := range md {
		m, ok := d.Get(k)
		if it, isItem := m.(httpsfv.Item); !ok || !isItem || it.Value != v {
			t.Errorf("member %s = %v, want %q", k, m, v)
		}
	}
	sig, _ := verifySignature(t, req, "sig1", key.Public.Key)
	if !sig.Covers(`"signed-agent-metadata"`) {
		t.Errorf("components %v do not cover signed-agent-metadata", sig.Components)
	}

	for name, bad := range map[string]map[string]string{
		"upper-case key":  {"Operator": "x"},
		"key with space":  {"a b": "x"},
		"non-ASCII value": {"operator": "Exämple"},
		"newline value":   {"operator": "a\nb"},
	} {
		req, _ := http.NewRequest("GET", "https://api.example/x", nil)
		err := signer.Sign(req, key, signer.Options{Metadata: bad})
		if err == nil || !strings.Contains(err.Error(), "metadata") {
			t.Errorf("%s: Sign = %v, want a metadata error", name, err)
		}
		if req.Header.Get("Signature") != "" || req.Header.Get(signer.MetadataHeader) != "" {
			t.Errorf("%s: headers set on a failed Sign: %v", name, req.Header)
		}
	}
}

// The legacy profile is the shape agentid signed before protocol-01.
func TestSignLegacyProfile(t *testing.T) {
	t.Parallel()
	key := signertest.Key(1)
	req := clientRequest(t, "GET", "https://example.com/whoami")
	if err := signer.Sign(req, key, signer.Options{SignatureAgent: "https://agent-x.example", Legacy: true}); err != nil {
		t.Fatal(err)
	}
	in := req.Header.Get("Signature-Input")
	if !strings.HasPrefix(in, `sig1=("@authority");created=`) {
		t.Errorf("legacy Signature-Input = %s, want only @authority covered", in)
	}
	if got := req.Header.Get("Signature-Agent"); got != `sig1="https://agent-x.example"` {
		t.Errorf("legacy Signature-Agent = %s", got)
	}
}
