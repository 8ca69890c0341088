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
//		v.WriteError(w, res.Err)
//	}
//
//	// Verify a captured request: the agent, or an *Error with a stable Code.
//	agent, err := v.Verify(r)
//
// What is verified and why: docs/signature-agent.md and docs/security.md.
package middleware

import (
	"context"
	"log/slog"
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
	// Outcome is OutcomeVerified (Agent is set), else OutcomeInvalid or
	// OutcomeUnverified (Err says why; an unsigned request is unverified,
	// with Err missing_signature).
	Outcome Outcome
	// Agent is the identity when Outcome is OutcomeVerified.
	Agent Agent
	// Err is the typed failure, nil when Verified.
	Err *Error
	// Passed reports whether the request went on to the handler.
	Passed bool
}

// DefaultSkew is the clock skew a verifier allows unless Config.Skew says
// otherwise.
const DefaultSkew = 60 * time.Second

// DefaultSignatureAgentCacheSize is the default of
// Config.SignatureAgentCacheSize: as many values as keyfetch caches key sets
// by default (keyfetch.DefaultMaxOrigins), so that every agent whose keys
// are cached also has its Signature-Agent value cached.
const DefaultSignatureAgentCacheSize = 10_000

// The defaults of the other bounds (Config's doc states them); each is far
// above what real signers send.
const (
	defaultMaxWindow                = 10 * time.Minute
	defaultMaxBodyBytes             = 1 << 20
	defaultMaxSignatures            = 8
	defaultMaxComponents            = 32
	defaultMaxSignatureAgentMembers = 8
	defaultMaxNonceLength           = 256
	defaultMaxKeyIDLength           = 256
	defaultMaxHeaderBytes           = 8 << 10
	// defaultMaxVerifyCost: one check of an RSA key of up to
	// signer.DefaultMaxRSABits bits fits it, and no two such checks do. A
	// request then costs at most ten Ed25519 verifications' worth of
	// signature checks, whatever algorithms and key sizes a trusted host
	// publishes.
	defaultMaxVerifyCost = 10
)

// Config configures a Verifier and the middleware. The zero value of each
// field is the strict web-bot-auth default.
type Config struct {
	// Keys resolves (key set, keyid) to a public key. Required.
	Keys KeySource
	// Now is the clock. If nil, time.Now is used.
	Now func() time.Time
	// Mode is Required (the zero value), Optional or Observe.
	Mode Mode
	// Profile is ProfileDeployed (the zero value: every form deployed
	// signers send) or ProfileStrict01 (web-bot-auth protocol-01 exactly;
	// its refusals are 403 unless RefusalStatus says otherwise).
	Profile Profile
	// OnResult, if set, receives every outcome — verified, unsigned or
	// invalid — before the response is written or the handler runs. It is
	// where metrics, logs and proxies read outcomes. It must be safe for
	// concurrent use and should not block.
	OnResult func(Result)
	// Replay remembers (key thumbprint, nonce) pairs (ReplayKey) until the
	// signature's expiry plus Skew. If nil, an in-memory store on the Now clock is used
	// several instances need a shared store.
	Replay ReplayStore
	// Tag is the required tag parameter. If "", "web-bot-auth". Signatures
	// with another tag are ignored.
	Tag string
	// AnyTag accepts a signature without the required tag when it is the
	// only signature in the request (plain RFC 9421 use).
	AnyTag bool
	// Algorithms lists the accepted algorithms. If nil, signer.AlgEd25519,
	// signer.AlgRSAPSSSHA512 and signer.AlgECDSAP256SHA256.
	Algorithms []string
	// AllowMissingExpires accepts signatures without an expires parameter.
	AllowMissingExpires bool
	// AllowMissingNonce accepts signatures without a nonce (no replay check
	// is then possible for them).
	AllowMissingNonce bool
	// AllowMissingSignatureAgent accepts requests without Signature-Agent;
	// the key source is then asked with the zero signer.KeySet.
	AllowMissingSignatureAgent bool
	// AllowAnyKeyID accepts, at a well-known directory, a keyid that is not
	// the RFC 7638 thumbprint of the key (plain RFC 9421 with key ids
	// agreed out of band). By default the thumbprint must equal keyid there.
	AllowAnyKeyID bool
	// RequireBound rejects signatures that do not cover Signature-Agent.
	RequireBound bool
	// MaxWindow bounds expires-created. If 0, 10 minutes; negative: unbounded
	// (refused with AllowMissingExpires unless AllowMissingNonce is set too:
	// a nonce could not be remembered for as long as its signature lives).
	MaxWindow time.Duration
	// Skew is the allowed clock skew. If 0, 60 seconds; negative: none.
	Skew time.Duration
	// RequiredComponents must all be covered (e.g. "@method", "@path",
	// "content-digest"), in addition to @authority or @target-uri. A bare
	// name matches the component with any parameters; a serialized item
	// (`"signature-agent";key="sig1"`) must be covered exactly. A required
	// content-digest counts only because the digest is then checked.
	RequiredComponents []string
	// MaxBodyBytes caps the body read to check Content-Digest. If 0, 1 MiB.
	MaxBodyBytes int64
	// RefusalStatus is the status of refusals that would be 401
	// (Accept-Signature is sent with them). If 0, 401; 403 answers as
	// web-bot-auth protocol-01 describes. Other statuses are kept.
	RefusalStatus int

	// Limits are checked before any parsing beyond them (so refusing an
	// oversized request costs time linear in its size); each refusal has
	// its own code. A zero field means its default:
	//   - MaxFieldBytes bounds each of Signature-Input, Signature and
	//     Signature-Agent, all lines joined (signature_too_large,
	//     signature_agent_too_large). If 0, 8 KiB.
	//   - MaxSignatures bounds the labels of Signature-Input
	//     (too_many_signatures). If 0, 8.
	//   - MaxComponents bounds the components one signature covers
	//     (too_many_components). If 0, 32.
	//   - MaxSignatureAgentMembers bounds the members of Signature-Agent
	//     (signature_agent_too_large). If 0, 8.
	//   - MaxNonceLength and MaxKeyIDLength bound the nonce and the keyid
	//     (nonce_too_long, keyid_too_long). If 0, 256.
	//   - MaxVerifyCost bounds the signature checks of one request by their
	//     price, in units of one Ed25519 verification
	//     (signer.PublicKey.VerifyCost); the count bound (two checks per
	//     request, whatever their price) applies as well. The candidates
	//     are tried in order while their checks fit; the first signature's
	//     error then stands. A key whose one check costs more is refused
	//     (unsupported_algorithm) without being used, and the next
	//     signature is tried. If 0, 10, which fits one
	//     check of an RSA key of signer.DefaultMaxRSABits bits. Raising it
	//     raises, in proportion, what a request with forged signatures can
	//     cost.
	//   - MaxRSABits is the largest RSA modulus used (a larger key is
	//     unknown_key), up to signer.LimitRSABits. If 0,
	//     signer.DefaultMaxRSABits; raise MaxVerifyCost with it (to the
	//     VerifyCost of the largest key), or such keys are refused.
	// Tag is ignored: the Tag field above sets it.
	Limits signer.Limits
	// SignatureAgentCacheSize bounds the cache of parsed and resolved
	// Signature-Agent values (least recently used evicted): an agent sends
	// the same value on every request, so it is parsed once while cached.
	// Size it at least to the number of agents that sign requests here
	// (with keyfetch, its MaxOrigins), or every request of an agent whose
	// value was evicted parses it again. Values longer than 512 bytes are
	// never cached, so an entry's size is bounded; anyone can send a value,
	// and the cache is bounded either way. TestSignatureAgentCacheEntryBytes
	// measures an entry (docs/benchmarks.md has the figures).
	// If 0, DefaultSignatureAgentCacheSize; negative: nothing is cached.
	SignatureAgentCacheSize int
	// ExpandedKeys keeps the expanded forms of the Ed25519 keys verifying
	// most often, for the keys a key source holds without theirs (keyfetch
	// does). If nil, the verifier keeps its own of
	// signer.DefaultExpandedKeyCacheSize keys; verifiers may share one.
	ExpandedKeys *signer.ExpandedKeys

	// Authorities are the authorities this verifier serves: "host" or
	// "host:port" (a port-less entry means the scheme's default port), or
	// "*.suffix" for any host below suffix on a label boundary. A signed
	// request whose authority (its Host, or the host of an absolute-form
	// target — what @authority and @target-uri cover) is not one of them
	// is refused with 421 misdirected_request before any key lookup or
	// signature check, so a signature an agent made for another site
	// cannot be used here. If empty, every signed request is refused that
	// way (and New logs a warning), unless AnyAuthority is set.
	Authorities []string
	// AnyAuthority accepts signed requests for any authority. It is for
	// tests and for servers behind something that already refuses
	// requests for hosts they do not serve (a reverse proxy with fixed
	// virtual hosts); anywhere else it lets a signature made for another
	// site be replayed here.
	AnyAuthority bool

	// Logger receives a warning at construction when Authorities is empty
	// (without AnyAuthority) and one debug line per rejection. If nil,
	// nothing is logged.
	Logger *slog.Logger
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
	return context.WithValue(ctx, resultKey{}, &Result{Outcome: OutcomeVerified, Agent: a, Passed: true})
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
