package middleware

import (
	"strconv"

	"github.com/agentid/agentid/signer"
)

// Work bounds per verification: the candidates after these are not tried.
const (
	// maxFetches is the number of key lookups per request that may fetch
	// (a KeySource that is not a KeyCache counts every lookup).
	maxFetches = 1
	// maxChecks is the number of signature verifications per request,
	// whatever their price (Config.MaxVerifyCost bounds that).
	maxChecks = 2
)

// errBudget ends the candidates of a request: trying the next one would
// exceed maxFetches, maxChecks or what is left of Config.MaxVerifyCost.
// The first candidate's error stands, so it is what the client sees (a
// candidate that exhausts the budget is never the first: a first
// signature whose one check costs more than the whole budget is refused
// on its own, as unsupported_algorithm, and costs nothing).
var errBudget = &Error{Code: CodeInvalidSignature, Message: "no further signature is tried"}

// budget is what one verification has spent: key lookups that could
// fetch, signature checks, and their price in units of one Ed25519
// verification (signer.PublicKey.VerifyCost).
type budget struct {
	fetches int
	checks  int
	cost    int
}

// canCheck reports whether another signature check could still run: the
// count allows one and at least the cheapest price is left. No key is
// looked up for a signature that could not be checked.
func (b *budget) canCheck(maxCost int) bool {
	return b.checks < maxChecks && b.cost < maxCost
}

// fetch spends a lookup that may fetch, and reports whether one was left.
func (b *budget) fetch() bool {
	if b.fetches >= maxFetches {
		return false
	}
	b.fetches++
	return true
}

// check spends the price of one verification with pk, or refuses it: a
// key whose one check costs more than the whole budget is unusable here
// (unsupported_algorithm, nothing spent, and the next signature is tried),
// and one that does not fit what is left ends the request (errBudget).
func (b *budget) check(pk *signer.PublicKey, keyID string, maxCost int) *Error {
	c := pk.VerifyCost()
	switch {
	case c > maxCost:
		what := pk.Algorithm()
		if pk.RSA != nil {
			what = "an RSA key of " + strconv.Itoa(pk.RSA.N.BitLen()) + " bits"
		}
		return Fail(CodeUnsupportedAlgorithm, "key %q is %s, whose check costs more than this verifier spends on one request", signer.Truncate(keyID), what)
	case b.cost+c > maxCost:
		return errBudget
	}
	b.checks++
	b.cost += c
	return nil
}
