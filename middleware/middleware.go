// Package middleware verifies RFC 9421 HTTP Message Signatures made under the
// web-bot-auth profile and attributes each request to a verified agent.
//
// Build a Verifier once with New, then use it one of three ways:
//
//	keys := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"*.agentid.example"}})
//	v, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{"api.example.com"}})
//
//	// Wrap handlers: refusals are answered, the rest go on with the outcome.
//	http.Handle("/", v.Middleware(handler)) // agent, ok := middleware.AgentFrom(r.Context())
//
//	// Check inside a proxy (or a handler that answers by itself).
//	if res := v.Check(r); !res.Passed {
//		v.WriteError(w, r, res.Err)
//	}
//
//	// Verify a captured request: the agent, or an *Error with a stable Code.
//	agent, err := v.Verify(r)
//
// What is verified and why: docs/signature-agent.md and docs/security.md.
package middleware

import (
	"context"
	"net/http"
	"time"

	"github.com/agentid/agentid/signer"
)

// Agent is the identity behind a verified request.
type Agent struct {
	// ID is the agent's identity: the signature agent's origin
	// (scheme://host[:port]) when its keys are at the origin's well-known
	// directory, else the key-set URL. Policies and caches key on it.
	ID string
	// UID is the agent uid taken from the first label of the signature
	// agent's host when it has the form agent-<24 hex>; "" otherwise.
	UID string
	// KeyID is the keyid that signed.
	KeyID string
	// Thumbprint is the RFC 7638 thumbprint of the key that verified: the
	// key's identity whatever its keyid or key set. Replay protection is
	// keyed by it (ReplayKey).
	Thumbprint string
	// Alg is the algorithm that verified (signer.AlgEd25519, …).
	Alg string
	// JWK is the public key that verified the signature.
	JWK signer.JWK
	// SignatureAgent is the origin (scheme://host[:port]) of the key set.
	SignatureAgent string
	// DirectoryURL is the key-set URL the key was read from (for an origin,
	// its /.well-known/http-message-signatures-directory).
	DirectoryURL string
	// Created and Expires are the signature's validity window.
	Created, Expires time.Time
	Nonce            string
	Label            string
	Tag              string
	// Components are the covered component identifiers, serialized
	// (e.g. `"@authority"`, `"signature-agent";key="sig1"`).
	Components []string
	// Bound reports whether Signature-Agent was covered by the signature.
	Bound bool
	// Metadata is the Signed-Agent-Metadata dictionary
	// (draft-vilgalys-webbotauth-signed-agent-metadata-00) when the
	// signature covers it, else nil: each member's string or token value,
	// or its serialization for other types.
	Metadata map[string]string
}

// Mode says what the middleware does with requests that are not verified.
type Mode uint8

// Modes. Required is the zero value.
const (
	// Required refuses unsigned and badly signed requests.
	Required Mode = iota
	// Optional lets unsigned requests through without an identity and
	// still refuses bad signatures.
	Optional
	// Observe lets every request through; handlers read the outcome with
	// ResultFrom. Nonces are still recorded, so a replay shows as invalid.
	Observe
)

func (m Mode) String() string {
	switch m {
	case Optional:
		return "optional"
	case Observe:
		return "observe"
	}
	return "required"
}

// Result is the outcome of verifying one request, given to Config.OnResult
// and, in handlers that run, available through ResultFrom.
type Result struct {
	// Request is the request verified.
	Request *http.Request
	// Outcome is OutcomeVerified (Agent is set), else OutcomeNotPresent
	// (unsigned: Err is missing_signature), OutcomeInvalid or
	// OutcomeUnverified (Err says why).
	Outcome Outcome
	// Reason is "verified", else Err.Code.Reason(): one of a fixed,
	// bounded set of words (docs/outcomes.md), never client text.
	Reason string
	// Agent is the identity when Outcome is OutcomeVerified.
	Agent Agent
	// Err is the typed failure, nil when Verified.
	Err *Error
	// Passed reports whether the request went on to the handler.
	Passed bool
}

// resultKey is the context key of the *Result the middleware stores.
type resultKey struct{}

// AgentFrom returns the verified agent stored in ctx by the middleware.
func AgentFrom(ctx context.Context) (Agent, bool) {
	r, ok := ctx.Value(resultKey{}).(*Result)
	if !ok || r.Outcome != OutcomeVerified {
		return Agent{}, false
	}
	return r.Agent, true
}

// WithAgent returns ctx carrying a as a verified agent; handler tests use
// it to skip signing.
func WithAgent(ctx context.Context, a Agent) context.Context {
	return context.WithValue(ctx, resultKey{}, &Result{Outcome: OutcomeVerified, Reason: reasonVerified, Agent: a, Passed: true})
}

// ResultFrom returns the verification outcome of the request whose context
// is ctx, in every mode where the handler runs.
func ResultFrom(ctx context.Context) (Result, bool) {
	r, ok := ctx.Value(resultKey{}).(*Result)
	if !ok {
		return Result{}, false
	}
	return *r, true
}
