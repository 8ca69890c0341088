package refserver

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/metrics"
	"github.com/agentid/agentid/middleware/ratelimit"
	"github.com/agentid/agentid/middleware/status"
	"github.com/agentid/agentid/middleware/telemetry"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/lru"
	"golang.org/x/sync/singleflight"

	"github.com/agentid/agentid/refserver/store"
)

// Defaults of Config.
const (
	DefaultDBTimeout    = 5 * time.Second
	DefaultMaxBodyBytes = 64 << 10
)

// Config configures a Server. DB and Hostname are required.
type Config struct {
	// DB is the migrated database (store.Open, then store.DB.Migrate).
	// Required.
	DB *store.DB
	// Hostname is the service's public base URL with scheme, such as
	// "https://agentid.example" or "http://localhost:3000". Its host[:port]
	// (lowercase, default port dropped) is the service host; agents' key
	// directories are served on <uid>.<service host>. Required.
	Hostname string
	// Version is reported by the health route. If "", signer.Version.
	Version string
	// Logger receives one line per request (method, path, status, host,
	// duration, bytes) and the internal cause of 5xx answers. If nil,
	// nothing is logged.
	Logger *slog.Logger
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
	// Replay remembers signature nonces for every signed route. If nil, one
	// in-memory store (middleware.NewMemoryReplayStore) shared by all routes
	// is used; several server instances need a shared store.
	Replay middleware.ReplayStore
	// DBTimeout bounds the database work of one request. If 0, 5 s.
	DBTimeout time.Duration
	// MaxBodyBytes caps request bodies (413 payload_too_large above). If 0, 64 KiB.
	MaxBodyBytes int64
	// KeyCacheTTL is how long a kid that no agent holds is remembered as
	// unknown (so a key registered through another instance is known
	// everywhere within it) and how long a rendered key directory is
	// served again. If 0, DefaultKeyCacheTTL (250 ms); negative disables
	// every cache, the key cache included. At most MaxKeyCacheTTL
	// (500 ms). Keys found in the database are cached until a change names
	// them (see keySource): a key revoked or an agent disabled through
	// any instance is refused by every instance within 1 s. A rotation
	// through this instance drops its cached entries at once. The TTL is
	// measured with Now.
	KeyCacheTTL time.Duration
	// KeyCacheSize bounds the keys cached to verify this server's agents
	// (least recently used dropped first; BenchmarkKeyCacheEntryBytes
	// measures the memory one takes).
	// If 0, DefaultKeyCacheSize (100,000).
	KeyCacheSize int
	// Metrics, if set, counts requests by route, method and status,
	// verification outcomes, key-cache hits and misses and database
	// statement latency (it registers callbacks on DB), and exposes the
	// agents and keys by state, counted by DB when scraped, at most once
	// per metrics.MinInventoryEvery. The server
	// never serves them itself: serve Metrics.Handler() on an address of
	// its own, kept off the public one (Open does with
	// Options.MetricsListen). If nil, nothing is counted. GET /metrics on
	// the service host is 404 either way.
	Metrics *metrics.Registry
	// TracerProvider and MeterProvider give each request a server span and
	// the metric http.server.request.duration (package
	// middleware/telemetry), each verification its span and metric
	// (middleware.Config), and the request's log line its trace_id. If nil,
	// the global providers, which record nothing until the application
	// sets them.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Status, if set, is fed every verification outcome of the server's
	// verifiers and served at GET /status on the service host:
	// verdicts per minute, top agents (their identities and request
	// counts), refusal reasons, to anyone who reaches the service host. If
	// nil, /status is 404. Open sets it only with Options.StatusPage.
	Status *status.Page
	// RegisterLimit, if set, limits POST /agents per client address (429
	// rate_limited with Retry-After), checked before the body is read or
	// the signature verified. If nil, registration is not rate limited.
	RegisterLimit *ratelimit.Limiter
	// VestauthCompat also serves POST /register and POST /rotate on the
	// service host, in the request and response shapes of vestauth 0.21
	// clients (`vestauth agent init`, `vestauth agent rotate`), on the same
	// store, host check and replay store. Those clients sign only
	// @authority and prove no possession of a rotation's new key, so
	// /rotate binds less than PUT /agents/{uid}/keys: see
	// docs/migrating-from-vestauth.md. RegisterLimit applies to /register
	// too. If false (the default), both paths are 404.
	VestauthCompat bool
	// Registration is the registration mode: RegistrationOpen (the
	// default, also ""), RegistrationClosed, RegistrationToken or
	// RegistrationApproval (see there). It applies to POST /agents and, with VestauthCompat, to POST
	// /register.
	Registration string
	// AuditRetention is how long the audit trail is kept (by the
	// database's clock); an Instance prunes it hourly while it serves.
	// If 0, store.DefaultAuditRetention (a year); negative keeps it for
	// ever.
	AuditRetention time.Duration

	// manualKeySync (tests) leaves the change log unread until the test
	// reads it (keySource.SyncChanges).
	manualKeySync bool
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.DB == nil {
		return errors.New("refserver: Config.DB is required")
	}
	if _, err := ParseHostname(c.Hostname); err != nil {
		return err
	}
	if c.DBTimeout < 0 || c.MaxBodyBytes < 0 || c.KeyCacheSize < 0 {
		return errors.New("refserver: Config.DBTimeout, MaxBodyBytes and KeyCacheSize must not be negative")
	}
	if err := validRegistration(c.Registration); err != nil {
		return err
	}
	if c.KeyCacheTTL > MaxKeyCacheTTL {
		return fmt.Errorf("refserver: Config.KeyCacheTTL %v is above the %v maximum (revocations must reach every instance within 1 s)", c.KeyCacheTTL, MaxKeyCacheTTL)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Version == "" {
		c.Version = signer.Version
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Replay == nil {
		c.Replay = middleware.NewMemoryReplayStore()
	}
	if c.DBTimeout == 0 {
		c.DBTimeout = DefaultDBTimeout
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.KeyCacheTTL == 0 {
		c.KeyCacheTTL = DefaultKeyCacheTTL
	}
	if c.AuditRetention == 0 {
		c.AuditRetention = store.DefaultAuditRetention
	}
	return c
}

// ParseHostname parses a Config.Hostname value with
// signer.ParseServiceURL (whose errors it returns as they are), except that
// the scheme must be written: a bare name is more likely the machine's
// HOSTNAME than the service's URL.
func ParseHostname(hostname string) (signer.ServiceURL, error) {
	if !strings.Contains(hostname, "://") {
		return signer.ServiceURL{}, fmt.Errorf("refserver: hostname %q must include a scheme, as in http://localhost:3000", hostname)
	}
	return signer.ParseServiceURL(hostname)
}

// Server is the reference server. Build it with New; it is safe for
// concurrent use.
type Server struct {
	cfg         Config
	db          *store.DB
	log         *slog.Logger
	service     signer.ServiceURL
	agentSuffix string // "." + service host: agent hosts end with it
	keys        *keySource

	verify verifiers
	parses atomic.Int64 // calls of parse: one per request that goes through it (tests read it)

	dirs     *lru.Cache[string, dirEntry] // uid → rendered directory; nil: no cache
	dirGroup singleflight.Group

	handler     http.Handler
	whoamiRoute http.Handler // the router's handler of /whoami (routes sets it)
	tel         *telemetry.Server
}

// New validates cfg and builds the server and its routes.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, db: cfg.DB, log: cfg.Logger,
		tel: telemetry.New(telemetry.Config{TracerProvider: cfg.TracerProvider, MeterProvider: cfg.MeterProvider})}
	s.service, _ = ParseHostname(cfg.Hostname)
	s.agentSuffix = "." + s.service.Host
	var observeKey func(bool)
	if cfg.Metrics != nil {
		if err := cfg.DB.ObserveStatements(cfg.Metrics.ObserveDBQuery); err != nil {
			return nil, err
		}
		observeKey = cfg.Metrics.ObserveKeyCache
		cfg.Metrics.CountInventory(s.countInventory, metrics.MinInventoryEvery)
	}
	s.keys = newKeySource(keySourceConfig{db: cfg.DB, service: s.service, timeout: cfg.DBTimeout,
		unknownTTL: max(cfg.KeyCacheTTL, 0), size: cfg.KeyCacheSize, now: cfg.Now, log: cfg.Logger,
		observe: observeKey, manualSync: cfg.manualKeySync})
	if cfg.KeyCacheTTL > 0 {
		s.dirs = lru.New[string, dirEntry](maxCacheEntries, cfg.KeyCacheTTL, cfg.Now)
		s.keys.onAgent = s.forgetDirectory
	}

	var err error
	if s.verify, err = newVerifiers(s.verifierConfig(), s.keys, cfg.VestauthCompat); err != nil {
		return nil, err
	}
	s.handler = s.direct("/whoami", s.whoamiRoute, s.routes())
	return s, nil
}

// verifierConfig is what every verifier of the server shares: the
// authority (the service host: signed routes answer only there), the
// clock, the replay store, the logger, the body cap and, with Metrics or
// Status, the outcome hook that records every verification.
func (s *Server) verifierConfig() middleware.Config {
	c := middleware.Config{Authorities: []string{s.service.Host}, Now: s.cfg.Now, Replay: s.cfg.Replay, Logger: s.cfg.Logger, MaxBodyBytes: s.cfg.MaxBodyBytes,
		TracerProvider: s.cfg.TracerProvider, MeterProvider: s.cfg.MeterProvider}
	m, p := s.cfg.Metrics, s.cfg.Status
	switch {
	case m != nil && p != nil:
		c.OnResult = func(res middleware.Result) {
			m.ObserveResult(res)
			p.Observe(res)
		}
	case m != nil:
		c.OnResult = m.ObserveResult
	case p != nil:
		c.OnResult = p.Observe
	}
	return c
}

// parse parses r's signature fields once for the verifiers of a route
// that checks several signatures, or whose handler read the body (given
// here, so that it is not read again).
func (s *Server) parse(v *middleware.Verifier, r *http.Request, body []byte) *middleware.Signed {
	s.parses.Add(1)
	sr := v.Parse(r)
	sr.SetBody(body)
	return sr
}

// Close stops the server's background work, the reader of the change log
// (see keySource), and waits for it to end. Call it before closing the
// database; the server keeps
// answering, reading keys from the database at each lookup. Open's
// Instance calls it.
func (s *Server) Close() {
	if s.keys.changes != nil {
		s.keys.changes.Close()
	}
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// AgentOrigin returns <scheme>://<uid>.<service host>.
func (s *Server) AgentOrigin(uid string) string {
	return s.service.AgentOrigin(uid)
}

// WellKnownURL returns the URL of uid's key directory.
func (s *Server) WellKnownURL(uid string) string {
	return s.service.DirectoryURL(uid)
}
