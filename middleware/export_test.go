package middleware

import (
	"net/http"
	"time"

	"github.com/agentid/agentid/signer"
)

// Test access to what the package keeps to itself.

// DefaultMaxVerifyCost is the default of Config.Limits.MaxVerifyCost.
const DefaultMaxVerifyCost = defaultMaxVerifyCost

// NewMemoryReplayStoreWithClock is a MemoryReplayStore on the clock now.
func NewMemoryReplayStoreWithClock(now func() time.Time) *MemoryReplayStore {
	return newMemoryReplayStore(now)
}

// AddWithID publishes pk for agent under keyID.
func (s *StaticKeys) AddWithID(agent, keyID string, pk signer.PublicKey) {
	s.addWithID(agent, keyID, pk)
}

// Codes returns every code in the table, those DefineCode added included.
func Codes() []Code {
	out := make([]Code, 0, len(statuses))
	for c := range statuses {
		out = append(out, c)
	}
	return out
}

// ReplayLen is the number of nonces s remembers.
func ReplayLen(s *MemoryReplayStore) int { return s.len() }

// CheckUninstrumented is Check as it was before the verifier had a span and
// a metric: the baseline of the no-provider allocation test and benchmark.
func (v *Verifier) CheckUninstrumented(r *http.Request) *Result {
	res := &Result{Request: r}
	v.decide(res, v.logRefusal(r.Context(), r, v.verifyRequest(r, &res.Agent)))
	return res
}

// SignatureErrorOf is the Signature-Error code of c in the package's
// table, "" for none.
func SignatureErrorOf(c Code) string { return sigErrors[c] }

// WantsProblem reports whether r's Accept prefers Problem Details.
var WantsProblem = wantsProblem
