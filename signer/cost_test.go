package signer_test

import (
	"crypto/rsa"
	"math/big"
	"testing"

	"github.com/agentid/agentid/signer"
)

// rsaKeyOf is an RSA public key of exactly bits bits with exponent e.
func rsaKeyOf(bits, e int) signer.PublicKey {
	n := new(big.Int).Lsh(big.NewInt(1), uint(bits-1))
	n.SetBit(n, 0, 1)
	return signer.PublicKey{RSA: &rsa.PublicKey{N: n, E: e}}
}

// TestVerifyCost checks the prices' shape (the figures themselves come
// from BenchmarkVerifyCost): Ed25519 is the unit, the zero key costs
// nothing, an RSA key costs more the longer its modulus (a length between
// two measured ones is priced as the longer), an exponent other than 65537
// is priced by its multiplications, and a modulus beyond the measured ones
// by the square of its length.
func TestVerifyCost(t *testing.T) {
	t.Parallel()
	costKeys := costKeys(t)
	byName := map[string]int{}
	for _, k := range costKeys {
		byName[k.name] = k.pk.VerifyCost()
	}
	if got := byName["ed25519"]; got != 1 {
		t.Errorf("Ed25519 costs %d, want 1 (the unit)", got)
	}
	if got := byName["ed25519-cold"]; got != 1 {
		t.Errorf("an Ed25519 key without its precomputed form costs %d, want 1", got)
	}
	if got := (signer.PublicKey{}).VerifyCost(); got != 0 {
		t.Errorf("the zero PublicKey costs %d, want 0", got)
	}
	if got := byName["ecdsa-p256"]; got <= 1 {
		t.Errorf("ECDSA P-256 costs %d, want more than Ed25519", got)
	}
	prev := 0
	for _, bits := range []int{2048, 2049, 3072, 3073, 4096, 4097, 6144, 8192, 8193, 16384} {
		got := rsaKeyOf(bits, signer.RSAExponent).VerifyCost()
		if got < prev || got < 1 {
			t.Errorf("RSA-%d costs %d, less than the shorter modulus before it (%d)", bits, got, prev)
		}
		prev = got
	}
	for _, c := range []struct{ shorter, longer int }{{2048, 2049}, {3072, 3073}, {4096, 4097}, {8192, 16384}} {
		if s, l := rsaKeyOf(c.shorter, signer.RSAExponent).VerifyCost(), rsaKeyOf(c.longer, signer.RSAExponent).VerifyCost(); l <= s {
			t.Errorf("RSA-%d costs %d, not more than RSA-%d (%d)", c.longer, l, c.shorter, s)
		}
	}
	if got, want := rsaKeyOf(16384, signer.RSAExponent).VerifyCost(), 4*rsaKeyOf(8192, signer.RSAExponent).VerifyCost(); got != want {
		t.Errorf("RSA-16384 costs %d, want %d (four times RSA-8192)", got, want)
	}
	for name, bits := range map[string]int{"rsa-2048": 2048, "rsa-3072": 3072, "rsa-4096": 4096, "rsa-6144": 6144, "rsa-8192": 8192} {
		if got, want := byName[name], rsaKeyOf(bits, signer.RSAExponent).VerifyCost(); got != want {
			t.Errorf("%s costs %d, want %d", name, got, want)
		}
	}
	base := rsaKeyOf(4096, signer.RSAExponent).VerifyCost()
	if got := rsaKeyOf(4096, 3).VerifyCost(); got >= base {
		t.Errorf("RSA-4096 with e = 3 costs %d, want less than with 65537 (%d)", got, base)
	}
	if got := rsaKeyOf(4096, 1<<31-1).VerifyCost(); got <= 3*base {
		t.Errorf("RSA-4096 with e = 2^31-1 costs %d, want more than 3×%d", got, base)
	}
}
