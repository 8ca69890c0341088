package refserver

import (
	"context"
	"time"

	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
)

// WaitKeyLookup waits for the database lookup of kid in flight, if any
// (such as a background refresh). Tests only: a lookup of kid starting
// meanwhile would get no answer.
func (k *keySource) WaitKeyLookup(kid string) {
	k.group.Do(kid, func() (any, error) { return nil, nil })
}

// RotateAgent rotates uid from its key signingKid to pk as PUT
// /agents/{uid}/keys does once both signatures are verified. Tests only:
// it rotates without looking up any key.
func (s *Server) RotateAgent(ctx context.Context, uid, signingKid string, pk signer.PublicKey) error {
	return s.rotateAgent(ctx, uid, signingKid, pk, true, nil)
}

// KeySource returns the database key source the server verifies its own
// agents' signatures with.
func (s *Server) KeySource() *keySource { return s.keys }

// Parses returns how many requests had their signature fields parsed for
// a route that checks them with CheckSigned.
func (s *Server) Parses() int64 { return s.parses.Load() }

// ManualKeySync leaves the change log of the server built with c unread
// until the test calls SyncChanges.
func ManualKeySync(c *Config) { c.manualKeySync = true }

// SyncChanges reads the change log once, as the background reader does,
// and reports whether the read completed.
func (k *keySource) SyncChanges(ctx context.Context) bool { return k.changes.Sync(ctx) }

// SetMonoClock replaces the monotonic clock of the change log's bounds.
func (k *keySource) SetMonoClock(now func() time.Duration) { k.changes.mono = now }

// SetChangeInterval sets how often the change log is read; call it before
// the first lookup.
func (k *keySource) SetChangeInterval(d time.Duration) { k.changes.every = d }

// ChangeReads returns how many complete reads of the change log were made.
func (k *keySource) ChangeReads() int64 { return k.changes.reads.Load() }

// NewDBKeySource returns an uncached key source for the agents of the
// service at hostname (as Config.Hostname).
func NewDBKeySource(db *store.DB, hostname string) (*keySource, error) {
	service, err := ParseHostname(hostname)
	if err != nil {
		return nil, err
	}
	return newKeySource(keySourceConfig{db: db, service: service, timeout: DefaultDBTimeout}), nil
}
