package refserver

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/lru"
	"golang.org/x/sync/singleflight"
	"gorm.io/gorm"
)

// Key cache bounds of the database key source.
const (
	// DefaultKeyCacheTTL is how long a key looked up in the database is
	// reused when Config.KeyCacheTTL is 0.
	DefaultKeyCacheTTL = 250 * time.Millisecond
	// MaxKeyCacheTTL is the longest KeyCacheTTL accepted: with the lookup
	// itself it keeps a key revoked through another instance refused
	// everywhere within 1 s.
	MaxKeyCacheTTL = 500 * time.Millisecond
)

// Bounds of the server's short-lived caches; past one, the least recently
// used entry makes room.
const (
	// maxCacheEntries bounds the key cache (by kid) and the rendered
	// directories (by uid).
	maxCacheEntries = 100_000
	// maxUnknownKeys bounds the negative cache of kids no agent holds.
	maxUnknownKeys = 10_000
)

// DBKeySource is a middleware.KeySource over the server's database: it
// resolves the keys of this server's own agents with one indexed query and
// no HTTP call.
//
// Found keys (active or revoked) are cached by kid for a short TTL
// (Config.KeyCacheTTL, at most 500 ms, measured with the server's clock), so
// a burst of requests by one agent costs one query per TTL; concurrent
// lookups of one uncached kid share one query. A cached key used after half
// its TTL is read again in the background while the cached copy keeps
// answering (never past its TTL), so the requests of a busy agent do not
// all wait for the database each time its entry expires; that costs at
// most two queries per kid per TTL. A kid that no agent holds
// is remembered as unknown for the same TTL (at most 10,000 such kids, least
// recently used dropped first), so requests with made-up kids cost at most
// one query per kid per TTL; the lookup is by kid alone (a kid belongs to
// at most one agent), so one entry answers for every (uid, kid) pair with
// that kid. A registration or rotation through this Server forgets what
// this instance holds of the kids it adds or revokes (cached entries and
// lookups in flight) when it commits; one through another instance is
// seen here once the entries expire, so a revoked key is refused by every
// instance within the TTL plus one query, and a newly registered key is
// known everywhere as quickly.
// It is safe for concurrent use.
type DBKeySource struct {
	db      *gorm.DB
	service signer.ServiceURL
	timeout time.Duration

	originPrefix string // "<scheme>://"

	cache        *lru.Cache[string, keyEntry] // kid → row verdict; nil: no cache
	unknown      *lru.Cache[string, struct{}] // kids with no row; nil when cache is nil
	now          func() time.Time
	refreshAfter time.Duration      // age of a cached entry that is read again in the background
	observe      func(hit bool)     // nil: not counted
	group        singleflight.Group // by kid: lookups and refreshes of one kid share one query
}

// keyEntry is a cached lookup: the owner and key of a kid, and whether it
// was revoked.
type keyEntry struct {
	uid     string
	pk      signer.PublicKey
	revoked bool

	cached     time.Time    // when the entry was cached
	refreshing *atomic.Bool // set by the lookup that starts its refresh
}

// NewDBKeySource returns an uncached key source for the agents of the
// service at hostname (as Config.Hostname).
func NewDBKeySource(db *gorm.DB, hostname string) (*DBKeySource, error) {
	service, err := ParseHostname(hostname)
	if err != nil {
		return nil, err
	}
	return newDBKeySource(db, service, DefaultDBTimeout, 0, time.Now, nil), nil
}

func newDBKeySource(db *gorm.DB, service signer.ServiceURL, timeout, ttl time.Duration, now func() time.Time, observe func(bool)) *DBKeySource {
	k := &DBKeySource{db: db, service: service, timeout: timeout, observe: observe,
		originPrefix: service.Scheme + "://", now: now, refreshAfter: ttl / 2}
	if ttl > 0 {
		k.cache = lru.New[string, keyEntry](maxCacheEntries, ttl, now)
		k.unknown = lru.New[string, struct{}](maxUnknownKeys, ttl, now)
	}
	return k
}

// Key implements middleware.KeySource. The key set must be one of this
// service's agents in one of the two forms the service publishes: the
// agent origin <scheme>://<uid>.<service host> or its well-known directory
// URL (signer has already normalised case, default port, percent-encoding
// and dot segments, so every spelling of those two is one of them). A key
// set on an agent host in any other form — a query string, another path,
// another scheme, ;type=jwks_uri or ;type=cimd — is refused with 401
// invalid_signature_agent; a key set elsewhere with an error wrapping
// signer.ErrUntrustedAgent; both with no database access. keyID must be an
// active key of that uid (else signer.ErrUnknownKey, or
// signer.ErrRevokedKey for a revoked one). A database failure is a
// *middleware.Error with 503 database_unavailable.
func (k *DBKeySource) Key(ctx context.Context, set signer.KeySet, keyID string) (signer.PublicKey, error) {
	uid, err := k.agentOf(set)
	if err != nil {
		return signer.PublicKey{}, err
	}
	if keyID == "" || len(keyID) > 64 {
		return signer.PublicKey{}, signer.ErrUnknownKey
	}
	e, found, err := k.lookup(ctx, keyID)
	if err != nil {
		return signer.PublicKey{}, err
	}
	if !found || e.uid != uid {
		return signer.PublicKey{}, signer.ErrUnknownKey
	}
	if e.revoked {
		return signer.PublicKey{}, signer.ErrRevokedKey
	}
	return e.pk, nil
}

// KeyCached implements middleware.KeyCache: it reports whether Key would
// answer without a database query (a refused key set or keyid, or a kid
// whose verdict is cached).
func (k *DBKeySource) KeyCached(set signer.KeySet, keyID string) bool {
	if _, err := k.agentOf(set); err != nil || keyID == "" || len(keyID) > 64 {
		return true
	}
	if k.cache == nil {
		return false
	}
	if _, ok := k.cache.Get(keyID); ok {
		return true
	}
	_, ok := k.unknown.Get(keyID)
	return ok
}

// agentOf returns the uid of the agent whose key set set is, or why set
// is refused.
func (k *DBKeySource) agentOf(set signer.KeySet) (string, error) {
	if set.IsZero() {
		return "", fmt.Errorf("%w: a Signature-Agent naming %s://<uid>.%s is required", signer.ErrUntrustedAgent, k.service.Scheme, k.service.Host)
	}
	origin := set.Origin()
	_, host, _ := strings.Cut(origin, "://")
	uid := k.service.UIDOfHost(host)
	if uid == "" {
		return "", fmt.Errorf("%w: %s is not an agent of %s", signer.ErrUntrustedAgent, set.Identity(), k.service)
	}
	if set.Kind != signer.KindDirectory || set.Identity() != origin || !strings.HasPrefix(origin, k.originPrefix) {
		return "", &middleware.Error{Code: middleware.CodeInvalidSignatureAgent,
			Message: fmt.Sprintf("%s names an agent of this service in a form it does not publish; use its origin %s (or its directory %s)",
				signer.Truncate(set.URL), k.service.AgentOrigin(uid), k.service.DirectoryURL(uid)),
			Err: signer.ErrInvalidSignatureAgent}
	}
	return uid, nil
}

// lookup returns kid's row verdict from the cache or the database.
func (k *DBKeySource) lookup(ctx context.Context, kid string) (keyEntry, bool, error) {
	if k.cache == nil {
		return k.query(ctx, kid)
	}
	e, found := k.cache.Get(kid)
	hit := found
	if !found {
		_, hit = k.unknown.Get(kid)
	}
	if k.observe != nil {
		k.observe(hit)
	}
	if hit {
		if found && k.now().Sub(e.cached) >= k.refreshAfter && e.refreshing.CompareAndSwap(false, true) {
			k.load(ctx, kid) // in the background: this caller keeps the cached entry
		}
		return e, found, nil
	}
	select {
	case res := <-k.load(ctx, kid):
		r, _ := res.Val.(lookupResult)
		return r.e, r.found, res.Err
	case <-ctx.Done():
		return keyEntry{}, false, dbUnavailable(fmt.Errorf("refserver: key lookup: %w", ctx.Err()))
	}
}

// load reads kid's row and caches the verdict; its result arrives on the
// channel. One query per kid runs at a time, on a context that outlives
// any one caller (each caller still gives up on its own ctx).
func (k *DBKeySource) load(ctx context.Context, kid string) <-chan singleflight.Result {
	// Read before the query: a registration or rotation committing
	// meanwhile bumps them, and the (possibly stale) answer is then not
	// cached.
	gen, unknownGen := k.cache.Generation(), k.unknown.Generation()
	return k.group.DoChan(kid, func() (any, error) {
		e, found, err := k.query(context.WithoutCancel(ctx), kid) // query applies k.timeout
		switch {
		case err != nil:
		case found:
			e.cached, e.refreshing = k.now(), new(atomic.Bool)
			k.cache.AddIfGeneration(kid, e, gen)
		default:
			k.unknown.AddIfGeneration(kid, struct{}{}, unknownGen)
		}
		return lookupResult{e, found}, err
	})
}

type lookupResult struct {
	e     keyEntry
	found bool
}

// query reads kid's row.
func (k *DBKeySource) query(ctx context.Context, kid string) (keyEntry, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	var row PublicJWK
	err := k.db.WithContext(ctx).Where("kid = ?", kid).Take(&row).Error
	if isNotFound(err) {
		return keyEntry{}, false, nil
	}
	if err != nil {
		return keyEntry{}, false, dbUnavailable(fmt.Errorf("refserver: key lookup: %w", err))
	}
	e := keyEntry{uid: row.AgentUID, revoked: row.RevokedAt != nil}
	if !e.revoked {
		if e.pk, err = row.PublicKey(); err != nil {
			return keyEntry{}, false, err
		}
	}
	return e, true, nil
}

// forget drops what this instance knows of kids, whose rows a registration
// or rotation has changed (or may have: a failed commit may have
// committed): their cached keys and unknown verdicts, and any lookup of
// them in flight, whose answer, read before the change, then reaches
// neither the cache nor the lookups that begin after forget returns.
func (k *DBKeySource) forget(kids ...string) {
	for _, kid := range kids {
		if k.cache != nil {
			k.cache.Remove(kid) // bumps the generation a lookup in flight caches under
			k.unknown.Remove(kid)
		}
		k.group.Forget(kid)
	}
}

var (
	_ middleware.KeySource = (*DBKeySource)(nil)
	_ middleware.KeyCache  = (*DBKeySource)(nil)
)
