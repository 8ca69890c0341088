// Package middleware verifies RFC 9421 HTTP Message Signatures made under the
// web-bot-auth profile and attributes each request to a verified agent.
//
//	keys := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"*.agentid.example"}})
//	mw := middleware.New(middleware.Config{Keys: keys})
//	http.Handle("/", mw(handler))
//	// in the handler: agent, ok := middleware.AgentFrom(r.Context())
package middleware

import (
	"context"
	"log/slog"

	"time"

	"github.com/agentid/agentid/signer"
)

// Agent is the identity behind a verified request.
type Agent struct {
	// UID is the agent uid taken from the first label of the signature
	// agent's host when it has the form agent-<24 hex>; "" otherwise.
	UID string
	// KeyID is the keyid that signed, equal to the key's thumbprint.
	KeyID string
	// JWK is the public key that verified the signature.
	JWK signer.JWK
	// SignatureAgent is the signature agent origin (scheme://host[:port]).
	SignatureAgent string
	// DirectoryURL is SignatureAgent + /.well-known/http-message-signatures-directory.
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
}

// Config configures a Verifier and the middleware. The zero value of each
// field is the strict web-bot-auth default.
type Config struct {
	// Keys resolves (signature agent, keyid) to a public key. Required.
	Keys KeySource
	// Now is the clock. If nil, time.Now is used.
	Now func() time.Time
	// Optional lets unsigned requests through without an identity. Requests
	// that carry a signature are still verified and rejected when bad.
	Optional bool
	// Replay remembers (keyid, nonce) pairs until the signature's expiry
	// plus Skew. If nil, an in-memory store on the Now clock is used
	// (NewMemoryReplayStoreWithClock); several instances need a shared store.
	Replay ReplayStore
	// Tag is the required tag parameter. If "", "web-bot-auth".
	Tag string
	// AnyTag accepts a signature without the required tag when it is the
	// only signature in the request (plain RFC 9421 use).
	AnyTag bool
	// AllowMissingExpires accepts signatures without an expires parameter.
	AllowMissingExpires bool
	// AllowMissingNonce accepts signatures without a nonce (no replay check
	// is then possible for them).
	AllowMissingNonce bool
	// AllowMissingSignatureAgent accepts requests without Signature-Agent;
	// the key source is then asked with agent "".
	AllowMissingSignatureAgent bool
	// AllowAnyKeyID accepts a keyid that is not the RFC 7638 thumbprint of
	// the key (plain RFC 9421 with key ids agreed out of band). By default
	// the key's thumbprint must equal keyid.
	AllowAnyKeyID bool
	// RequireBound rejects signatures that do not cover Signature-Agent.
	RequireBound bool
	// MaxWindow bounds expires-created. If 0, 10 minutes; negative: unbounded.
	MaxWindow time.Duration
	// Skew is the allowed clock skew. If 0, 60 seconds; negative: none.
	Skew time.Duration
	// RequiredComponents must all be covered (e.g. "@method", "@path",
	// "content-digest"), in addition to @authority or @target-uri. A bare
	// name matches the component with any parameters; a serialized item
	// (`"signature-agent";key="sig1"`) must be covered exactly.
	RequiredComponents []string
	// MaxBodyBytes caps the body read to check Content-Digest. If 0, 1 MiB.
	MaxBodyBytes int64
	// Logger receives one debug line per rejection. If nil, discard.
	Logger *slog.Logger
}

type agentKey struct{}

// AgentFrom returns the verified agent stored in ctx by the middleware.
func AgentFrom(ctx context.Context) (Agent, bool) {
	a, ok := ctx.Value(agentKey{}).(Agent)
	return a, ok
}

// WithAgent returns ctx carrying a; handler tests use it to skip signing.
func WithAgent(ctx context.Context, a Agent) context.Context {
	return context.WithValue(ctx, agentKey{}, a)
}
