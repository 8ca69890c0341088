package middleware

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/agentid/agentid/signer"
)

// KeySource resolves the public key a signature names. agent is the origin of
// the signature agent (scheme://host[:port], lowercase, no path), or "" when
// the request carries no Signature-Agent and the configuration allows it.
// keyID is the signature's keyid parameter.
//
// Implementations return an error wrapping signer.ErrUnknownKey when the key
// is not published, signer.ErrRevokedKey when it has been revoked, and any
// other error when the key could not be looked up (the middleware then answers
// 503 key_fetch_failed). Implementations must be safe for concurrent use.
type KeySource interface {
	Key(ctx context.Context, agent, keyID string) (signer.PublicKey, error)
}

// KeySourceFunc adapts a function to KeySource.
type KeySourceFunc func(ctx context.Context, agent, keyID string) (signer.PublicKey, error)

// Key calls f.
func (f KeySourceFunc) Key(ctx context.Context, agent, keyID string) (signer.PublicKey, error) {
	return f(ctx, agent, keyID)
}

// StaticKeys is an in-memory KeySource for keys known out of band, and the
// fake for tests. It maps an agent origin to its keys; the agent "" holds keys
// accepted from any (or no) signature agent. It is safe for concurrent use.
type StaticKeys struct {
	mu   sync.RWMutex
	keys map[string]map[string]signer.PublicKey
}

// NewStaticKeys returns an empty StaticKeys.
func NewStaticKeys() *StaticKeys {
	return &StaticKeys{keys: map[string]map[string]signer.PublicKey{}}
}

// Add publishes pk for agent under its kid.
func (s *StaticKeys) Add(agent string, pk signer.PublicKey) {
	s.AddWithID(agent, pk.JWK.Kid, pk)
}

// AddWithID publishes pk for agent under keyID (for key ids agreed out of
// band; the verifier accepts them only with Config.AllowAnyKeyID).
func (s *StaticKeys) AddWithID(agent, keyID string, pk signer.PublicKey) {
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

// Key implements KeySource.
func (s *StaticKeys) Key(_ context.Context, agent, keyID string) (signer.PublicKey, error) {
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

// ReplayStore remembers (keyid, nonce) pairs. Seen records key until expiry
// and reports whether it was already present, atomically: of two concurrent
// calls with the same key, exactly one returns false. Implementations must be
// safe for concurrent use. An error means the store could not answer; the
// request is then rejected.
type ReplayStore interface {
	Seen(ctx context.Context, key string, expiry time.Time) (bool, error)
}

// ErrReplayStore wraps failures of a ReplayStore.
var ErrReplayStore = errors.New("middleware: replay store unavailable")
