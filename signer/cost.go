package signer

import (
	"crypto/ed25519"
	"math/bits"
)

// The price of one verification of each algorithm and RSA modulus length,
// in units of one Ed25519 verification with the key's precomputed form
// (what a verifier's cached keys have). They are measured on the project's
// development machine by BenchmarkVerifyCost, as the ratio of the CPU time
// of the benchmark's thread, and rounded up from the largest of five runs;
// docs/benchmarks.md says how to run it, and docs/benchmarks-history.md
// records the runs. Re-measure them when the Go toolchain or the Ed25519
// backend changes.
const (
	costEd25519   = 1
	costECDSAP256 = 3
)

// rsaCosts prices an RSA-PSS check by modulus length: a key is priced as
// the first row whose bits are at least its own. Go's big-number code has
// assembly for moduli of up to 2048 bits only, so 3072 costs far more than
// the square of its length suggests.
var rsaCosts = [...]struct{ bits, cost int }{
	{2048, 2},
	{3072, 6},
	{4096, 10},
	{6144, 20},
	{LimitRSABits, 30},
}

// rsaExponentOps is the number of modular multiplications an exponent of
// RSAExponent takes (16 squarings and one product): the rows of rsaCosts
// are for it.
const rsaExponentOps = 17

// VerifyCost returns what one Verify with k costs, in units of one Ed25519
// verification (1 for an Ed25519 key): the measured price of its algorithm
// and, for RSA, of the smallest measured modulus length at least its own,
// scaled for an exponent other than RSAExponent and extrapolated (with the
// square of the length) beyond LimitRSABits. Keys from ParseKeySetJWK
// never need either. It is 0 for the zero PublicKey. A verifier that
// answers strangers bounds the total VerifyCost of the checks one request
// makes it run.
func (k PublicKey) VerifyCost() int {
	switch {
	case len(k.Key) == ed25519.PublicKeySize:
		return costEd25519
	case k.ECDSA != nil:
		return costECDSAP256
	case k.RSA == nil || k.RSA.N == nil:
		return 0
	}
	n := k.RSA.N.BitLen()
	cost := 0
	for _, row := range rsaCosts {
		if n <= row.bits {
			cost = row.cost
			break
		}
	}
	if cost == 0 { // beyond the last row: the square of the length
		last := rsaCosts[len(rsaCosts)-1]
		cost = ceilDiv(last.cost*n*n, last.bits*last.bits)
	}
	if e := uint64(max(k.RSA.E, 1)); e != RSAExponent {
		ops := bits.Len64(e) - 1 + bits.OnesCount64(e) - 1
		cost = ceilDiv(cost*max(ops, 1), rsaExponentOps)
	}
	return max(cost, 1)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
