// Package keyfetch fetches, validates and caches signature agents' key sets
// without letting a request steer the server into its own network
// (SSRF-safe).
//
//	keys := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"*.agentid.example"}})
//	set, _ := signer.ParseKeySetURL("https://agent-x.agentid.example")
//	pk, err := keys.Key(ctx, set, keyid)
//	// errors.Is(err, signer.ErrUntrustedAgent): host not trusted, nothing was sent
//	// errors.Is(err, signer.ErrUnknownKey): the key set does not hold keyid
//	// errors.As(err, new(*keyfetch.FetchError)): the key set could not be fetched
//
// A *Fetcher satisfies middleware.KeySource.
//
// # Key sets
//
// A key set (signer.KeySet, resolved from a Signature-Agent member) is a URL
// and a kind. Its URL is fetched exactly as given: path and query kept,
// nothing appended, no redirect followed (a 3xx answer is a fetch failure;
// some published directories answer with a redirect to their www. host,
// and those are not followed). The kinds:
//
//   - signer.KindDirectory (an origin's well-known
//     /.well-known/http-message-signatures-directory, or a direct key-set
//     URL) and signer.KindJWKS (;type=jwks_uri): a JSON object
//     {"keys":[JWK…]} served as signer.DirectoryMediaType, JWKSetMediaType
//     or JSONMediaType. A document that is itself one JWK is a one-key set,
//     as some published directories are.
//   - signer.KindCard (;type=cimd): a Signature Agent Card
//     (draft-meunier-webbotauth-registry), a JSON object whose "jwks"
//     member holds {"keys":[…]} or whose "jwks_uri" member names a JWKS URL,
//     which is fetched too under the same trust policy and limits (one
//     hop: a JWKS names no further URL).
//
// Keys are parsed by signer.ParseKeySetJWK (Ed25519, RSA of at least 2048
// bits, P-256; a kid is kept as published; a key marked for another
// algorithm is refused). An unusable key is skipped, and so is a key whose
// kid an earlier key of the set already has; the rest of the set is used. A
// document with more than MaxKeys keys or larger than MaxBodyBytes is a
// fetch failure.
//
// At an origin's well-known directory (set.WellKnown) a keyid finds the key
// whose RFC 7638 thumbprint it is, and nothing else: a published kid that
// is not the thumbprint is ignored there (web-bot-auth protocol-01). At any
// other key-set URL a keyid finds the key with that kid, else the key with
// that thumbprint.
//
// # Signed directories
//
// A key-set response may carry its own RFC 9421 response signature, tagged
// DirectorySignatureTag (web-bot-auth protocol-01). When it does, the
// signature is verified against the set the response delivered: it must
// cover `"@authority";req` (the authority this fetch asked for), its keyid
// must be the RFC 7638 thumbprint of a key of the set, its created and
// expires must hold the current time (Skew allowed), and it must verify.
// A response whose directory signature fails is not used: the fetch fails
// (ErrDirectorySignature) and the last good set keeps serving. Signatures
// with other tags are ignored. A signature over the authority alone shows
// that the holder of a key of the set vouches for the host serving it, not
// for the body; one that also covers content-digest, with a Content-Digest
// matching the body (checked), authenticates the keys themselves
// (Report.Authenticated). RequireSignedDirectories requires such a
// signature (ErrUnsignedDirectory otherwise); without it, unsigned and
// authority-only responses are accepted.
//
// Under RequireSignedDirectories an unsigned answer can take keys away,
// never add one. One that delivers no key (an empty set: the agent's only
// key revoked, or the agent disabled) is taken as it is: it grants
// nothing, and whoever serves the directory can already take the keys
// away by failing until MaxStale has passed, so taking it only makes a
// withdrawal prompt. One that lists keys is refused (the last good set
// keeps serving), but the keys of the last good set it no longer lists,
// with the same kid, stop verifying at once. A set is used no longer than
// the signatures that vouched for it: not past their earliest expires
// (plus Skew), whatever its max-age, the stale window or a 304 that would
// renew it.
//
// # Trust
//
// Every URL is checked against the trust policy before any network I/O:
// its host must match TrustedHosts, its scheme must be https (or http with
// AllowHTTP), and, unless AllowPrivateNetworks is set, the addresses it
// resolves to must be public (checked when dialing, so DNS rebinding cannot
// bypass it). This holds for a card's jwks_uri as for the key-set URL
// itself. Untrusted key sets are never fetched and never cached. A
// TrustedHosts entry without a port means the scheme's default port;
// "host:*" means any port. Refusals name their cause in their text and as a
// Reason (ReasonOf): the host and the patterns, AllowHTTP,
// AllowPrivateNetworks, or the fetch's status or network error.
//
// # Registries
//
// Config.Registries names registry lists (draft-meunier-webbotauth-registry):
// plain text, one Signature Agent Card URL a line, "#" comment lines and
// blank lines ignored. RefreshRegistries (or WatchRegistries, every
// RegistryRefresh) fetches each list under the trust policy (its own host
// must be trusted; https unless AllowHTTP; private addresses refused at
// dial time unless allowed; 200 or 304 only, no redirects;
// MaxRegistryBytes; more than MaxRegistryEntries URLs, binary or non-UTF-8
// text refuse the list, at a cost linear in its size), revalidating with
// If-None-Match and If-Modified-Since, then each card it lists (the same
// rules, MaxBodyBytes). Each listed card's origin (scheme, host, port) and
// the jwks_uri it names (that URL exactly) are trusted beside
// TrustedHosts. A list that cannot be fetched or read keeps its last good
// version; a card dropped from every list is untrusted at once, and the key
// sets cached under URLs no longer trusted are dropped. CardInfo gives a
// key set's card (name, purpose, contacts…); Registries reports each
// list's state.
//
// # Fetch bounds
//
// Concurrent lookups of a key set share one fetch, which runs at most
// Timeout and is cancelled as soon as every caller waiting for it has gone
// (a client hanging up ends its fetch); an abandoned fetch is not
// remembered. A lookup waits at most Timeout. At most MaxFetchesPerHost
// fetches run to one host at a time; a lookup that would start another
// fails at once (ErrHostBusy).
//
// # Local development
//
// With AllowPrivateNetworks, the client New builds resolves "localhost" and
// every name under ".localhost" to loopback itself (RFC 6761): 127.0.0.1,
// then ::1, never asking the system resolver, which often does not know
// *.localhost. So an agent registered on a reference server at
// http://localhost:3000, signing with Signature-Agent
// "http://agent-….localhost:3000", verifies with LocalDevelopment():
//
//	keyfetch.Config{TrustedHosts: []string{"*.localhost:*"}, AllowHTTP: true, AllowPrivateNetworks: true}
//
// Without AllowPrivateNetworks those names are refused before any
// connection (ErrPrivateAddress).
//
// # Cache behaviour
//
// Each key set is cached under its URL and kind for the Cache-Control
// max-age of its response, clamped to [MinTTL, MaxTTL] (DefaultTTL without
// max-age; MinTTL for no-store or no-cache); a card with a jwks_uri lives as
// long as the shorter of its two responses. An expired set is revalidated
// with If-None-Match when its response sent an ETag (a card and its
// jwks_uri each with their own); a 304 renews it. A successful refresh
// replaces the whole set, so a key removed upstream stops verifying after
// the next refresh. Concurrent lookups of a key set share one fetch. A
// keyid absent from a fresh set forces one refresh per key set per
// RefreshCooldown; other lookups meanwhile get signer.ErrUnknownKey at
// once. A failed fetch is remembered for NegativeTTL (both at most
// MaxNegativeTTL, 5 minutes, as protocol-01 asks). The stale window:
// while refreshes fail, the last good set keeps serving for up to MaxStale
// past its expiry; it is replaced by the next successful fetch and never
// evicted because a fetch failed (when more than MaxOrigins key sets are
// cached, entries with nothing left to serve go first). Only a 200 delivers
// keys, and a 200 with no key is how a directory withdraws them all at the
// next refresh. A 404 or 410 on the first fetch is an authoritative empty
// set (signer.ErrUnknownKey); after a set was served it is a failed
// refresh (what an outage or a misrouted request looks like), and the last
// good set keeps serving.
//
// Admission: a key set is cached on probation (MaxProbation) until it is
// admitted, when the verifier reports a verified signature by one of its
// keys (Verified) or its response carries a directory signature covering
// its body. Sets on probation evict only each other, so lookups naming new
// key sets cannot push out one whose signatures verified (MaxOrigins
// bounds the admitted ones). Nor can one verified agent naming its own set
// under many URLs: admitted sets are charged to their site (a host, or the
// one label under a wildcard TrustedHosts suffix, whatever the scheme,
// port, path, query or case), at most MaxSetsPerSite per site; a site's
// further sets stay on probation.
package keyfetch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/lru"
	"github.com/agentid/agentid/signer/redact"
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

// flight is one shared fetch of a key set. waiters counts the callers
// waiting for it; when the last one leaves, the fetch is cancelled.
type flight struct {
	done    chan struct{} // closed when e and err are set
	e       *entry
	err     error
	waiters int
	cancel  context.CancelCauseFunc
}

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
		lg := cfg.Logger
		if lg == nil {
			lg = slog.Default()
		}
		lg.Warn("keyfetch: TrustedHosts is empty, so every key set is refused (untrusted_signature_agent): " +
			`name your agents' hosts, e.g. TrustedHosts: []string{"*.agentid.example"}, or use keyfetch.LocalDevelopment() for a server on this machine`)
	}
	if s.HTTPClient == nil {
		f.client = newHTTPClient(s.AllowPrivateNetworks, s.Timeout)
	} else {
		c := *s.HTTPClient
		c.CheckRedirect = noRedirect
		f.client = &c
	}
	return f
}

// TrustURL reports whether the trust policy lets f fetch rawURL: nil, or an
// *UntrustedError (wrapping signer.ErrUntrustedAgent) that says why not:
// a malformed URL, the scheme, a host matching no TrustedHosts pattern
// (naming the host and the patterns) and not listed by a registry. It does
// no I/O; Key, Keys and Check apply it to every URL before fetching it.
func (f *Fetcher) TrustURL(rawURL string) error {
	t, err := f.checkURL(rawURL)
	if err != nil {
		return err
	}
	for _, p := range f.cfg.patterns {
		if p.match(t.host, t.port, t.defaultPort, t.isIP) {
			return nil
		}
	}
	if f.listedByRegistry(rawURL, t) {
		return nil
	}
	hp := strings.ToLower(t.u.Host)
	if t.u.Port() == "" {
		hp = net.JoinHostPort(t.host, t.port)
	}
	listed := ""
	if len(f.regs) > 0 {
		listed = fmt.Sprintf(", and none of the %d registries lists it", len(f.regs))
	}
	return &UntrustedError{URL: rawURL, Host: strings.ToLower(t.u.Host), Reason: ReasonUntrustedHost, Patterns: f.cfg.TrustedHosts,
		reason: fmt.Sprintf("host %s matches no TrustedHosts pattern %s (an entry without a port means the scheme's default port; \"host:*\" means any port)%s", signer.Truncate(hp), patternList(f.cfg.TrustedHosts), listed)}
}

// checkedURL is a URL that passed checkURL.
type checkedURL struct {
	u                 *url.URL
	scheme            string // "https" or "http"
	host              string // lowercase, no brackets
	port, defaultPort string // port is the effective port, never ""
	isIP              bool
}

// origin returns scheme://host:port with the port always present, the
// key under which a registry trusts a host.
func (t checkedURL) origin() string {
	return t.scheme + "://" + net.JoinHostPort(t.host, t.port)
}

// checkURL applies the trust policy's rules other than the host patterns:
// an absolute http(s) URL without user information, fragment or zone, a
// valid host, and https unless AllowHTTP. It does no I/O.
func (f *Fetcher) checkURL(rawURL string) (checkedURL, error) {
	untrusted := func(format string, args ...any) error {
		return &UntrustedError{URL: rawURL, Reason: ReasonInvalidURL, reason: fmt.Sprintf(format, args...)}
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Opaque != "" || u.User != nil || u.Fragment != "" || u.Host == "" {
		return checkedURL{}, untrusted("%q is not an absolute http(s) URL without user information or fragment", signer.Truncate(redact.URL(rawURL)))
	}
	t := checkedURL{u: u, scheme: "https", defaultPort: "443"}
	switch scheme := strings.ToLower(u.Scheme); {
	case scheme == "https":
	case scheme == "http" && f.cfg.AllowHTTP:
		t.scheme, t.defaultPort = "http", "80"
	case scheme == "http":
		return checkedURL{}, &UntrustedError{URL: rawURL, Host: u.Host, HTTP: true, Reason: ReasonHTTPRefused, reason: fmt.Sprintf("http scheme refused (AllowHTTP is off) for %q", signer.Truncate(redact.URL(rawURL)))}
	default:
		return checkedURL{}, untrusted("scheme %q refused", signer.Truncate(u.Scheme))
	}
	if strings.HasSuffix(u.Host, ":") {
		return checkedURL{}, untrusted("%q has an empty port", signer.Truncate(redact.URL(rawURL)))
	}
	t.host = strings.ToLower(u.Hostname())
	a, ipErr := netip.ParseAddr(t.host)
	t.isIP = ipErr == nil
	if t.isIP && a.Zone() != "" {
		return checkedURL{}, untrusted("%q: zoned addresses are refused", signer.Truncate(redact.URL(rawURL)))
	}
	if !t.isIP && !signer.ValidHostname(t.host) {
		return checkedURL{}, untrusted("%q has an invalid host name", signer.Truncate(redact.URL(rawURL)))
	}
	if t.isIP != strings.HasPrefix(u.Host, "[") && a.Is6() {
		return checkedURL{}, untrusted("%q: IPv6 must be bracketed", signer.Truncate(redact.URL(rawURL)))
	}
	t.port = cmp.Or(u.Port(), t.defaultPort)
	return t, nil
}

// patternList renders TrustedHosts for a message, at most 8 entries.
func patternList(ps []string) string {
	if len(ps) == 0 {
		return "(TrustedHosts is empty: no host is trusted)"
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, p := range ps {
		if i == 8 {
			fmt.Fprintf(&b, " …%d more", len(ps)-i)
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Quote(signer.Truncate(p)))
	}
	b.WriteByte(']')
	return b.String()
}

// UntrustedError reports a URL the trust policy refuses (nothing was
// fetched). It wraps signer.ErrUntrustedAgent.
type UntrustedError struct {
	// URL is the URL refused.
	URL string
	// Host is its host[:port] as a TrustedHosts entry names it ("" when the
	// URL is malformed).
	Host string
	// Reason says why: ReasonInvalidURL, ReasonHTTPRefused or
	// ReasonUntrustedHost.
	Reason Reason
	// Patterns are the TrustedHosts entries none of which matched (with
	// ReasonUntrustedHost).
	Patterns []string
	// HTTP reports a plain-http URL refused because AllowHTTP is off.
	HTTP bool
	// CardJWKS reports that the URL is the jwks_uri a Signature Agent Card
	// names, not the key set the signature agent names.
	CardJWKS bool
	reason   string
}

func (e *UntrustedError) Error() string {
	return "keyfetch: " + signer.ErrUntrustedAgent.Error() + ": " + e.reason
}

// Unwrap makes errors.Is(err, signer.ErrUntrustedAgent) true.
func (e *UntrustedError) Unwrap() error { return signer.ErrUntrustedAgent }

// trustSet checks set before anything is cached or fetched for it.
func (f *Fetcher) trustSet(set signer.KeySet) error {
	switch {
	case set.IsZero():
		return fmt.Errorf("keyfetch: %w: no key set (the request has no Signature-Agent)", signer.ErrUntrustedAgent)
	case set.Kind > signer.KindCard:
		return fmt.Errorf("keyfetch: %w: unknown key-set kind %d", signer.ErrUntrustedAgent, set.Kind)
	}
	return f.TrustURL(set.URL)
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
		// The Ed25519 backend's precomputed table (about 1.5 KB) is not
		// kept per cached key: signer keeps those of the keys verifying
		// most often (SetExpandedKeyCacheSize).
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

// refresh fetches set once for all concurrent callers and stores the
// outcome. seen is the entry the caller found (nil if none): if another
// flight stored a usable entry since, that one is returned without fetching
// again. The fetch runs detached from ctx with its own timeout, and is
// cancelled when every caller waiting for it has given up on its ctx; an
// abandoned fetch stores nothing.
func (f *Fetcher) refresh(ctx context.Context, set signer.KeySet, seen *entry) (*entry, error) {
	key := set.Kind.String() + " " + set.URL
	f.fmu.Lock()
	fl := f.flights[key]
	if fl == nil {
		fctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		fl = &flight{done: make(chan struct{}), cancel: cancel}
		f.flights[key] = fl
		go f.fly(fctx, key, fl, set, seen)
	}
	fl.waiters++
	f.fmu.Unlock()
	select {
	case <-fl.done:
		return fl.e, fl.err
	case <-ctx.Done():
		f.fmu.Lock()
		if fl.waiters--; fl.waiters == 0 {
			fl.cancel(errAbandoned)
			if f.flights[key] == fl { // later callers start a fresh fetch
				delete(f.flights, key)
			}
		}
		f.fmu.Unlock()
		return nil, &FetchError{URL: set.URL, Err: fmt.Errorf("gave up waiting: %w", ctx.Err())}
	}
}

// fly runs the shared fetch fl.
func (f *Fetcher) fly(ctx context.Context, key string, fl *flight, set signer.KeySet, seen *entry) {
	defer fl.cancel(nil)
	e, err := func() (*entry, error) {
		if cur := f.load(keyOf(set)); cur != nil && cur != seen {
			now := f.cfg.Now()
			if now.Before(cur.freshUntil) || (cur.err != nil && now.Before(cur.errUntil)) {
				return cur, nil
			}
		}
		tctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
		defer cancel()
		return f.fetchAndStore(tctx, set)
	}()
	f.fmu.Lock()
	if f.flights[key] == fl {
		delete(f.flights, key)
	}
	f.fmu.Unlock()
	fl.e, fl.err = e, err
	close(fl.done)
}

// acquireHost takes one of MaxFetchesPerHost slots of host, reporting
// false when none is free.
func (f *Fetcher) acquireHost(host string) bool {
	if f.cfg.MaxFetchesPerHost < 0 {
		return true
	}
	f.fmu.Lock()
	defer f.fmu.Unlock()
	if f.busy[host] >= f.cfg.MaxFetchesPerHost {
		return false
	}
	f.busy[host]++
	return true
}

func (f *Fetcher) releaseHost(host string) {
	if f.cfg.MaxFetchesPerHost < 0 {
		return
	}
	f.fmu.Lock()
	defer f.fmu.Unlock()
	if f.busy[host]--; f.busy[host] <= 0 {
		delete(f.busy, host)
	}
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
