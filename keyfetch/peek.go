package keyfetch

import "github.com/agentid/agentid/signer"

// KeyCached reports whether Key(ctx, set, keyID) would answer from memory,
// without a fetch: the key set is refused by the trust policy, or its
// cached entry is fresh and holds keyID (or an unknown keyid may not force
// a refresh yet), or its last fetch failed recently enough that the
// failure is answered again. The verification middleware asks before each
// key lookup (its KeyCache interface) so that one request causes at most
// one fetch. It does no I/O and is safe for concurrent use; the answer is
// a hint, as an entry may expire before Key runs.
func (f *Fetcher) KeyCached(set signer.KeySet, keyID string) bool {
	now := f.cfg.Now()
	e := f.load(keyOf(set))
	switch {
	case e == nil:
		return f.trustSet(set) != nil
	case now.Before(e.freshUntil):
		if _, ok := e.find(keyID, set.WellKnown); ok {
			return true
		}
		cooldown := f.cfg.RefreshCooldown
		return cooldown < 0 || (!e.forcedAt.IsZero() && now.Sub(e.forcedAt) < cooldown)
	default:
		return e.err != nil && now.Before(e.errUntil)
	}
}
