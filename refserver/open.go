package refserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/agentid/agentid/middleware/metrics"
	"github.com/agentid/agentid/middleware/ratelimit"
	"github.com/agentid/agentid/middleware/status"
	"github.com/agentid/agentid/refserver/internal/webhook"
	"github.com/agentid/agentid/refserver/replaypg"
	"github.com/agentid/agentid/refserver/store"
)

// Replay store kinds of Options.ReplayStore.
const (
	// ReplayMemory remembers nonces in this process only (one instance).
	ReplayMemory = "memory"
	// ReplayDatabase remembers nonces in the server's database, shared by
	// every instance that uses it.
	ReplayDatabase = "postgres"
)

// ErrUnknownReplayStore marks an Options.ReplayStore that names no replay
// store kind.
var ErrUnknownReplayStore = errors.New("refserver: unknown replay store")

// Defaults of Options.
const (
	DefaultAddr            = ":3000"
	DefaultShutdownTimeout = 20 * time.Second
)

// Options are the settings of a running reference server, as
// `idcli server start` takes them. DatabaseURL is required.
type Options struct {
	// DatabaseURL names the database (see store.OpenGorm). Required.
	DatabaseURL string
	// Hostname is the public base URL with scheme (see Config.Hostname). If
	// "", http://localhost:<the port listened on>.
	Hostname string
	// Addr is the TCP address to listen on, such as ":3000" or
	// "127.0.0.1:0". If "" (and Listener is nil), DefaultAddr.
	Addr string
	// Listener, if set, is served instead of listening on Addr; Open owns it
	// from then on (it is closed on failure and by Close).
	Listener net.Listener
	// Migrate applies pending migrations before serving, printing their
	// lines to MigrationLog (nil for none). If false, a database with
	// pending migrations is refused (store.ErrNotMigrated), except an in-memory
	// SQLite database, which Open always migrates since no other process
	// can reach it.
	Migrate      bool
	MigrationLog io.Writer
	// ReplayStore is ReplayMemory or ReplayDatabase ("database" is an alias
	// of the latter). If "", ReplayMemory. Any other value is an error
	// wrapping ErrUnknownReplayStore.
	ReplayStore string
	// RegisterLimit, if set, limits POST /agents per client address (see
	// Config.RegisterLimit). If nil, registration is not limited.
	RegisterLimit *ratelimit.Config
	// MetricsListen, if set, is the TCP address ("127.0.0.1:9090",
	// "127.0.0.1:0") on which Open counts and serves Prometheus metrics
	// (see Config.Metrics): GET /metrics there, and nothing else. The
	// public listener (Addr, Listener) never serves them. If "", nothing
	// is counted or served. A listen failure wraps ErrMetricsListen.
	MetricsListen string
	// StatusPage serves the status page at GET /status on the service host
	// (see Config.Status). Off by default: the page lists agents' identities
	// with their request counts to anyone who reaches the service host.
	StatusPage bool
	// VestauthCompat serves vestauth clients' POST /register and POST
	// /rotate (see Config.VestauthCompat); Open logs a warning when it is on.
	VestauthCompat bool
	// Registration is the registration mode (see Config.Registration).
	Registration string
	// AuditRetention is how long the audit trail is kept (see
	// Config.AuditRetention).
	AuditRetention time.Duration
	// Webhooks are the URLs change events are posted to (each entry may
	// be a comma-separated list), signed by the service key: see
	// docs/deployment.md. Each must be https, without user information,
	// and not a private address (checked here, and again when dialing,
	// after name resolution) unless WebhookAllowPrivate. Every instance
	// with Webhooks delivers the outbox, one instance at a time per URL.
	Webhooks []string
	// WebhookAllowPrivate lets webhooks be plain http and private
	// addresses (local development, or a receiver on the operator's own
	// network).
	WebhookAllowPrivate bool
	// WebhookTimeout bounds one delivery. If 0, DefaultWebhookTimeout.
	WebhookTimeout time.Duration
	// Logger receives the request log and warnings. If nil, nothing is logged.
	Logger *slog.Logger
	// Version is reported by the health route. If "", signer.Version.
	Version string
	// ShutdownTimeout bounds the graceful shutdown of Serve. If 0,
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Configure, if set, adjusts the Config just before New, for settings
	// Options does not name (DBTimeout, KeyCacheTTL, Now, a custom Replay).
	Configure func(*Config)
}

// Instance is a reference server opened by Open: its database, its replay
// store and a listener, not yet serving until Serve is called.
type Instance struct {
	// Server is the reference server.
	Server *Server
	// URL is the public base URL (Options.Hostname, or
	// http://localhost:<port>).
	URL string
	// Addr is the address the listener is bound to.
	Addr net.Addr
	// MetricsAddr is the address the metrics listener is bound to
	// (Options.MetricsListen); nil without one.
	MetricsAddr net.Addr

	webhooks        *webhook.Worker // nil without Options.Webhooks
	hs              *http.Server
	ln              net.Listener
	ms              *http.Server // serves /metrics on mln; nil without
	mln             net.Listener
	db              *store.DB
	stopReplay      func()
	shutdownTimeout time.Duration
	closeOnce       sync.Once
}

// Open opens the database of o.DatabaseURL, checks (or applies) its
// migrations, builds the server with its replay store, rate limit and
// metrics, and listens. Database failures are *store.DBError
// (store.ErrNotMigrated when migrations are pending); a listen failure wraps the system error
// (errors.Is(err, syscall.EADDRINUSE) for a busy port). Call Serve to
// serve, or Close to give up.
func Open(ctx context.Context, o Options) (_ *Instance, err error) {
	in := &Instance{ln: o.Listener, shutdownTimeout: o.ShutdownTimeout}
	if in.shutdownTimeout == 0 {
		in.shutdownTimeout = DefaultShutdownTimeout
	}
	defer func() {
		if err != nil {
			in.release()
		}
	}()
	replayShared := false
	switch o.ReplayStore {
	case "", ReplayMemory:
	case ReplayDatabase, "database":
		replayShared = true
	default:
		return nil, fmt.Errorf("%w %q: want %s or %s", ErrUnknownReplayStore, o.ReplayStore, ReplayMemory, ReplayDatabase)
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	if in.db, err = store.Open(ctx, o.DatabaseURL); err != nil {
		return nil, err
	}
	if err := in.db.CheckMigrated(ctx); errors.Is(err, store.ErrNotMigrated) {
		if path, _ := store.SQLitePath(o.DatabaseURL); !o.Migrate && path != store.InMemory {
			return nil, err
		}
		if err := in.db.Migrate(ctx, o.MigrationLog); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}

	if in.ln == nil {
		addr := o.Addr
		if addr == "" {
			addr = DefaultAddr
		}
		if in.ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("refserver: listen on %s: %w", addr, err)
		}
	}
	in.Addr = in.ln.Addr()
	in.URL = o.Hostname
	if in.URL == "" {
		port := 0
		if a, ok := in.Addr.(*net.TCPAddr); ok {
			port = a.Port
		}
		in.URL = "http://localhost:" + strconv.Itoa(port)
	}

	cfg := Config{DB: in.db, Hostname: in.URL, Version: o.Version, Logger: logger, VestauthCompat: o.VestauthCompat, Registration: o.Registration,
		AuditRetention: o.AuditRetention}
	if o.MetricsListen != "" {
		if in.mln, err = net.Listen("tcp", o.MetricsListen); err != nil {
			return nil, fmt.Errorf("%w on %s: %w", ErrMetricsListen, o.MetricsListen, err)
		}
		in.MetricsAddr = in.mln.Addr()
		cfg.Metrics = metrics.NewRegistry()
	}
	if o.StatusPage {
		cfg.Status = status.New(status.Config{Title: "agentid server status", Now: cfg.Now})
	}
	if replayShared {
		rc := replaypg.Config{DB: in.db.Gorm(), Logger: logger}
		if cfg.Metrics != nil {
			// The store's inserts bypass gorm's callbacks: timed here.
			rc.ObserveStatement = cfg.Metrics.ObserveDBQuery
		}
		replay, err := replaypg.New(rc)
		if err != nil {
			return nil, err
		}
		in.stopReplay = replay.Start(context.WithoutCancel(ctx))
		cfg.Replay = replay
	} // else New's default: one in-memory store
	if o.RegisterLimit != nil {
		if cfg.RegisterLimit, err = ratelimit.New(*o.RegisterLimit); err != nil {
			return nil, err
		}
	}
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	if in.Server, err = New(cfg); err != nil {
		return nil, err
	}
	if err := in.openWebhooks(ctx, o, logger); err != nil {
		return nil, err
	}
	if cfg.VestauthCompat {
		logger.Warn("vestauth compatibility on: POST /register and POST /rotate are served; /rotate accepts any unused signature of the agent's current key for this host (see docs/migrating-from-vestauth.md)")
	}
	in.hs = newHTTPServer(in.Server.Handler(), logger)
	if cfg.Metrics != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", cfg.Metrics.Handler())
		in.ms = newHTTPServer(mux, logger)
	}
	return in, nil
}

// ErrMetricsListen marks a failure of Open to listen on
// Options.MetricsListen.
var ErrMetricsListen = errors.New("refserver: listen for metrics")

// newHTTPServer is the http.Server of a listener of Open, serving h.
func newHTTPServer(h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// servers returns the instance's servers and their listeners: the public
// one, then the metrics one if any.
func (in *Instance) servers() ([]*http.Server, []net.Listener) {
	if in.ms == nil {
		return []*http.Server{in.hs}, []net.Listener{in.ln}
	}
	return []*http.Server{in.hs, in.ms}, []net.Listener{in.ln, in.mln}
}

// Serve serves until ctx is done, then shuts down gracefully: it stops
// accepting, lets requests in flight finish (at most ShutdownTimeout) and
// releases the database. It returns nil after a clean shutdown, or the
// error that stopped serving.
func (in *Instance) Serve(ctx context.Context) error {
	// Background work (see housekeep) runs while the instance serves.
	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	go in.Server.housekeep(bg)
	stopWebhooks := in.startWebhooks(bg)
	servers, listeners := in.servers()
	served := make(chan error, len(servers))
	for i, hs := range servers {
		go func() { served <- hs.Serve(listeners[i]) }()
	}
	select {
	case err := <-served:
		// One stopped (Close was called, or its listener failed): stop
		// the others too.
		for _, hs := range servers {
			hs.Close()
		}
		for range len(servers) - 1 {
			<-served
		}
		stopWebhooks()
		in.release()
		if errors.Is(err, http.ErrServerClosed) {
			return nil // Close was called
		}
		return fmt.Errorf("refserver: serve: %w", err)
	case <-ctx.Done():
	}
	stopWebhooks()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.shutdownTimeout)
	defer cancel()
	var err error
	for _, hs := range servers {
		err = errors.Join(err, hs.Shutdown(sctx))
	}
	for range servers {
		<-served
	}
	in.release()
	if err != nil {
		return fmt.Errorf("refserver: shutdown: %w", err)
	}
	return nil
}

// Close stops the server at once (open connections are closed) and
// releases the database. It is safe to call more than once, and after Serve.
func (in *Instance) Close() error {
	var err error
	if in.hs != nil {
		err = in.hs.Close()
	}
	if in.ms != nil {
		err = errors.Join(err, in.ms.Close())
	}
	in.release()
	return err
}

// release closes the listeners, stops the replay store and closes the
// database, once.
func (in *Instance) release() {
	in.closeOnce.Do(func() {
		if in.ln != nil {
			in.ln.Close()
		}
		if in.mln != nil {
			in.mln.Close()
		}
		if in.stopReplay != nil {
			in.stopReplay()
		}
		if in.Server != nil {
			in.Server.Close()
		}
		if in.db != nil {
			in.db.Close()
		}
	})
}
