package keyfetch

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/redact"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultTimeout         = 5 * time.Second
	DefaultMaxBodyBytes    = 64 << 10
	DefaultMaxKeys         = 64
	DefaultMinTTL          = 30 * time.Second
	DefaultMaxTTL          = time.Hour
	DefaultDefaultTTL      = 5 * time.Minute
	DefaultRefreshCooldown = 30 * time.Second
	DefaultNegativeTTL     = 10 * time.Second
	DefaultMaxStale        = time.Hour
	DefaultMaxOrigins      = 10000
	DefaultMaxSetsPerSite  = 16
	DefaultSkew            = 60 * time.Second
	DefaultUserAgent       = "agentid-keyfetch/1"
)

// Defaults of the registry settings.
const (
	DefaultRegistryRefresh    = 15 * time.Minute
	DefaultMaxRegistryEntries = 1000
	DefaultMaxRegistryBytes   = 1 << 20
)

// DefaultMaxFetchesPerHost is the default of Config.MaxFetchesPerHost.
const DefaultMaxFetchesPerHost = 4

// MaxNegativeTTL is the longest a failure or an unknown keyid is
// remembered (web-bot-auth protocol-01): Config.NegativeTTL and
// Config.RefreshCooldown above it are lowered to it.
const MaxNegativeTTL = 5 * time.Minute

// Config configures a Fetcher. The zero value of every field is the strict,
// safe default; the zero Config itself is valid but trusts no host, so every
// lookup is refused with signer.ErrUntrustedAgent.
type Config struct {
	// TrustedHosts lists the hosts whose key sets may be fetched (the
	// key-set URL's host, and a card's jwks_uri host). An entry is an exact host ("agents.example.com",
	// "127.0.0.1", "[::1]") or a wildcard "*.suffix" that matches any host
	// ending in ".suffix" on a label boundary: "*.example.com" matches
	// "a.example.com" and "a.b.example.com" but not "example.com" nor
	// "evilexample.com". A wildcard never matches an IP address. Matching
	// is case-insensitive. An entry without a port matches only the URL
	// scheme's default port (443 for https, 80 for http); "host:port"
	// matches only that port (a URL naming no port is on its scheme's
	// default port); "host:*" matches any port. The check happens before
	// any network I/O. If empty, no host is trusted, every lookup is
	// refused, and New logs a warning.
	TrustedHosts []string

	// AllowHTTP permits http:// key-set URLs. If false, only https:// URLs
	// are fetched; others are refused as untrusted without I/O.
	// Turn it on only for tests and local development.
	AllowHTTP bool

	// AllowPrivateNetworks permits connections to loopback, private
	// (RFC 1918), shared (100.64.0.0/10), link-local, unique-local
	// (fc00::/7), unspecified, multicast and other non-public addresses,
	// including their IPv4-mapped IPv6 forms. If false, such addresses are
	// refused when the connection is dialed (net.Dialer.Control), after DNS
	// resolution, so DNS rebinding cannot bypass the check. Only applies to
	// the client New builds; see HTTPClient.
	//
	// For local development, with AllowPrivateNetworks that client also
	// resolves "localhost" and every name under ".localhost" to loopback
	// itself (RFC 6761), 127.0.0.1 and then ::1, without asking the system
	// resolver (which may not know *.localhost): an agent registered on a
	// reference server at http://localhost:3000 signs with
	// Signature-Agent "http://<uid>.localhost:3000", and TrustedHosts
	// "*.localhost" with AllowHTTP lets it verify. Without
	// AllowPrivateNetworks such names are refused before any connection.
	AllowPrivateNetworks bool

	// HTTPClient performs the fetches. If nil, New builds a client whose
	// dialer enforces AllowPrivateNetworks and which ignores proxy
	// environment variables. If set, its transport is used as is: the
	// caller is responsible for refusing private addresses. In both cases
	// redirects are never followed (a shallow copy of the client gets a
	// CheckRedirect returning http.ErrUseLastResponse) and a 3xx answer is
	// a fetch failure. The client's own Timeout is left alone; Timeout
	// below bounds each fetch.
	HTTPClient *http.Client

	// Timeout bounds one key-set fetch from dial to the last body byte (a
	// card and its jwks_uri together), and each Key, Keys or CheckKeySet
	// call: a caller waits at most Timeout for its answer, however many
	// callers share the fetch. A shared fetch is cancelled as soon as every
	// caller waiting for it has gone (its context done), and nothing is
	// remembered of it. If 0, 5 seconds.
	Timeout time.Duration

	// MaxFetchesPerHost caps the fetches in flight to one host (host:port
	// of the URL fetched). A lookup that would start one more fails at once
	// with a *FetchError wrapping ErrHostBusy (ReasonHostBusy), which is
	// not remembered, so one slow trusted host cannot hold more than this
	// many requests at a time. If 0, 4; negative: no limit.
	MaxFetchesPerHost int

	// MaxBodyBytes caps each document's body; a larger body is a fetch
	// failure. If 0, 64 KiB.
	MaxBodyBytes int64

	// MaxKeys caps the number of entries in a key set's "keys" array; a
	// set with more entries is a fetch failure (it is not truncated, so the
	// accepted set never depends on key order). If 0, 64.
	MaxKeys int

	// MinTTL and MaxTTL clamp the lifetime taken from Cache-Control
	// max-age. If 0, 30 seconds and 1 hour. MinTTL must not exceed MaxTTL.
	MinTTL, MaxTTL time.Duration

	// DefaultTTL is the lifetime used when a response sends no usable
	// max-age. If 0, 5 minutes clamped to [MinTTL, MaxTTL].
	DefaultTTL time.Duration

	// RefreshCooldown limits refreshes forced by an unknown keyid on a
	// fresh cache entry to one per key set per cooldown. If 0, 30 seconds;
	// negative: an unknown keyid never forces a refresh. Above
	// MaxNegativeTTL (5 minutes) it is lowered to 5 minutes.
	RefreshCooldown time.Duration

	// NegativeTTL is how long a fetch failure is remembered (no new fetch
	// of that key set meanwhile), and how long a 404 or 410 key set counts
	// as empty. If 0, 10 seconds; negative: failures are not cached. Above
	// MaxNegativeTTL (5 minutes) it is lowered to 5 minutes.
	NegativeTTL time.Duration

	// MaxStale is the stale window: how long past its expiry the last good
	// key set keeps serving while refreshes fail. A failed refresh never
	// drops the set; the next successful one replaces it. If 0, 1 hour;
	// negative: never serve stale keys.
	MaxStale time.Duration

	// MaxOrigins caps the number of admitted key sets held in the cache:
	// those a verifier reported a verified signature for (Fetcher.Verified)
	// or whose response carried a directory signature covering its body.
	// Beyond it entries with nothing left to serve (past their stale
	// window, no failure to remember), then the least recently used, are
	// evicted. If 0, 10000.
	MaxOrigins int

	// MaxProbation caps the key sets held on probation: fetched, but not
	// yet admitted. They are evicted among themselves (least recently used
	// first) and never evict an admitted set, so lookups naming new key
	// sets, however many, cannot push out a set that verified. If 0,
	// MaxOrigins.
	MaxProbation int

	// MaxSetsPerSite caps the admitted key sets charged to one site, so
	// that one agent cannot push the others' sets out of the MaxOrigins
	// admitted ones by naming its own sets under many URLs (respelled
	// queries, paths, ports, the case of its host, names it mints under a
	// domain it holds). A site is a host (lowercase; an IP address in its
	// canonical form), or, for a host trusted through a wildcard entry
	// "*.suffix", the one label under the suffix: "x.suffix" for
	// "a.b.x.suffix". A set verified while its site holds MaxSetsPerSite
	// admitted sets stays on probation (it still serves, and is evicted
	// only by other sets on probation); its admission is tried again after
	// its next refresh. If 0, 16; negative: no cap.
	MaxSetsPerSite int

	// RequireSignedDirectories refuses a key-set response that carries no
	// verified signature tagged DirectorySignatureTag covering both
	// `"@authority";req` and `content-digest` (with a Content-Digest that
	// matches the body): a fetch failure, and the last good set keeps
	// serving, without the keys the refused response no longer lists. A
	// response that delivers no key needs no signature (it grants
	// nothing): the cached keys are dropped. A set is used no longer than
	// its signatures (their earliest expires, plus Skew). A signature over
	// the authority alone vouches for the host, not for the keys, so it
	// does not count. If false, unsigned responses are accepted. Either way
	// a response whose directory signature is present but does not verify
	// is refused.
	RequireSignedDirectories bool

	// Skew is the clock skew allowed when checking the created and expires
	// parameters of a directory signature. If 0, 60 seconds; negative:
	// none.
	Skew time.Duration

	// Now is the clock for cache lifetimes and directory signatures. If
	// nil, time.Now is used.
	Now func() time.Time

	// Logger receives debug lines about fetches, warnings about skipped
	// keys and New's warning that TrustedHosts is empty. If nil, nothing
	// is logged.
	Logger *slog.Logger

	// UserAgent is sent with each fetch. If "", "agentid-keyfetch/1".
	UserAgent string

	// Registries lists the URLs of registries
	// (draft-meunier-webbotauth-registry): plain-text lists of Signature
	// Agent Card URLs, one a line, a "#" at a line's start or after a
	// blank starting a comment, blank lines ignored. Each registry URL must itself pass the trust policy (a
	// TrustedHosts host, https unless AllowHTTP). Every card a registry
	// lists is trusted beside TrustedHosts: its URL's host (scheme, host
	// and port), and the jwks_uri the card names (that exact URL). The
	// card's description (name, purpose, contacts) is kept for
	// Fetcher.CardInfo, which attaches it only to key sets the card led to. Nothing is fetched until Fetcher.RefreshRegistries
	// or Fetcher.WatchRegistries runs; a failed refresh keeps the last good
	// list. If empty, only TrustedHosts is trusted.
	Registries []string

	// RegistryRefresh is how often WatchRegistries refreshes the
	// registries (conditional GETs: ETag, Last-Modified). If 0, 15 minutes.
	RegistryRefresh time.Duration

	// MaxRegistryEntries caps the card URLs of one registry list; a longer
	// list is refused (not truncated) and the last good one kept. If 0,
	// 1000.
	MaxRegistryEntries int

	// MaxRegistryBytes caps a registry list's body; a larger one is
	// refused and the last good one kept. If 0, 1 MiB. A card's body is
	// capped by MaxBodyBytes.
	MaxRegistryBytes int64
}

// LocalDevelopment returns the Config for developing against a reference
// server on this machine: it trusts every name under .localhost on any
// port ("*.localhost:*"), over plain http, at private (loopback) addresses,
// where keyfetch resolves those names to loopback itself (RFC 6761). An
// agent registered on http://localhost:3000 signs with Signature-Agent
// "http://<uid>.localhost:3000" and verifies with
//
//	keys := keyfetch.New(keyfetch.LocalDevelopment())
//
// Never use it in production: it opens plain http and private addresses.
func LocalDevelopment() Config {
	return Config{
		TrustedHosts:         []string{"*.localhost:*"},
		AllowHTTP:            true,
		AllowPrivateNetworks: true,
	}
}

// Validate reports whether c, once defaults are applied, is usable.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// settings is a validated Config with defaults applied and patterns compiled.
type settings struct {
	Config
	patterns []hostPattern
}

func (c Config) withDefaults() (settings, error) {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Timeout", c.Timeout}, {"MinTTL", c.MinTTL}, {"MaxTTL", c.MaxTTL}, {"DefaultTTL", c.DefaultTTL}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v is negative", d.name, d.v))
		}
	}
	if c.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxBodyBytes %d is negative", c.MaxBodyBytes))
	}
	if c.MaxKeys < 0 {
		errs = append(errs, fmt.Errorf("MaxKeys %d is negative", c.MaxKeys))
	}
	if c.MaxOrigins < 0 {
		errs = append(errs, fmt.Errorf("MaxOrigins %d is negative", c.MaxOrigins))
	}
	if c.RegistryRefresh < 0 || c.MaxRegistryEntries < 0 || c.MaxRegistryBytes < 0 {
		errs = append(errs, errors.New("RegistryRefresh, MaxRegistryEntries and MaxRegistryBytes must not be negative"))
	}
	if c.MaxProbation < 0 {
		errs = append(errs, fmt.Errorf("MaxProbation %d is negative", c.MaxProbation))
	}
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes)
	c.MaxKeys = cmp.Or(c.MaxKeys, DefaultMaxKeys)
	c.MinTTL = cmp.Or(c.MinTTL, DefaultMinTTL)
	c.MaxTTL = cmp.Or(c.MaxTTL, DefaultMaxTTL)
	if c.MinTTL > c.MaxTTL {
		errs = append(errs, fmt.Errorf("MinTTL %v exceeds MaxTTL %v", c.MinTTL, c.MaxTTL))
	}
	if c.DefaultTTL == 0 {
		c.DefaultTTL = min(max(DefaultDefaultTTL, c.MinTTL), c.MaxTTL)
	} else if c.DefaultTTL < c.MinTTL || c.DefaultTTL > c.MaxTTL {
		errs = append(errs, fmt.Errorf("DefaultTTL %v is outside [MinTTL %v, MaxTTL %v]", c.DefaultTTL, c.MinTTL, c.MaxTTL))
	}
	c.RefreshCooldown = cmp.Or(c.RefreshCooldown, DefaultRefreshCooldown)
	c.RefreshCooldown = min(c.RefreshCooldown, MaxNegativeTTL)
	c.NegativeTTL = min(cmp.Or(c.NegativeTTL, DefaultNegativeTTL), MaxNegativeTTL)
	c.MaxStale = cmp.Or(c.MaxStale, DefaultMaxStale)
	c.MaxOrigins = cmp.Or(c.MaxOrigins, DefaultMaxOrigins)
	c.MaxProbation = cmp.Or(c.MaxProbation, c.MaxOrigins)
	c.MaxSetsPerSite = cmp.Or(c.MaxSetsPerSite, DefaultMaxSetsPerSite)
	c.MaxFetchesPerHost = cmp.Or(c.MaxFetchesPerHost, DefaultMaxFetchesPerHost)
	c.Skew = cmp.Or(c.Skew, DefaultSkew)
	c.UserAgent = cmp.Or(c.UserAgent, DefaultUserAgent)
	c.RegistryRefresh = cmp.Or(c.RegistryRefresh, DefaultRegistryRefresh)
	c.MaxRegistryEntries = cmp.Or(c.MaxRegistryEntries, DefaultMaxRegistryEntries)
	c.MaxRegistryBytes = cmp.Or(c.MaxRegistryBytes, DefaultMaxRegistryBytes)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	s := settings{Config: c}
	for _, p := range c.TrustedHosts {
		hp, err := parsePattern(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.patterns = append(s.patterns, hp)
	}
	probe := &Fetcher{cfg: s}
	for _, r := range c.Registries {
		if err := probe.TrustURL(r); err != nil {
			errs = append(errs, fmt.Errorf("Registries entry %q: the registry itself must be trusted: %s", signer.Truncate(redact.URL(r)), strings.TrimPrefix(err.Error(), "keyfetch: ")))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return settings{}, fmt.Errorf("keyfetch: invalid config: %w", err)
	}
	return s, nil
}
