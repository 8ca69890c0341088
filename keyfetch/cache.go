package keyfetch

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/agentid/agentid/signer"
)

// cacheKey identifies a cached key set: the same URL read as a directory
// and as a Signature Agent Card are two entries.
type cacheKey struct {
	kind signer.KeySetKind
	url  string
}

func keyOf(set signer.KeySet) cacheKey { return cacheKey{kind: set.Kind, url: set.URL} }

// entry is one key set's cache state. Entries are never mutated after being
// stored; writers store a modified copy under Fetcher.mu.
type entry struct {
	url       string
	has       bool               // a fetch succeeded: the fields below hold a set
	admitted  bool               // verified once: held in entries, not probation
	overQuota bool               // admission refused (its site was full); retried after a refresh
	list      []signer.PublicKey // keys in document order
	// byThumb (RFC 7638 thumbprint → index in list) and byID (kid, else
	// thumbprint → index) are built only for sets of more than
	// indexedKeys keys; smaller ones, nearly all, are searched in order,
	// which is as fast and saves two maps per cached set.
	byThumb    map[string]int
	byID       map[string]int
	etag       string
	jwksURL    string // a card's jwks_uri, "" when the keys are inline
	jwksETag   string
	notFound   int       // status (404 or 410) when the key set does not exist
	freshUntil time.Time // keys are used without refetching until then
	staleUntil time.Time // keys may serve while fetches fail until then
	err        error     // last fetch failure, nil after a success
	errUntil   time.Time // err is returned without fetching until then
	forcedAt   time.Time // last refresh forced by an unknown keyid
	site       uint64    // the site an admitted set is charged to (its siteOf's hash)
	card       *Card     // a Signature Agent Card's description (KindCard)

	// signedUntil caps freshUntil and staleUntil (RequireSignedDirectories):
	// the directory signatures vouching for the keys expire then. Zero: no
	// cap.
	signedUntil time.Time
}

// compact returns keys as a cached set holds them: a slice of exactly its
// length, a kid equal to the thumbprint sharing its string, and the
// usual short JWK members as constants, so that 100,000 cached sets do
// not hold 100,000 copies of "OKP" and "Ed25519".
func compact(keys []signer.PublicKey) []signer.PublicKey {
	out := make([]signer.PublicKey, len(keys))
	for i, k := range keys {
		if k.JWK.Kid == k.Thumbprint {
			k.JWK.Kid = k.Thumbprint
		}
		k.JWK.Kty = intern(k.JWK.Kty, "OKP", "RSA", "EC")
		k.JWK.Crv = intern(k.JWK.Crv, "Ed25519", "P-256")
		k.JWK.Alg = intern(k.JWK.Alg, "EdDSA", "Ed25519", "RS256", "PS256", "PS512", "ES256")
		k.JWK.E = intern(k.JWK.E, "AQAB")
		// The Ed25519 backend's precomputed table (most of a key's memory)
		// is not kept per cached key: the verifier keeps those of the keys verifying
		// most often (middleware.Config.ExpandedKeys).
		out[i] = k.Unexpanded()
	}
	return out
}

// intern returns the constant among consts equal to s, else s.
func intern(s string, consts ...string) string {
	for _, c := range consts {
		if s == c {
			return c
		}
	}
	return s
}

// indexedKeys is the size above which a key set gets lookup maps.
const indexedKeys = 8

// find looks keyID up: by thumbprint only at a well-known directory, else
// by kid, then by thumbprint. Kids are unique in a set (parseKeySet skips
// duplicates); of keys sharing a thumbprint the first wins, and a kid wins
// over another key's thumbprint.
func (e *entry) find(keyID string, wellKnown bool) (signer.PublicKey, bool) {
	if e.byThumb != nil {
		m := e.byID
		if wellKnown {
			m = e.byThumb
		}
		i, ok := m[keyID]
		if !ok {
			return signer.PublicKey{}, false
		}
		return e.list[i], true
	}
	if !wellKnown {
		for i := range e.list {
			if e.list[i].JWK.Kid == keyID {
				return e.list[i], true
			}
		}
	}
	for i := range e.list {
		if e.list[i].Thumbprint == keyID {
			return e.list[i], true
		}
	}
	return signer.PublicKey{}, false
}

// lookup finds keyID in e, serving stale keys while the last fetch failed.
func (e *entry) lookup(keyID string, wellKnown bool, now time.Time) (signer.PublicKey, error) {
	if e.err == nil || (e.has && now.Before(e.staleUntil)) {
		if pk, ok := e.find(keyID, wellKnown); ok {
			return pk, nil
		}
		if e.err == nil {
			if e.notFound != 0 {
				return signer.PublicKey{}, fmt.Errorf("keyfetch: %w: %q (%s answered %d)", signer.ErrUnknownKey, signer.Truncate(keyID), e.url, e.notFound)
			}
			if wellKnown {
				return signer.PublicKey{}, fmt.Errorf("keyfetch: %w: no key of %s has the thumbprint %q", signer.ErrUnknownKey, e.url, signer.Truncate(keyID))
			}
			return signer.PublicKey{}, fmt.Errorf("keyfetch: %w: %q is not in %s", signer.ErrUnknownKey, signer.Truncate(keyID), e.url)
		}
	}
	return signer.PublicKey{}, e.err
}

func (f *Fetcher) load(k cacheKey) *entry {
	if e, ok := f.entries.Get(k); ok {
		return e
	}
	e, _ := f.probation.Get(k)
	return e
}

// fetchAndStore fetches set and stores the outcome. set passed trustSet
// before its first entry was made (current), and fetch checks each URL it
// requests against the trust policy again.
func (f *Fetcher) fetchAndStore(ctx context.Context, set signer.KeySet) (*entry, error) {
	k := keyOf(set)
	prev := f.load(k)
	o, ferr := f.resolve(ctx, set, prev)
	now := f.cfg.Now()
	c := &f.cfg
	switch {
	case ferr != nil && context.Cause(ctx) == errAbandoned:
		// Nobody waits: remember nothing, so a caller hanging up cannot
		// make a key set fail for the others.
		return nil, &FetchError{URL: set.URL, Err: errAbandoned}
	case errors.Is(ferr, ErrHostBusy):
		return nil, ferr
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.regs) > 0 {
		// A registry may have dropped the set's host while it was being
		// fetched (publishTrust purges under f.mu): store nothing then.
		if err := f.TrustURL(set.URL); err != nil {
			return nil, err
		}
	}
	cur := f.load(k)
	ne := &entry{url: set.URL}
	if cur != nil {
		ne.forcedAt, ne.admitted = cur.forcedAt, cur.admitted
	}
	keep := func() { // carry the last good set over
		if cur != nil && cur.has {
			forced := ne.forcedAt
			*ne = *cur
			ne.forcedAt, ne.err, ne.errUntil = forced, nil, time.Time{}
		}
	}
	setTTL := func(ttl time.Duration) {
		ne.freshUntil = now.Add(ttl)
		ne.staleUntil = ne.freshUntil
		if c.MaxStale > 0 {
			ne.staleUntil = ne.freshUntil.Add(c.MaxStale)
		}
		if u := ne.signedUntil; !u.IsZero() {
			ne.freshUntil, ne.staleUntil = minTime(ne.freshUntil, u), minTime(ne.staleUntil, u)
		}
	}
	switch {
	case ferr == nil && o.kept && cur != nil && cur.has && cur.notFound == 0 && !cur.signedUntil.IsZero() && !now.Before(cur.signedUntil):
		// A 304 says the body is unchanged, not that its signatures
		// still hold: past their expiry it renews nothing.
		ferr = &FetchError{URL: set.URL, StatusCode: http.StatusNotModified,
			Err: fmt.Errorf("%w: status 304 for a key set whose directory signatures expired at %s, and RequireSignedDirectories is set", ErrUnsignedDirectory, cur.signedUntil.UTC().Format(time.RFC3339))}
	case ferr == nil && o.kept && cur != nil && cur.has && cur.notFound == 0:
		keep()
		if o.doc.etag != "" {
			ne.etag = o.doc.etag
		}
		if o.jwks != nil && o.jwks.etag != "" {
			ne.jwksETag = o.jwks.etag
		}
		setTTL(o.ttl)
		c.Logger.Debug("keyfetch: key set not modified", "url", set.URL, "ttl", o.ttl)
	case ferr == nil && o.kept:
		ferr = &FetchError{URL: set.URL, StatusCode: http.StatusNotModified, Err: fmt.Errorf("status 304 without a cached copy")}
	case ferr == nil && o.notFound != 0 && cur != nil && cur.has && cur.notFound == 0:
		// Only a 200 delivers keys: a set served before is not wiped by a
		// 404 or 410, which is a failed refresh like any other.
		ferr = &FetchError{URL: o.notFoundURL, StatusCode: o.notFound,
			Err: fmt.Errorf("status %d where a key set was served before: the last good set keeps serving within the stale window", o.notFound)}
	case ferr == nil && o.notFound != 0:
		ne.has, ne.notFound = true, o.notFound
		ne.freshUntil = now.Add(max(c.NegativeTTL, 0))
		ne.staleUntil = ne.freshUntil
		c.Logger.Debug("keyfetch: key set not found", "url", o.notFoundURL, "status", o.notFound)
	case ferr == nil:
		ne.has = true
		ne.list = compact(o.keys)
		if len(o.keys) > indexedKeys {
			ne.byThumb, ne.byID = index(o.keys)
		}
		ne.etag, ne.jwksURL = o.doc.etag, o.jwksURL
		if o.jwks != nil {
			ne.jwksETag = o.jwks.etag
		}
		ne.signedUntil = o.signedUntil
		setTTL(o.ttl)
		ne.admitted = ne.admitted || o.authenticated
		ne.card = o.card
		if ne.card == nil && cur != nil { // the card was not modified, its jwks_uri was
			ne.card = cur.card
		}
		for _, p := range o.problems {
			c.Logger.Warn("keyfetch: "+p, "url", set.URL)
		}
		c.Logger.Debug("keyfetch: key set fetched", "url", set.URL, "keys", len(o.keys), "ttl", o.ttl)
	}
	if ferr != nil {
		keep()
		if errors.Is(ferr, ErrUnsignedDirectory) && o != nil && !o.kept && ne.has && ne.notFound == 0 {
			// An unsigned answer cannot add a key, but it can take one
			// away: the last good set serves without the keys it no
			// longer lists.
			ne.keepListed(o.keys)
		}
		ne.err = ferr
		ne.errUntil = now.Add(max(c.NegativeTTL, 0))
		c.Logger.Warn("keyfetch: key set fetch failed", "url", set.URL, "err", ferr)
	}
	f.storeLocked(k, ne, now)
	return ne, nil
}

// keepListed drops from e's set the keys that listed does not hold as
// they are (the same kid and thumbprint). e is a copy being built, not
// yet stored.
func (e *entry) keepListed(listed []signer.PublicKey) {
	kept := make([]signer.PublicKey, 0, len(e.list))
	for _, k := range e.list {
		for _, l := range listed {
			if l.Thumbprint == k.Thumbprint && l.JWK.Kid == k.JWK.Kid {
				kept = append(kept, k)
				break
			}
		}
	}
	if len(kept) == len(e.list) {
		return
	}
	e.list, e.byThumb, e.byID = kept, nil, nil
	if len(kept) > indexedKeys {
		e.byThumb, e.byID = index(kept)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// index builds the lookup maps of a key set: by thumbprint (the first key
// with it wins) and by kid, then thumbprint (a kid wins over another key's
// thumbprint).
func index(keys []signer.PublicKey) (byThumb, byID map[string]int) {
	byThumb = make(map[string]int, len(keys))
	byID = make(map[string]int, 2*len(keys))
	for i, k := range keys {
		if _, ok := byThumb[k.Thumbprint]; !ok {
			byThumb[k.Thumbprint] = i
		}
		byID[k.JWK.Kid] = i // kids are unique: parseKeySet skips duplicates
	}
	for i, k := range keys {
		if _, ok := byID[k.Thumbprint]; !ok {
			byID[k.Thumbprint] = i
		}
	}
	return byThumb, byID
}

// storeLocked stores e: in entries when it is admitted, else in
// probation. A set to be admitted whose site already holds MaxSetsPerSite
// admitted sets stays on probation (e.admitted is cleared, e.overQuota
// set). A key set new to its segment that finds it full first drops the
// segment's dead entries (no set left to serve, no failure to remember);
// if none is dead, the segment's least recently used one goes. f.mu must
// be held.
func (f *Fetcher) storeLocked(k cacheKey, e *entry, now time.Time) {
	if e.admitted {
		if old, held := f.entries.Get(k); held {
			e.site = old.site
		} else {
			e.site = maphash.String(f.seed, f.siteOf(e.url))
			if q := f.cfg.MaxSetsPerSite; q > 0 && int(f.sites[e.site]) >= q {
				e.admitted, e.overQuota = false, true
			}
		}
	}
	seg, size := f.probation, f.cfg.MaxProbation
	if e.admitted {
		seg, size = f.entries, f.cfg.MaxOrigins
		f.probation.Remove(k)
	}
	_, held := seg.Get(k)
	if !held && seg.Len() >= size {
		seg.RemoveFunc(func(_ cacheKey, old *entry) bool {
			return !now.Before(old.staleUntil) && !now.Before(old.errUntil)
		})
	}
	seg.Add(k, e)
	if e.admitted && !held {
		f.sites[e.site]++
	}
}

// siteOf returns the site a key set at rawURL is charged to while
// admitted: what its publisher cannot multiply at will. Scheme, port,
// path, query and the case of the host are the publisher's to vary, so a
// site is a host alone, lowercase, an IP address in its canonical form.
// Under a wildcard TrustedHosts entry "*.suffix" (the most specific one
// matching the host, ports aside, unless an exact entry matches it), whoever holds a name
// below the suffix can mint names below theirs: the site is the one label
// under the suffix ("x.suffix" for "a.b.x.suffix"). A host trusted only
// through a registry is its own site.
func (f *Fetcher) siteOf(rawURL string) string {
	t, err := f.checkURL(rawURL)
	if err != nil { // not reached: a cached set passed the trust policy
		return rawURL
	}
	host := t.host
	if t.isIP {
		return netip.MustParseAddr(host).Unmap().String()
	}
	suffix := "" // ports aside, so that the port does not choose the site
	for _, p := range f.cfg.patterns {
		switch {
		case !p.wildcard && p.host == host:
			return host
		case p.wildcard && len(host) > len(p.host) && strings.HasSuffix(host, p.host) && len(p.host) > len(suffix):
			suffix = p.host
		}
	}
	if suffix == "" {
		return host
	}
	below := host[:len(host)-len(suffix)]
	if i := strings.LastIndexByte(below, '.'); i >= 0 {
		below = below[i+1:]
	}
	return below + suffix
}
