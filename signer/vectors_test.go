package signer_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

func loadVectors(t testing.TB) signertest.Vectors {
	return signertest.LoadVectors(t, "testdata/vectors.json")
}

func TestRFC9421B26(t *testing.T) {
	v := loadVectors(t)
	r := v.B26.Request.Build()
	sigs, err := signer.ParseSignatures([]string{v.B26.SignatureInput}, []string{v.B26.Signature})
	if err != nil {
		t.Fatal(err)
	}
	if len(sigs) != 1 || sigs[0].Label != "sig-b26" {
		t.Fatalf("signatures = %+v, want one labelled sig-b26", sigs)
	}
	base, err := sigs[0].Base(r)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(base), v.B26.SignatureBase; got != want {
		t.Fatalf("base =\n%s\nwant\n%s", got, want)
	}
	if len(base) != 284 {
		t.Errorf("base length = %d, want 284", len(base))
	}
	sum := sha256.Sum256(base)
	if got := hex.EncodeToString(sum[:]); got != v.B26.BaseSHA256 {
		t.Errorf("base sha256 = %s, want %s", got, v.B26.BaseSHA256)
	}
	key := v.PrivateKey(t)
	sig := ed25519.Sign(key.Key, base)
	want := strings.TrimSuffix(strings.TrimPrefix(v.B26.Signature, "sig-b26=:"), ":")
	if got := base64.StdEncoding.EncodeToString(sig); got != want {
		t.Errorf("signature = %s, want %s", got, want)
	}
	if !ed25519.Verify(key.Public.Key, base, sigs[0].Value) {
		t.Error("published signature does not verify over the rebuilt base")
	}
	// One changed byte anywhere in the request breaks the base.
	r.Header.Set("Date", "Tue, 20 Apr 2021 02:07:56 GMT")
	base2, err := sigs[0].Base(r)
	if err != nil {
		t.Fatal(err)
	}
	if ed25519.Verify(key.Public.Key, base2, sigs[0].Value) {
		t.Error("signature verifies after the date changed")
	}
}

func TestWebBotAuthE21(t *testing.T) {
	v := loadVectors(t)
	r := v.E21.Request.Build()
	sig, base := signertest.FirstBase(t, r)
	sigs := []signer.Signature{sig}
	if got, want := string(base), v.E21.SignatureBase; got != want {
		t.Fatalf("base =\n%s\nwant\n%s", got, want)
	}
	key := v.PrivateKey(t)
	if !ed25519.Verify(key.Public.Key, base, sigs[0].Value) {
		t.Error("E.2.1 signature does not verify")
	}
	if sigs[0].Params.KeyID != key.KeyID() {
		t.Errorf("keyid = %s, want %s", sigs[0].Params.KeyID, key.KeyID())
	}
	sa, err := signer.ParseSignatureAgent(r.Header.Values("Signature-Agent"))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := sa.Member("agent2"); !ok || got.Value != "https://signature-agent.test" {
		t.Errorf("member agent2 = %+v, %v", got, ok)
	}
}

func TestWebBotAuthE22(t *testing.T) {
	v := loadVectors(t)
	r := v.E22.Request.Build()
	sig, base := signertest.FirstBase(t, r)
	sigs := []signer.Signature{sig}
	if !strings.Contains(string(base), "\n\"signature-agent\": \"https://signature-agent.test\"\n") {
		t.Errorf("base does not carry the whole signature-agent field:\n%s", base)
	}
	key := v.PrivateKey(t)
	if !ed25519.Verify(key.Public.Key, base, sigs[0].Value) {
		t.Error("E.2.2 signature does not verify")
	}
	sa, err := signer.ParseSignatureAgent(r.Header.Values("Signature-Agent"))
	if err != nil {
		t.Fatal(err)
	}
	if got := sa.Members(); len(got) != 1 || !sa.Item() || got[0].Value != "https://signature-agent.test" {
		t.Errorf("string signature agent = %+v, item %v", got, sa.Item())
	}
}

func TestThumbprints(t *testing.T) {
	v := loadVectors(t)
	key := v.PrivateKey(t)
	if got := key.KeyID(); got != v.Key.Thumbprint {
		t.Errorf("B.1.4 thumbprint = %s, want %s", got, v.Key.Thumbprint)
	}
	sum := sha256.Sum256([]byte(v.Key.ThumbprintInput))
	if got := base64.RawURLEncoding.EncodeToString(sum[:]); got != v.Key.Thumbprint {
		t.Errorf("thumbprint input hashes to %s, want %s", got, v.Key.Thumbprint)
	}
	x, err := base64.RawURLEncoding.DecodeString(v.RFC8037.X)
	if err != nil {
		t.Fatal(err)
	}
	if got := signer.Thumbprint(ed25519.PublicKey(x)); got != v.RFC8037.Thumbprint {
		t.Errorf("RFC 8037 thumbprint = %s, want %s", got, v.RFC8037.Thumbprint)
	}
}

func TestContentDigestVectors(t *testing.T) {
	v := loadVectors(t)
	body := []byte(v.Digests["body"])
	for _, alg := range []string{"sha-256", "sha-512"} {
		got, err := signer.ContentDigest(body, alg)
		if err != nil {
			t.Fatal(err)
		}
		if got != v.Digests[alg] {
			t.Errorf("%s = %s, want %s", alg, got, v.Digests[alg])
		}
		if err := signer.VerifyContentDigest([]string{v.Digests[alg]}, body); err != nil {
			t.Errorf("verify %s: %v", alg, err)
		}
		if err := signer.VerifyContentDigest([]string{v.Digests[alg]}, append(body, ' ')); err == nil {
			t.Errorf("verify %s accepted a changed body", alg)
		}
	}
	if err := signer.VerifyContentDigest([]string{"md5=:AAAA:"}, body); err == nil {
		t.Error("an unsupported algorithm alone was accepted")
	}
}
