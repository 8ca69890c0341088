package signer_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"math/big"
	"testing"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/agentid/agentid/signer/signertest/benchtest"
)

// costKey is a key of one algorithm and size, with a signature that does
// not verify but costs the whole check (an RSA value below the modulus,
// ECDSA scalars in range).
type costKey struct {
	name string
	pk   signer.PublicKey
	sig  []byte
}

// costKeys returns a key of every algorithm and size PublicKey.VerifyCost
// prices, RSA moduli up to signer.LimitRSABits. An RSA check costs the
// same whether the signature verifies or not (the exponentiation comes
// first), so a modulus of the right length needs no private key.
func costKeys(tb testing.TB) []costKey {
	tb.Helper()
	ec, err := ecdsa.GenerateKey(elliptic.P256(), bytes.NewReader(bytes.Repeat([]byte{7}, 128)))
	if err != nil {
		tb.Fatal(err)
	}
	forgedEC := append(bytes.Repeat([]byte{0x11}, 32), bytes.Repeat([]byte{0x22}, 32)...)
	keys := []costKey{
		{"ed25519", signertest.Key(41).Public, bytes.Repeat([]byte{3}, 64)},
		{"ed25519-cold", signertest.Key(41).Public.Unexpanded(), bytes.Repeat([]byte{3}, 64)},
		{"ecdsa-p256", signer.PublicKey{ECDSA: &ec.PublicKey}, forgedEC},
	}
	for _, bits := range []int{2048, 3072, 4096, 6144, 8192} {
		n := bytes.Repeat([]byte{0xa5}, bits/8)
		n[0] |= 0x80
		n[len(n)-1] |= 1
		sig := bytes.Repeat([]byte{0x5a}, bits/8) // below the modulus
		keys = append(keys, costKey{
			name: "rsa-" + itoa(bits),
			pk:   signer.PublicKey{RSA: &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: signer.RSAExponent}},
			sig:  sig,
		})
	}
	return keys
}

func itoa(n int) string { return big.NewInt(int64(n)).String() }

// BenchmarkVerifyCost times one PublicKey.Verify of each algorithm and
// size against one Ed25519 verification (a valid signature, the key's
// precomputed form, as the verifier's cached keys have it) in the same run:
// x-ed25519 is the cost in the units PublicKey.VerifyCost returns, and
// priced is VerifyCost itself, which must not be below it. Run:
//
//	go test -run '^$' -bench VerifyCost -count 5 ./signer
func BenchmarkVerifyCost(b *testing.B) {
	ed := signertest.Key(40)
	msg := []byte(`"@authority": api.example.com` + "\n" + `"@signature-params": ("@authority");created=1700000000;keyid="k";nonce="n";tag="web-bot-auth"`)
	edSig := ed25519.Sign(ed.Key, msg)
	for _, k := range costKeys(b) {
		b.Run(k.name, func(b *testing.B) {
			benchtest.Paired(b, 1, "ed25519", k.name,
				func(int) {
					if ed.Public.Verify(signer.AlgEd25519, msg, edSig) != nil {
						b.Fatal("the Ed25519 baseline did not verify")
					}
				},
				func(int) {
					if k.pk.Verify("", msg, k.sig) == nil {
						b.Fatal("a forged signature verified")
					}
				})
			b.ReportMetric(float64(k.pk.VerifyCost()), "priced")
		})
	}
}
