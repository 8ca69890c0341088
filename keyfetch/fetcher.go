package keyfetch

import (
	"context"
	"fmt"
	"hash/maphash"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/lru"
)

// Fetcher resolves (key set, keyid) to a public key by fetching the key
// set's URL. It is safe for concurrent use.
type Fetcher struct {
	cfg    settings
	client *http.Client

	// Entries are immutable once stored. A key set lives in probation until
	// it is admitted (Verified, or a directory signature covering its
	// body), then in entries; probation entries never evict admitted ones.
	entries   *lru.Cache[cacheKey, *entry]
	probation *lru.Cache[cacheKey, *entry]
	mu        sync.Mutex // serialises writers of entries and probation
	// sites counts the admitted sets charged to each site (siteOf), by
	// the site's hash under seed (a 64-bit keyed hash: nobody outside can
	// make two sites collide), for MaxSetsPerSite. Every change of entries
	// runs under mu, and so does entries' removal hook that decrements it.
	sites map[uint64]int32
	seed  maphash.Seed

	fmu     sync.Mutex         // guards flights and busy
	flights map[string]*flight // shared fetches in flight, by kind and URL
	busy    map[string]int     // fetches in flight per host:port

	regs     []*registryList               // one per Config.Registries
	regMu    sync.Mutex                    // serialises registry refreshes
	regTrust atomic.Pointer[registryTrust] // what the registries' last good lists trust
}

// New returns a Fetcher for cfg. It panics if cfg is invalid; call
// cfg.Validate first to report the problem cleanly.
func New(cfg Config) *Fetcher {
	s, err := cfg.withDefaults()
	if err != nil {
		panic(err)
	}
	f := &Fetcher{
		cfg:       s,
		entries:   lru.New[cacheKey, *entry](s.MaxOrigins, 0, nil),
		probation: lru.New[cacheKey, *entry](s.MaxProbation, 0, nil),
		sites:     map[uint64]int32{},
		seed:      maphash.MakeSeed(),
		flights:   map[string]*flight{},
		busy:      map[string]int{},
	}
	f.entries.OnRemove(func(_ cacheKey, e *entry) {
		if f.sites[e.site]--; f.sites[e.site] <= 0 {
			delete(f.sites, e.site)
		}
	})
	for _, u := range s.Registries {
		f.regs = append(f.regs, &registryList{url: u, cards: map[string]*cardState{}})
	}
	if len(s.TrustedHosts) == 0 {
		s.Logger.Warn("keyfetch: TrustedHosts is empty, so every key set is refused (untrusted_signature_agent): " +
			`name your agents' hosts, e.g. TrustedHosts: []string{"*.agentid.example"}, or use keyfetch.LocalDevelopment() for a server on this machine`)
	}
	if s.HTTPClient == nil {
		f.client = NewClient(s.AllowPrivateNetworks, s.Timeout)
	} else {
		c := *s.HTTPClient
		c.CheckRedirect = noRedirect
		f.client = &c
	}
	return f
}

// Key returns the key keyID published in the key set set: at a well-known
// directory (set.WellKnown) the key whose RFC 7638 thumbprint is keyID,
// elsewhere the key whose kid is keyID, else the one whose thumbprint is.
// Errors wrap signer.ErrUntrustedAgent (nothing was fetched),
// signer.ErrUnknownKey (the set does not hold keyID), or are a
// *FetchError. A cache hit does not allocate.
func (f *Fetcher) Key(ctx context.Context, set signer.KeySet, keyID string) (signer.PublicKey, error) {
	k := keyOf(set)
	now := f.cfg.Now()
	e := f.load(k)
	if e != nil && now.Before(e.freshUntil) {
		if pk, ok := e.find(keyID, set.WellKnown); ok {
			return pk, nil
		}
		return f.unknownOnFresh(ctx, set, keyID, now)
	}
	e, err := f.current(ctx, set, e, now)
	if err != nil {
		return signer.PublicKey{}, err
	}
	return e.lookup(keyID, set.WellKnown, f.cfg.Now())
}

// Keys returns the keys currently published in set, through the cache
// (fetching if needed), in document order. The slice must not be modified.
func (f *Fetcher) Keys(ctx context.Context, set signer.KeySet) ([]signer.PublicKey, error) {
	now := f.cfg.Now()
	e := f.load(keyOf(set))
	if e == nil || !now.Before(e.freshUntil) {
		var err error
		if e, err = f.current(ctx, set, e, now); err != nil {
			return nil, err
		}
	}
	now = f.cfg.Now()
	if e.err == nil || (e.has && now.Before(e.staleUntil)) {
		return e.list, nil
	}
	return nil, e.err
}

// current returns a usable entry for set whose cached entry e is missing
// or expired: the negatively cached failure, or the result of a (shared)
// refresh.
func (f *Fetcher) current(ctx context.Context, set signer.KeySet, e *entry, now time.Time) (*entry, error) {
	if e == nil {
		if err := f.trustSet(set); err != nil {
			return nil, err
		}
	} else if e.err != nil && now.Before(e.errUntil) {
		return e, nil
	}
	return f.refresh(ctx, set, e)
}

// unknownOnFresh handles a keyid missing from a fresh entry: at most one
// caller per cooldown refreshes; the others get ErrUnknownKey at once.
func (f *Fetcher) unknownOnFresh(ctx context.Context, set signer.KeySet, keyID string, now time.Time) (signer.PublicKey, error) {
	if f.cfg.RefreshCooldown < 0 {
		return signer.PublicKey{}, f.unknown(set, keyID)
	}
	k := keyOf(set)
	f.mu.Lock()
	e := f.load(k)
	if e == nil { // evicted meanwhile
		f.mu.Unlock()
		return signer.PublicKey{}, f.unknown(set, keyID)
	}
	if pk, ok := e.find(keyID, set.WellKnown); ok { // a refresh landed meanwhile
		f.mu.Unlock()
		return pk, nil
	}
	if !e.forcedAt.IsZero() && now.Sub(e.forcedAt) < f.cfg.RefreshCooldown {
		f.mu.Unlock()
		return signer.PublicKey{}, f.unknown(set, keyID)
	}
	ne := *e
	ne.forcedAt = now
	f.storeLocked(k, &ne, now)
	f.mu.Unlock()
	f.cfg.Logger.Debug("keyfetch: unknown keyid forces a refresh", "url", e.url, "kid", keyID)
	e2, err := f.refresh(ctx, set, &ne)
	if err != nil {
		return signer.PublicKey{}, err
	}
	return e2.lookup(keyID, set.WellKnown, f.cfg.Now())
}

func (f *Fetcher) unknown(set signer.KeySet, keyID string) error {
	return fmt.Errorf("keyfetch: %w: %q is not in %s", signer.ErrUnknownKey, signer.Truncate(keyID), set.URL)
}

// Verified reports that a signature by a key of set verified. The key set
// leaves probation: from then on, lookups naming other key sets, however
// many, cannot evict it (only other admitted sets can, beyond
// MaxOrigins). A verifier calls it after each successful verification; it
// is cheap once the set is admitted, and does nothing for a set that is
// not cached.
func (f *Fetcher) Verified(set signer.KeySet) {
	k := keyOf(set)
	if e := f.load(k); e == nil || e.admitted || e.overQuota {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.load(k)
	if e == nil || e.admitted || e.overQuota {
		return
	}
	ne := *e
	ne.admitted = true
	f.storeLocked(k, &ne, f.cfg.Now())
	if ne.admitted {
		f.cfg.Logger.Debug("keyfetch: key set admitted", "url", e.url)
	} else {
		f.cfg.Logger.Debug("keyfetch: key set left on probation: its site holds MaxSetsPerSite admitted sets", "url", e.url, "site", f.siteOf(e.url))
	}
}
