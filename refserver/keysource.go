package refserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/lru"
	"golang.org/x/sync/singleflight"

	"github.com/agentid/agentid/refserver/store"
)

// Key cache bounds of the database key source.
const (
	// DefaultKeyCacheTTL is how long a kid that no agent holds is
	// remembered as unknown, and a rendered directory reused, when
	// Config.KeyCacheTTL is 0.
	DefaultKeyCacheTTL = 250 * time.Millisecond
	// MaxKeyCacheTTL is the longest KeyCacheTTL accepted: a key registered
	// through another instance is known everywhere within it.
	MaxKeyCacheTTL = 500 * time.Millisecond
	// DefaultKeyCacheSize is how many keys the database key source caches
	// when Config.KeyCacheSize is 0.
	DefaultKeyCacheSize = 100_000
)

// Bounds of the server's short-lived caches; past one, the least recently
// used entry makes room.
const (
	// maxCacheEntries bounds the rendered directories (by uid).
	maxCacheEntries = 100_000
	// maxUnknownKeys bounds the negative cache of kids no agent holds.
	maxUnknownKeys = 10_000
)

// keySource is a middleware.KeySource over the server's database: it
// resolves the keys of this server's own agents with one indexed query and
// no HTTP call.
//
// Found keys (active, revoked, or of an agent disabled, pending review or
// rejected) are cached by kid
// until a change names them: each instance reads the database's change log
// (key_changes) with one query every 250 ms, whatever the number of
// agents, and drops the keys it names; a cached verdict is used only while
// the last complete read of the log began less than 750 ms ago, so a key
// revoked (or an agent disabled, approved or rejected) through any instance is refused by every
// instance within 1 s, even when the log cannot be read (lookups then read
// the database each time). The cache holds at most Config.KeyCacheSize
// keys (least recently used dropped first).
// Concurrent lookups of one uncached kid share one query. A kid that no
// agent holds is remembered as unknown for Config.KeyCacheTTL (at most
// 10,000 such kids), so requests with made-up kids cost at most one query
// per kid per TTL, and a key registered through another instance is known
// everywhere within the TTL; the lookup is by kid alone (a kid belongs to
// at most one agent), so one entry answers for every (uid, kid) pair with
// that kid. A registration or rotation through this Server forgets what
// this instance holds of the kids it adds or revokes (cached entries and
// lookups in flight) when it commits.
// It is safe for concurrent use.
type keySource struct {
	db      *store.DB
	service signer.ServiceURL
	timeout time.Duration

	originPrefix string // "<scheme>://"

	cache   *lru.Cache[string, keyEntry] // kid → row verdict; nil: no cache
	unknown *lru.Cache[string, struct{}] // kids with no row; nil when cache is nil
	changes *changeFeed                  // nil when cache is nil
	onAgent func(uid string)             // called for each agent the change log names
	observe func(hit bool)               // nil: not counted
	group   singleflight.Group           // by kid: lookups of one kid share one query
	// unproven holds the kids of the active keys whose possession was
	// never proven that lookups found (at most maxUnknownKeys, least
	// recently used dropped first), whether or not their verdict was
	// cached: a request they verify proves them (Server.proveKey). An
	// entry is only a hint: a key proven or moved meanwhile is left as
	// it is. sawUnproven is set at the first such lookup: until then a
	// verified request reads nothing more.
	unproven    *lru.Cache[string, struct{}]
	sawUnproven atomic.Bool
}

// keyEntry is a cached lookup: the owner and key of a kid, whether it
// was revoked or its agent disabled, and its agent's review (reviewNone,
// reviewPending, reviewRejected, with the operator's reason for a
// rejection).
type keyEntry struct {
	uid      string
	pk       signer.PublicKey
	reason   string
	revoked  bool
	disabled bool
	review   uint8
}

// keySourceConfig configures newKeySource.
type keySourceConfig struct {
	db         *store.DB
	service    signer.ServiceURL
	timeout    time.Duration
	unknownTTL time.Duration // 0: no cache at all
	size       int
	now        func() time.Time
	log        *slog.Logger
	observe    func(bool)
	manualSync bool
}

func newKeySource(c keySourceConfig) *keySource {
	k := &keySource{db: c.db, service: c.service, timeout: c.timeout, observe: c.observe,
		originPrefix: c.service.Scheme + "://", unproven: lru.New[string, struct{}](maxUnknownKeys, 0, nil)}
	if c.unknownTTL > 0 {
		if c.size <= 0 {
			c.size = DefaultKeyCacheSize
		}
		if c.log == nil {
			c.log = slog.New(slog.DiscardHandler)
		}
		k.cache = lru.New[string, keyEntry](c.size, 0, nil)
		k.unknown = lru.New[string, struct{}](maxUnknownKeys, c.unknownTTL, c.now)
		k.changes = newChangeFeed(c.db, c.log, k.applyChanges, k.purge)
		k.changes.manual = c.manualSync
	}
	return k
}

// applyChanges drops what this instance holds of the keys and agents rows
// name.
func (k *keySource) applyChanges(rows []store.KeyChange) {
	for _, r := range rows {
		if r.Kid != "" {
			k.forget(r.Kid)
		}
		if k.onAgent != nil {
			k.onAgent(r.AgentUID)
		}
	}
}

// purge drops every cached verdict.
func (k *keySource) purge() {
	k.cache.Purge() // bumps the generation lookups in flight cache under
	k.unknown.Purge()
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
// signer.ErrRevokedKey for a revoked one), and its agent must be let in
// and enabled (else 403 agent_rejected, agent_pending or forbidden, see
// refusedKey). A database failure is a *middleware.Error with 503
// database_unavailable.
func (k *keySource) Key(ctx context.Context, set signer.KeySet, keyID string) (signer.PublicKey, error) {
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
	if err := refusedKey(uid, &e); err != nil {
		return signer.PublicKey{}, err
	}
	if e.revoked {
		return signer.PublicKey{}, signer.ErrRevokedKey
	}
	return e.pk, nil
}

// KeyCached implements middleware.KeyCache: it reports whether Key would
// answer without a database query (a refused key set or keyid, or a kid
// whose verdict is cached).
func (k *keySource) KeyCached(set signer.KeySet, keyID string) bool {
	if _, err := k.agentOf(set); err != nil || keyID == "" || len(keyID) > 64 {
		return true
	}
	if k.cache == nil || !k.changes.fresh() {
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
func (k *keySource) agentOf(set signer.KeySet) (string, error) {
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
func (k *keySource) lookup(ctx context.Context, kid string) (keyEntry, bool, error) {
	if k.cache == nil {
		return k.query(ctx, kid)
	}
	fresh := k.changes.fresh()
	hit := false
	var e keyEntry
	found := false
	if fresh {
		if e, found = k.cache.Get(kid); !found {
			_, hit = k.unknown.Get(kid)
		}
		hit = hit || found
	}
	if k.observe != nil {
		k.observe(hit)
	}
	if hit {
		return e, found, nil
	}
	select {
	case res := <-k.load(ctx, kid, fresh):
		r, _ := res.Val.(lookupResult)
		return r.e, r.found, res.Err
	case <-ctx.Done():
		return keyEntry{}, false, dbUnavailable(fmt.Errorf("refserver: key lookup: %w", ctx.Err()))
	}
}

// load reads kid's row and, when cache is set, caches the verdict; its
// result arrives on the channel. One query per kid runs at a time, on a
// context that outlives any one caller (each caller still gives up on its
// own ctx).
func (k *keySource) load(ctx context.Context, kid string, cache bool) <-chan singleflight.Result {
	// Read before the query: a change applied meanwhile (a rotation
	// through this instance, a row of the change log, a purge) bumps them,
	// and the (possibly stale) answer is then not cached.
	gen, unknownGen := k.cache.Generation(), k.unknown.Generation()
	return k.group.DoChan(kid, func() (any, error) {
		e, found, err := k.query(context.WithoutCancel(ctx), kid) // query applies k.timeout
		switch {
		case err != nil || !cache:
		case found:
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

// query reads kid's row, with its agent's state, in one indexed query.
func (k *keySource) query(ctx context.Context, kid string) (keyEntry, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	row, err := k.db.LookupKey(ctx, kid)
	if errors.Is(err, store.ErrNoSuchKey) {
		return keyEntry{}, false, nil
	}
	if err != nil {
		return keyEntry{}, false, dbUnavailable(fmt.Errorf("refserver: key lookup: %w", err))
	}
	e := keyEntry{uid: row.AgentUID, revoked: row.RevokedAt != nil, disabled: row.DisabledAt != nil}
	switch row.Review {
	case "":
	case store.ReviewPending:
		e.review = reviewPending
	default: // rejected, or a state this version does not know: refused
		e.review, e.reason = reviewRejected, row.ReviewReason
	}
	if row.ProvenAt == nil && !e.revoked {
		k.unproven.Add(kid, struct{}{})
		k.sawUnproven.Store(true)
	}
	// The key is parsed when it may verify: the agent's requests, or a
	// rejected agent's /whoami (rejectedWhoami).
	if e.review == reviewRejected || !e.revoked && !e.disabled && e.review == reviewNone {
		if e.pk, err = storedKey(store.PublicJWK{Kid: row.Kid, JWK: row.JWK}); err != nil {
			return keyEntry{}, false, err
		}
	}
	return e, true, nil
}

// storedKey parses a stored JWK; it fails, with 500 internal_error, only
// on corrupt rows.
func storedKey(row store.PublicJWK) (signer.PublicKey, error) {
	pk, err := row.PublicKey()
	if err != nil {
		return signer.PublicKey{}, &middleware.Error{Code: middleware.CodeInternal, Message: "internal error", Err: err}
	}
	return pk, nil
}

// mayBeUnproven reports whether kid, which just verified a request, was
// an unproven key when a lookup of this instance last read it (see
// unproven); until a lookup has met one, it reads nothing.
func (k *keySource) mayBeUnproven(kid string) bool {
	if !k.sawUnproven.Load() {
		return false
	}
	_, ok := k.unproven.Get(kid)
	return ok
}

// forget drops what this instance knows of kids, whose rows a registration
// or rotation through it, or a row of the change log, says changed (or may
// have: a failed commit may have committed): their cached keys and unknown
// verdicts, and any lookup of them in flight, whose answer, read before the change, then reaches
// neither the cache nor the lookups that begin after forget returns.
func (k *keySource) forget(kids ...string) {
	for _, kid := range kids {
		if k.cache != nil {
			k.cache.Remove(kid) // bumps the generation a lookup in flight caches under
			k.unknown.Remove(kid)
		}
		k.unproven.Remove(kid)
		k.group.Forget(kid)
	}
}

// errAgentDisabled marks a key refused because an operator disabled its
// agent.
var errAgentDisabled = errors.New("refserver: agent disabled")

var (
	_ middleware.KeySource = (*keySource)(nil)
	_ middleware.KeyCache  = (*keySource)(nil)
)
