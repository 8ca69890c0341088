package middleware

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/agentid/agentid/signer"
)

// KeySource resolves the public key a signature names. set is the key set
// the request's Signature-Agent resolves to (its URL, format and identity),
// or the zero KeySet when the request carries no Signature-Agent and the
// configuration allows it. keyID is the signature's keyid parameter.
//
// At the well-known directory of an origin (set.WellKnown), and for the
// zero KeySet, the verifier accepts the key only if its thumbprint equals
// keyID (unless Config.AllowAnyKeyID); elsewhere keyID may be the JWK's kid
// or its thumbprint. Implementations return an error
// wrapping signer.ErrUnknownKey when the key is not published,
// signer.ErrRevokedKey when it has been revoked, signer.ErrUntrustedAgent
// when they refuse to look at set, and any other error when the key could
// not be looked up (the middleware then answers 503 key_fetch_failed).
// Implementations must be safe for concurrent use.
type KeySource interface {
	Key(ctx context.Context, set signer.KeySet, keyID string) (signer.PublicKey, error)
}

// KeyCache is implemented by a KeySource that can tell, without I/O,
// whether Key would answer from memory. The verifier uses it to bound the
// work of one request: at most one lookup per request may fetch (or query
// a database), and a KeySource that is not a KeyCache has every lookup
// counted as one that may. KeyCached is a hint: a key cached when asked
// may expire before Key runs. It must be safe for concurrent use.
type KeyCache interface {
	// KeyCached reports whether Key(ctx, set, keyID) would answer —
	// with a key or an error — without network or database I/O.
	KeyCached(set signer.KeySet, keyID string) bool
}

// VerifiedReporter is implemented by a KeySource that wants to know which
// key sets signatures verified with: keyfetch.Fetcher admits such a set to
// the part of its cache that lookups naming unverified key sets cannot
// evict. The verifier calls Verified after a signature and its
// Content-Digest check pass. It must be safe for concurrent use.
type VerifiedReporter interface {
	Verified(set signer.KeySet)
}

// KeySourceFunc adapts a function to KeySource.
type KeySourceFunc func(ctx context.Context, set signer.KeySet, keyID string) (signer.PublicKey, error)

// Key calls f.
func (f KeySourceFunc) Key(ctx context.Context, set signer.KeySet, keyID string) (signer.PublicKey, error) {
	return f(ctx, set, keyID)
}

// StaticKeys is an in-memory KeySource for keys known out of band, and the
// fake for tests. It maps an agent identity (an origin such as
// "https://agent.example", or a key-set URL) to its keys; the identity ""
// holds keys accepted from any (or no) signature agent. It is safe for
// concurrent use.
type StaticKeys struct {
	mu   sync.RWMutex
	keys map[string]map[string]signer.PublicKey
}

// NewStaticKeys returns an empty StaticKeys.
func NewStaticKeys() *StaticKeys {
	return &StaticKeys{keys: map[string]map[string]signer.PublicKey{}}
}

// Add publishes pk for agent under its kid (and its thumbprint, when the
// kid is another name).
func (s *StaticKeys) Add(agent string, pk signer.PublicKey) {
	s.addWithID(agent, pk.JWK.Kid, pk)
	if pk.Thumbprint != "" && pk.Thumbprint != pk.JWK.Kid {
		s.addWithID(agent, pk.Thumbprint, pk)
	}
}

// addWithID publishes pk for agent under keyID (for key ids agreed out of
// band; at a well-known directory the verifier accepts them only with
// Config.AllowAnyKeyID).
func (s *StaticKeys) addWithID(agent, keyID string, pk signer.PublicKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.keys[agent]
	if m == nil {
		m = map[string]signer.PublicKey{}
		s.keys[agent] = m
	}
	m[keyID] = pk
}

// Remove withdraws keyID from agent.
func (s *StaticKeys) Remove(agent, keyID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys[agent], keyID)
}

// KeyCached implements KeyCache: StaticKeys never does I/O.
func (s *StaticKeys) KeyCached(signer.KeySet, string) bool { return true }

// Key implements KeySource: it looks keyID up under set.Identity(), then
// under "".
func (s *StaticKeys) Key(_ context.Context, set signer.KeySet, keyID string) (signer.PublicKey, error) {
	agent := ""
	if !set.IsZero() {
		agent = set.Identity()
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if pk, ok := s.keys[agent][keyID]; ok {
		return pk, nil
	}
	if pk, ok := s.keys[""][keyID]; ok {
		return pk, nil
	}
	return signer.PublicKey{}, signer.ErrUnknownKey
}

// ReplayStore remembers the nonces of verified signatures. Seen records key
// until expiry and reports whether it was already present, atomically: of
// two concurrent calls with the same key, exactly one returns false. The
// verifier's key is ReplayKey: a 32-byte digest of the verified key's
// thumbprint and the nonce. Stores may hash keys again to a fixed size of their own,
// so that a key from another caller cannot make an entry large.
// Implementations must be safe for concurrent use. An error means the store could not answer; the request is
// then refused (503), never let through.
type ReplayStore interface {
	Seen(ctx context.Context, key string, expiry time.Time) (bool, error)
}

// ErrReplayStore wraps failures of a ReplayStore.
var ErrReplayStore = errors.New("middleware: replay store unavailable")
