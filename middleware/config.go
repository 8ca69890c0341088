package middleware

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentid/agentid/signer"
)

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
	// (without AnyAuthority) and one debug line per rejection (with the
	// trace id of the request's span, if any). If nil, nothing is logged.
	Logger *slog.Logger

	// TracerProvider gives the tracer of the span "agentid.verify" each
	// verification starts, a child of the request's span, with the
	// agentid.* attributes (docs/middleware.md). If nil, the global
	// provider, which records nothing until an application sets one; until
	// then the verifier starts no span.
	TracerProvider trace.TracerProvider
	// MeterProvider gives the meter of the histogram
	// agentid.verify.duration, by agentid.outcome and agentid.reason. If
	// nil, the global provider (a no-op until an application sets one).
	MeterProvider metric.MeterProvider
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Keys == nil {
		return errors.New("middleware: Config.Keys is required")
	}
	if c.MaxBodyBytes < 0 {
		return errors.New("middleware: Config.MaxBodyBytes must not be negative")
	}
	l := &c.Limits
	for _, n := range []int{l.MaxFieldBytes, l.MaxSignatures, l.MaxComponents, l.MaxSignatureAgentMembers, l.MaxNonceLength, l.MaxKeyIDLength, l.MaxVerifyCost} {
		if n < 0 {
			return errors.New("middleware: Config.Limits must not be negative")
		}
	}
	if l.MaxRSABits != 0 && (l.MaxRSABits < signer.DefaultMaxRSABits || l.MaxRSABits > signer.LimitRSABits) {
		return fmt.Errorf("middleware: Config.Limits.MaxRSABits %d is not between %d and %d", l.MaxRSABits, signer.DefaultMaxRSABits, signer.LimitRSABits)
	}
	if c.Profile > ProfileStrict01 {
		return fmt.Errorf("middleware: Config.Profile %d is not ProfileDeployed or ProfileStrict01", c.Profile)
	}
	if c.Mode > Observe {
		return fmt.Errorf("middleware: Config.Mode %d is not Required, Optional or Observe", c.Mode)
	}
	if c.RefusalStatus != 0 && c.RefusalStatus != http.StatusUnauthorized && c.RefusalStatus != http.StatusForbidden {
		return fmt.Errorf("middleware: Config.RefusalStatus %d is not 401 or 403", c.RefusalStatus)
	}
	for _, a := range c.Algorithms {
		if a != signer.AlgEd25519 && a != signer.AlgRSAPSSSHA512 && a != signer.AlgECDSAP256SHA256 {
			return fmt.Errorf("middleware: Config.Algorithms: %q is not supported", a)
		}
	}
	if c.MaxWindow < 0 && c.AllowMissingExpires && !c.AllowMissingNonce {
		// A signature without expires would then never expire, while its
		// nonce can only be remembered for a bounded time: a replay after
		// the store forgets it would pass.
		return errors.New("middleware: Config.MaxWindow < 0 with AllowMissingExpires leaves no bound on how long a nonce must be remembered; set MaxWindow or AllowMissingNonce")
	}
	if _, err := parseAuthorities(c.Authorities); err != nil {
		return err
	}
	if c.Algorithms != nil && len(c.Algorithms) == 0 {
		return errors.New("middleware: Config.Algorithms is empty (nil means the default list)")
	}
	for _, n := range c.RequiredComponents {
		if _, err := signer.ParseComponent(n); err != nil {
			return fmt.Errorf("middleware: Config.RequiredComponents: %w", err)
		}
	}
	for i := 0; i < len(c.Tag); i++ {
		if c.Tag[i] < 0x20 || c.Tag[i] > 0x7e {
			return fmt.Errorf("middleware: Config.Tag %q is not printable ASCII", c.Tag)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Replay == nil {
		c.Replay = newMemoryReplayStore(c.Now)
	}
	c.Tag = cmp.Or(c.Tag, signer.DefaultTag)
	if c.Algorithms == nil {
		c.Algorithms = []string{signer.AlgEd25519, signer.AlgRSAPSSSHA512, signer.AlgECDSAP256SHA256}
	}
	c.MaxWindow = cmp.Or(c.MaxWindow, defaultMaxWindow)
	if c.Skew == 0 {
		c.Skew = DefaultSkew
	} else if c.Skew < 0 {
		c.Skew = 0
	}
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, defaultMaxBodyBytes)
	if c.RefusalStatus == 0 && c.Profile == ProfileStrict01 {
		c.RefusalStatus = http.StatusForbidden // protocol-01's refusal
	}
	c.RefusalStatus = cmp.Or(c.RefusalStatus, http.StatusUnauthorized)
	l := &c.Limits
	l.MaxFieldBytes = cmp.Or(l.MaxFieldBytes, defaultMaxHeaderBytes)
	l.MaxSignatures = cmp.Or(l.MaxSignatures, defaultMaxSignatures)
	l.MaxComponents = cmp.Or(l.MaxComponents, defaultMaxComponents)
	l.MaxSignatureAgentMembers = cmp.Or(l.MaxSignatureAgentMembers, defaultMaxSignatureAgentMembers)
	l.MaxNonceLength = cmp.Or(l.MaxNonceLength, defaultMaxNonceLength)
	l.MaxKeyIDLength = cmp.Or(l.MaxKeyIDLength, defaultMaxKeyIDLength)
	l.MaxVerifyCost = cmp.Or(l.MaxVerifyCost, defaultMaxVerifyCost)
	l.MaxRSABits = cmp.Or(l.MaxRSABits, signer.DefaultMaxRSABits)
	l.Tag = c.Tag
	c.SignatureAgentCacheSize = cmp.Or(c.SignatureAgentCacheSize, DefaultSignatureAgentCacheSize)
	if c.ExpandedKeys == nil {
		c.ExpandedKeys = signer.NewExpandedKeys(signer.DefaultExpandedKeyCacheSize)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
