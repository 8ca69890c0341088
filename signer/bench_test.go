package signer_test

import (
	"crypto/ed25519"
	"net/http"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/agentid/agentid/signer/signertest/benchtest"
)

// Benchmarks: run with
//
//	go test ./signer -run '^$' -bench . -benchmem
//
// BenchmarkEd25519Sign is the baseline: the bare Ed25519 signature over a
// default-profile base. BenchmarkSign adds everything Sign does around it.

const benchAgent = "https://agent-0123456789abcdef01234567.agentid.example"

func benchGet(b *testing.B) *http.Request {
	b.Helper()
	r, err := http.NewRequest("GET", "https://api.example.com/whoami", nil)
	if err != nil {
		b.Fatal(err)
	}
	r.Header.Set("Accept", "application/json")
	r.Header.Set("User-Agent", "idcli/1.0.0")
	return r
}

// defaultBase is the signature base of a default-profile signature.
func defaultBase(b *testing.B, key signer.PrivateKey) []byte {
	b.Helper()
	r := benchGet(b)
	if err := signer.Sign(r, key, signer.Options{SignatureAgent: benchAgent}); err != nil {
		b.Fatal(err)
	}
	_, base := signertest.FirstBase(b, r)
	return base
}

func BenchmarkEd25519Sign(b *testing.B) {
	key := signertest.Key(40)
	base := defaultBase(b, key)
	b.ReportAllocs()
	b.SetBytes(int64(len(base)))
	for b.Loop() {
		ed25519.Sign(key.Key, base)
	}
}

// BenchmarkSign signs a GET request with the default profile (random nonce
// from crypto/rand, Signature-Agent set), and without the nonce draw.
func BenchmarkSign(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts signer.Options
	}{
		{"default", signer.Options{SignatureAgent: benchAgent}},
		{"fixed-nonce", signer.Options{SignatureAgent: benchAgent, Created: fixedCreated, Nonce: fixedNonce}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			key := signertest.Key(41)
			r := benchGet(b)
			b.ReportAllocs()
			for b.Loop() {
				delete(r.Header, "Signature")
				delete(r.Header, "Signature-Input")
				delete(r.Header, "Signature-Agent")
				if err := signer.Sign(r, key, bc.opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSignatureBase rebuilds the base of a parsed five-component
// signature (the write-route profile with the Signature-Agent member).
func BenchmarkSignatureBase(b *testing.B) {
	key := signertest.Key(43)
	r, err := http.NewRequest("PUT", "https://agentid.example/agents/agent-0123456789abcdef01234567/keys", strings.NewReader(`{"public_jwk":{"kty":"OKP","crv":"Ed25519","x":"`+vecX+`"}}`))
	if err != nil {
		b.Fatal(err)
	}
	opts := signer.Options{Components: signer.WriteComponents, SignatureAgent: benchAgent, Standards: true}
	if err := signer.Sign(r, key, opts); err != nil {
		b.Fatal(err)
	}
	sigs, err := signer.ParseSignatures(r.Header.Values("Signature-Input"), r.Header.Values("Signature"))
	if err != nil {
		b.Fatal(err)
	}
	if n := len(sigs[0].Components); n != 5 {
		b.Fatalf("%d components, want 5", n)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sigs[0].Base(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseSignatures parses a default-profile Signature-Input and
// Signature pair, the verifier's first step.
func BenchmarkParseSignatures(b *testing.B) {
	key := signertest.Key(44)
	r := benchGet(b)
	if err := signer.Sign(r, key, signer.Options{SignatureAgent: benchAgent}); err != nil {
		b.Fatal(err)
	}
	in, sig := r.Header.Values("Signature-Input"), r.Header.Values("Signature")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := signer.ParseSignatures(in, sig); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEd25519Backend times PublicKey.Verify (the verification
// backend, with the key's precomputed form) against crypto/ed25519.Verify
// over the same default-profile base, in alternating blocks of 64
// (x-stdlib is the ratio).
func BenchmarkEd25519Backend(b *testing.B) {
	key := signertest.Key(45)
	base := defaultBase(b, key)
	sig := ed25519.Sign(key.Key, base)
	pk := key.Public
	benchtest.Paired(b, 64, "stdlib", "backend",
		func(int) {
			if !ed25519.Verify(pk.Key, base, sig) {
				b.Fatal("stdlib refused")
			}
		},
		func(int) {
			if pk.Verify(signer.AlgEd25519, base, sig) != nil {
				b.Fatal("backend refused")
			}
		})
}
