// Package keyfetch fetches, validates and caches signature agents' key
// directories (/.well-known/http-message-signatures-directory) without
// letting a request steer the server into its own network (SSRF-safe).
//
//	keys := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"*.agentid.example"}})
//	pk, err := keys.Key(ctx, "https://agent-x.agentid.example", kid)
//	// errors.Is(err, signer.ErrUntrustedAgent): host not trusted, nothing was sent
//	// errors.Is(err, signer.ErrUnknownKey): the directory does not list kid
//	// errors.As(err, new(*keyfetch.FetchError)): the directory could not be fetched
//
// A *Fetcher satisfies middleware.KeySource.
//
// # Cache behaviour
//
// Each origin's key set is cached for the Cache-Control max-age of the
// directory response, clamped to [MinTTL, MaxTTL] (DefaultTTL without
// max-age; MinTTL for no-store or no-cache). An expired set is revalidated
// with If-None-Match when the directory sent an ETag; a 304 renews it. A
// successful refresh replaces the whole set, so a key removed upstream stops
// verifying after the next refresh. Concurrent lookups of an origin share
// one fetch. A keyid absent from a fresh set forces one refresh per origin
// per RefreshCooldown; other lookups meanwhile get signer.ErrUnknownKey at
// once. A failed fetch is remembered for NegativeTTL; while fetches fail the
// last good set keeps serving for up to MaxStale past its expiry. A 404 or
// 410 directory is an authoritative empty set (signer.ErrUnknownKey), not a
// failure. Untrusted origins are never fetched and never cached.
package keyfetch

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/agentid/agentid/signer"
)

// Fetcher resolves (signature agent origin, keyid) to a public key by
// fetching the origin's key directory. It is safe for concurrent use.
type Fetcher struct {
	cfg    settings
	client *http.Client

	entries sync.Map // origin string → *entry (immutable once stored)
	count   atomic.Int64
	mu      sync.Mutex // serialises writers of entries
	group   singleflight.Group
}

// entry is one origin's cache state. Entries are never mutated after being
// stored; writers store a modified copy under Fetcher.mu.
type entry struct {
	url        string
	keys       map[string]signer.PublicKey // nil until a fetch succeeded
	list       []signer.PublicKey          // keys in directory order
	etag       string
	notFound   int       // status (404 or 410) when the directory does not exist
	freshUntil time.Time // keys are used without refetching until then
	staleUntil time.Time // keys may serve while fetches fail until then
	err        error     // last fetch failure, nil after a success
	errUntil   time.Time // err is returned without fetching until then
	forcedAt   time.Time // last refresh forced by an unknown keyid
}

// New returns a Fetcher for cfg. It panics if cfg is invalid; call
// cfg.Validate first to report the problem cleanly.
func New(cfg Config) *Fetcher {
	s, err := cfg.withDefaults()
	if err != nil {
		panic(err)
	}
	f := &Fetcher{cfg: s}
	if s.HTTPClient == nil {
		f.client = newHTTPClient(s.AllowPrivateNetworks, s.Timeout)
	} else {
		c := *s.HTTPClient
		c.CheckRedirect = noRedirect
		f.client = &c
	}
	return f
}

// DirectoryURL returns the key directory URL of the signature agent origin
// agent, or an error wrapping signer.ErrUntrustedAgent if the origin is
// malformed, uses a disallowed scheme or names an untrusted host.
func (f *Fetcher) DirectoryURL(agent string) (string, error) {
	untrusted := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("keyfetch: %w: "+format, append([]any{signer.ErrUntrustedAgent}, args...)...)
	}
	u, err := url.Parse(agent)
	if err != nil || u.Opaque != "" || u.User != nil || (u.Path != "" && u.Path != "/") ||
		u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Host == "" {
		return untrusted("%q is not an origin (scheme://host[:port])", truncate(agent))
	}
	scheme := strings.ToLower(u.Scheme)
	defPort := ""
	switch {
	case scheme == "https":
		defPort = "443"
	case scheme == "http" && f.cfg.AllowHTTP:
		defPort = "80"
	case scheme == "http":
		return untrusted("http scheme refused (AllowHTTP is off) for %q", truncate(agent))
	default:
		return untrusted("scheme %q refused", truncate(u.Scheme))
	}
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if strings.HasSuffix(u.Host, ":") {
		return untrusted("%q has an empty port", truncate(agent))
	}
	a, ipErr := netip.ParseAddr(host)
	isIP := ipErr == nil
	if isIP && a.Zone() != "" {
		return untrusted("%q: zoned addresses are refused", truncate(agent))
	}
	if !isIP && !validHostname(host) {
		return untrusted("%q has an invalid host name", truncate(agent))
	}
	if isIP != strings.HasPrefix(u.Host, "[") && a.Is6() {
		return untrusted("%q: IPv6 must be bracketed", truncate(agent))
	}
	effPort := port
	if effPort == "" {
		effPort = defPort
	}
	for _, p := range f.cfg.patterns {
		if p.match(host, effPort, isIP) {
			hostport := host
			if isIP && a.Is6() {
				hostport = "[" + host + "]"
			}
			if port != "" {
				hostport += ":" + port
			}
			return scheme + "://" + hostport + signer.DirectoryPath, nil
		}
	}
	return untrusted("host %q is not in TrustedHosts", truncate(host))
}

// Key returns the key keyID published in the key set set. Errors wrap
// signer.ErrUntrustedAgent (nothing was fetched), signer.ErrUnknownKey (the
// directory does not list keyID), or are a *FetchError. A cache hit does
// not allocate.
func (f *Fetcher) Key(ctx context.Context, set signer.KeySet, keyID string) (signer.PublicKey, error) {
	if set.IsZero() || set.Kind != signer.KindDirectory || set.Identity() != set.Origin() {
		return signer.PublicKey{}, fmt.Errorf("keyfetch: %w: only an origin's well-known directory is fetched", signer.ErrUntrustedAgent)
	}
	return f.originKey(ctx, set.Origin(), keyID)
}

func (f *Fetcher) originKey(ctx context.Context, agent, keyID string) (signer.PublicKey, error) {
	now := f.cfg.Now()
	e := f.load(agent)
	if e != nil && now.Before(e.freshUntil) {
		if pk, ok := e.keys[keyID]; ok {
			return pk, nil
		}
		return f.unknownOnFresh(ctx, agent, keyID, now)
	}
	e, err := f.current(ctx, agent, e, now)
	if err != nil {
		return signer.PublicKey{}, err
	}
	return e.lookup(keyID, f.cfg.Now())
}

// Directory returns the keys currently published by agent, through the
// cache (fetching if needed), in directory order. The slice must not be
// modified.
func (f *Fetcher) Directory(ctx context.Context, agent string) ([]signer.PublicKey, error) {
	now := f.cfg.Now()
	e := f.load(agent)
	if e == nil || !now.Before(e.freshUntil) {
		var err error
		if e, err = f.current(ctx, agent, e, now); err != nil {
			return nil, err
		}
	}
	now = f.cfg.Now()
	if e.err == nil || (e.keys != nil && now.Before(e.staleUntil)) {
		return e.list, nil
	}
	return nil, e.err
}

// current returns a usable entry for agent whose cached entry e is missing
// or expired: the negatively cached failure, or the result of a (shared)
// refresh.
func (f *Fetcher) current(ctx context.Context, agent string, e *entry, now time.Time) (*entry, error) {
	if e == nil {
		if _, err := f.DirectoryURL(agent); err != nil {
			return nil, err
		}
	} else if e.err != nil && now.Before(e.errUntil) {
		return e, nil
	}
	return f.refresh(ctx, agent, e)
}

// unknownOnFresh handles a keyid missing from a fresh entry: at most one
// caller per cooldown refreshes; the others get ErrUnknownKey at once.
func (f *Fetcher) unknownOnFresh(ctx context.Context, agent, keyID string, now time.Time) (signer.PublicKey, error) {
	if f.cfg.RefreshCooldown < 0 {
		return signer.PublicKey{}, f.unknown(agent, keyID)
	}
	f.mu.Lock()
	e := f.load(agent)
	if e == nil { // evicted meanwhile
		f.mu.Unlock()
		return signer.PublicKey{}, f.unknown(agent, keyID)
	}
	if pk, ok := e.keys[keyID]; ok { // a refresh landed meanwhile
		f.mu.Unlock()
		return pk, nil
	}
	if !e.forcedAt.IsZero() && now.Sub(e.forcedAt) < f.cfg.RefreshCooldown {
		f.mu.Unlock()
		return signer.PublicKey{}, f.unknown(agent, keyID)
	}
	ne := *e
	ne.forcedAt = now
	f.entries.Store(agent, &ne)
	f.mu.Unlock()
	f.cfg.Logger.Debug("keyfetch: unknown keyid forces a refresh", "url", e.url, "kid", keyID)
	e2, err := f.refresh(ctx, agent, &ne)
	if err != nil {
		return signer.PublicKey{}, err
	}
	return e2.lookup(keyID, f.cfg.Now())
}

func (f *Fetcher) unknown(agent, keyID string) error {
	return fmt.Errorf("keyfetch: %w: %q in the directory of %s", signer.ErrUnknownKey, truncate(keyID), agent)
}

// lookup finds keyID in e, serving stale keys while the last fetch failed.
func (e *entry) lookup(keyID string, now time.Time) (signer.PublicKey, error) {
	if e.err == nil || (e.keys != nil && now.Before(e.staleUntil)) {
		if pk, ok := e.keys[keyID]; ok {
			return pk, nil
		}
		if e.err == nil {
			if e.notFound != 0 {
				return signer.PublicKey{}, fmt.Errorf("keyfetch: %w: %q (directory %s answered %d)", signer.ErrUnknownKey, truncate(keyID), e.url, e.notFound)
			}
			return signer.PublicKey{}, fmt.Errorf("keyfetch: %w: %q is not in %s", signer.ErrUnknownKey, truncate(keyID), e.url)
		}
	}
	return signer.PublicKey{}, e.err
}

func (f *Fetcher) load(agent string) *entry {
	v, ok := f.entries.Load(agent)
	if !ok {
		return nil
	}
	return v.(*entry)
}

// refresh fetches agent's directory once for all concurrent callers and
// stores the outcome. seen is the entry the caller found (nil if none): if
// another flight stored a usable entry since, that one is returned without
// fetching again. The fetch runs detached from ctx with its own timeout; ctx
// only bounds this caller's wait.
func (f *Fetcher) refresh(ctx context.Context, agent string, seen *entry) (*entry, error) {
	ch := f.group.DoChan(agent, func() (any, error) {
		if cur := f.load(agent); cur != nil && cur != seen {
			now := f.cfg.Now()
			if now.Before(cur.freshUntil) || (cur.err != nil && now.Before(cur.errUntil)) {
				return cur, nil
			}
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.Timeout)
		defer cancel()
		return f.fetchAndStore(fctx, agent)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*entry), nil
	case <-ctx.Done():
		u, _ := f.DirectoryURL(agent)
		return nil, &FetchError{URL: u, Err: fmt.Errorf("gave up waiting: %w", ctx.Err())}
	}
}

func (f *Fetcher) fetchAndStore(ctx context.Context, agent string) (*entry, error) {
	u, err := f.DirectoryURL(agent)
	if err != nil {
		return nil, err
	}
	etag := ""
	if prev := f.load(agent); prev != nil && prev.keys != nil && prev.notFound == 0 {
		etag = prev.etag
	}
	res, ferr := f.fetch(ctx, u, etag)
	now := f.cfg.Now()
	c := &f.cfg

	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.load(agent)
	ne := &entry{url: u}
	if cur != nil {
		ne.forcedAt = cur.forcedAt
	}
	keep := func() { // carry the last good set over
		if cur != nil {
			ne.keys, ne.list, ne.etag, ne.notFound = cur.keys, cur.list, cur.etag, cur.notFound
			ne.freshUntil, ne.staleUntil = cur.freshUntil, cur.staleUntil
		}
	}
	setTTL := func(ttl time.Duration) {
		ne.freshUntil = now.Add(ttl)
		ne.staleUntil = ne.freshUntil
		if c.MaxStale > 0 {
			ne.staleUntil = ne.freshUntil.Add(c.MaxStale)
		}
	}
	switch {
	case ferr == nil && res.notModified && cur != nil && cur.keys != nil:
		keep()
		if res.etag != "" {
			ne.etag = res.etag
		}
		setTTL(res.ttl)
		c.Logger.Debug("keyfetch: directory not modified", "url", u, "ttl", res.ttl)
	case ferr == nil && res.notModified:
		ferr = &FetchError{URL: u, StatusCode: res.status, Err: fmt.Errorf("status 304 without a cached copy")}
	case ferr == nil && res.notFound:
		ne.keys, ne.notFound = map[string]signer.PublicKey{}, res.status
		ne.freshUntil = now.Add(max(c.NegativeTTL, 0))
		ne.staleUntil = ne.freshUntil
		c.Logger.Debug("keyfetch: directory not found", "url", u, "status", res.status)
	case ferr == nil:
		ne.keys = make(map[string]signer.PublicKey, len(res.keys))
		for _, k := range res.keys {
			ne.keys[k.JWK.Kid] = k
		}
		ne.list, ne.etag = res.keys, res.etag
		setTTL(res.ttl)
		for _, p := range res.problems {
			c.Logger.Warn("keyfetch: "+p, "url", u)
		}
		c.Logger.Debug("keyfetch: directory fetched", "url", u, "keys", len(res.keys), "ttl", res.ttl)
	}
	if ferr != nil {
		keep()
		ne.err = ferr
		ne.errUntil = now.Add(max(c.NegativeTTL, 0))
		c.Logger.Warn("keyfetch: directory fetch failed", "url", u, "err", ferr)
	}
	f.storeLocked(agent, ne, cur == nil, now)
	return ne, nil
}

// storeLocked stores e, evicting entries when the cache is over MaxOrigins.
// f.mu must be held.
func (f *Fetcher) storeLocked(agent string, e *entry, isNew bool, now time.Time) {
	f.entries.Store(agent, e)
	if !isNew {
		return
	}
	if f.count.Add(1) <= int64(f.cfg.MaxOrigins) {
		return
	}
	// Over the cap: drop dead entries first, then arbitrary others.
	for pass := 0; pass < 2 && f.count.Load() > int64(f.cfg.MaxOrigins); pass++ {
		f.entries.Range(func(k, v any) bool {
			if k == agent {
				return true
			}
			old := v.(*entry)
			if pass == 1 || (!now.Before(old.staleUntil) && !now.Before(old.errUntil)) {
				f.entries.Delete(k)
				f.count.Add(-1)
			}
			return f.count.Load() > int64(f.cfg.MaxOrigins)
		})
	}
}
