package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/metrics"
	"github.com/agentid/agentid/refserver/ratelimit"
	"github.com/agentid/agentid/refserver/replaypg"
	"github.com/agentid/agentid/signer/agent"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/peterbourgon/ff/v3/ffcli"
	"gorm.io/gorm"
)

// Server configuration defaults (spec "Server configuration variables").
const (
	defaultServerPort        = "3000"
	defaultServerDatabaseURL = "postgres://localhost/service_production"
)

// newServerCmd is `idcli server …`: init, start, db:create, db:migrate, db:drop.
func newServerCmd(env *cliEnv) *ffcli.Command {
	return &ffcli.Command{
		Name:       "server",
		ShortUsage: "idcli server <init|start|db:create|db:migrate|db:drop> [flags]",
		ShortHelp:  "self-host the agentid reference server",
		LongHelp: "Settings come from flags, then the process environment (PORT, HOSTNAME,\n" +
			"DATABASE_URL), then the .env file of the current directory, then the defaults\n" +
			"PORT=3000, HOSTNAME=http://localhost:<PORT>, DATABASE_URL=" + defaultServerDatabaseURL + ".\n" +
			"HOSTNAME must carry a scheme; a bare shell $HOSTNAME (a machine name) is ignored.\n" +
			"DATABASE_URL may also be sqlite://PATH or sqlite::memory: (embedded database).",
		FlagSet: newFlagSet("idcli server", env),
		Exec:    groupExec,
		Subcommands: []*ffcli.Command{
			newServerInitCmd(env),
			newServerStartCmd(env),
			newServerDBCmd(env, "db:create", "create the database (needs the CREATEDB privilege)", serverDBCreate),
			newServerDBCmd(env, "db:migrate", "create or update the schema (idempotent)", serverDBMigrate),
			newServerDBCmd(env, "db:drop", "permanently delete the database and all agent data", serverDBDrop),
		},
	}
}

// serverFlags are the flags shared by the server commands; "" means unset.
type serverFlags struct {
	port, hostname, databaseURL string
}

func (f *serverFlags) register(fs *flag.FlagSet, withPortHost bool) {
	if withPortHost {
		fs.StringVar(&f.port, "port", "", "port to listen on (default: PORT, then "+defaultServerPort+")")
		fs.StringVar(&f.hostname, "hostname", "", "public base URL with scheme (default: HOSTNAME, then http://localhost:<port>)")
	}
	fs.StringVar(&f.databaseURL, "database-url", "", "database URL (default: DATABASE_URL, then "+defaultServerDatabaseURL+")")
}

// serverSettings are the resolved PORT, HOSTNAME and DATABASE_URL.
type serverSettings struct {
	Port, Hostname, DatabaseURL string
	envFile                     *agent.EnvFile
}

// resolveServerSettings applies flags > process environment > ./.env > defaults.
// HOSTNAME is resolved (and a scheme-less value warned about) only when
// needHostname is set: the db: commands do not use it.
func resolveServerSettings(env *cliEnv, f serverFlags, needHostname bool) (serverSettings, error) {
	ef, err := agent.ReadEnvFile(filepath.Join(env.Dir, ".env"))
	if err != nil {
		return serverSettings{}, err
	}
	s := serverSettings{envFile: ef}
	lookup := func(flagValue, name string) (string, string) {
		if flagValue != "" {
			return flagValue, "--" + strings.ToLower(strings.ReplaceAll(name, "_", "-"))
		}
		if v := env.Getenv(name); v != "" {
			return v, "the environment"
		}
		if v, ok := ef.Get(name); ok && v != "" {
			return v, ".env"
		}
		return "", ""
	}
	s.Port, _ = lookup(f.port, "PORT")
	if s.Port == "" {
		s.Port = defaultServerPort
	}
	if n, err := strconv.Atoi(s.Port); err != nil || n < 0 || n > 65535 {
		return serverSettings{}, fmt.Errorf("port %q is not a port number (0-65535)", s.Port)
	}
	s.DatabaseURL, _ = lookup(f.databaseURL, "DATABASE_URL")
	if s.DatabaseURL == "" {
		s.DatabaseURL = defaultServerDatabaseURL
	}
	if refserver.DatabaseKind(s.DatabaseURL) == "" {
		return serverSettings{}, fmt.Errorf("DATABASE_URL %s is not supported: use postgres://USER:PASS@HOST:PORT/DATABASE, sqlite://PATH or sqlite::memory:", refserver.RedactURL(s.DatabaseURL))
	}

	if !needHostname {
		return s, nil
	}
	// HOSTNAME: a flag without a scheme is an error; a variable without a
	// scheme is most likely the shell's machine name and is skipped.
	candidates := []struct{ value, source string }{{f.hostname, "--hostname"}, {env.Getenv("HOSTNAME"), "the environment"}}
	if v, ok := ef.Get("HOSTNAME"); ok {
		candidates = append(candidates, struct{ value, source string }{v, ".env"})
	}
	for _, c := range candidates {
		if c.value == "" {
			continue
		}
		if c.source != "--hostname" && !strings.Contains(c.value, "://") {
			fmt.Fprintf(env.Stderr, "idcli: warning: ignoring HOSTNAME=%q from %s: it has no scheme (want e.g. https://agentid.example)\n", c.value, c.source)
			continue
		}
		if _, err := refserver.ParseHostname(c.value); err != nil {
			return serverSettings{}, fmt.Errorf("%s: %s", c.source, strings.TrimPrefix(err.Error(), "refserver: "))
		}
		s.Hostname = strings.TrimSuffix(c.value, "/")
		break
	}
	if s.Hostname == "" {
		s.Hostname = "http://localhost:" + s.Port
	}
	return s, nil
}

func newServerInitCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli server init", env)
	var f serverFlags
	f.register(fs, true)
	return &ffcli.Command{
		Name:       "init",
		ShortUsage: "idcli server init [--port P] [--hostname URL] [--database-url URL]",
		ShortHelp:  "write PORT, HOSTNAME and DATABASE_URL to ./.env",
		FlagSet:    fs,
		Exec: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("server init takes no arguments (got %q)", args[0])
			}
			s, err := resolveServerSettings(env, f, true)
			if err != nil {
				return err
			}
			s.envFile.Set("PORT", s.Port)
			s.envFile.Set("HOSTNAME", s.Hostname)
			s.envFile.Set("DATABASE_URL", s.DatabaseURL)
			if err := s.envFile.Write(); err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "✔ ready (.env/HOSTNAME=%s)\n", s.Hostname)
			return nil
		},
	}
}

func newServerDBCmd(env *cliEnv, name, help string, do func(ctx context.Context, env *cliEnv, s serverSettings) error) *ffcli.Command {
	fs := newFlagSet("idcli server "+name, env)
	var f serverFlags
	f.register(fs, false)
	return &ffcli.Command{
		Name:       name,
		ShortUsage: "idcli server " + name + " [--database-url URL]",
		ShortHelp:  help,
		FlagSet:    fs,
		Exec: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("server %s takes no arguments (got %q)", name, args[0])
			}
			s, err := resolveServerSettings(env, f, false)
			if err != nil {
				return err
			}
			return do(ctx, env, s)
		},
	}
}

// openServerDB opens the database and turns failures into one line naming
// the cause and the fix.
func openServerDB(s serverSettings) (*gorm.DB, error) {
	db, err := refserver.OpenDB(s.DatabaseURL)
	if err != nil {
		return nil, dbConnectError(s.DatabaseURL, err)
	}
	return db, nil
}

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.Close()
	}
}

// dbConnectError explains a failed connection in one line: cause and fix.
func dbConnectError(databaseURL string, err error) error {
	where := refserver.RedactURL(databaseURL)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "3D000":
		return fmt.Errorf("database %s does not exist: run idcli server db:create (or fix DATABASE_URL / --database-url)", quoteDBName(postgresDBName(databaseURL)))
	case errors.As(err, &pgErr) && (pgErr.Code == "28P01" || pgErr.Code == "28000"):
		return fmt.Errorf("the database at %s refused the credentials (%s): fix the user and password in DATABASE_URL / --database-url", where, pgErr.Message)
	case errors.As(err, &pgErr):
		return fmt.Errorf("the database at %s failed: %s (SQLSTATE %s)", where, pgErr.Message, pgErr.Code)
	case errors.Is(err, refserver.ErrUnsupportedDatabaseURL):
		return errors.New(oneLine(strings.TrimPrefix(err.Error(), "refserver: ")))
	}
	return fmt.Errorf("cannot reach the database at %s (%s): start PostgreSQL or point DATABASE_URL / --database-url at a running server", where, netCause(err))
}

// netCause names the root cause of a connection failure briefly.
func netCause(err error) string {
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &dnsErr):
		return "unknown host " + dnsErr.Name
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timed out"
	case errors.Is(err, fs.ErrNotExist):
		return "no such file or directory"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	}
	for {
		next := errors.Unwrap(err)
		if next == nil {
			break
		}
		err = next
	}
	return oneLine(err.Error())
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func quoteDBName(name string) string { return "'" + name + "'" }

func postgresDBName(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}

// maintenanceURL is databaseURL pointing at database name instead.
func maintenanceURL(databaseURL, name string) string {
	u, _ := url.Parse(databaseURL)
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

// quoteIdent quotes a PostgreSQL identifier.
func quoteIdent(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// withMaintenanceDB connects to the "postgres" maintenance database (or
// template1) with the credentials of s.DatabaseURL.
func withMaintenanceDB(s serverSettings, fn func(db *gorm.DB, name string) error) error {
	name := postgresDBName(s.DatabaseURL)
	if name == "" {
		return fmt.Errorf("DATABASE_URL %s names no database (want postgres://USER:PASS@HOST:PORT/DATABASE)", refserver.RedactURL(s.DatabaseURL))
	}
	var db *gorm.DB
	var err error
	for _, m := range []string{"postgres", "template1"} {
		if db, err = refserver.OpenDB(maintenanceURL(s.DatabaseURL, m)); err == nil {
			break
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "3D000" {
			break
		}
	}
	if err != nil {
		return dbConnectError(s.DatabaseURL, err)
	}
	defer closeDB(db)
	return fn(db, name)
}

func databaseExists(db *gorm.DB, name string) (bool, error) {
	var n int64
	err := db.Raw("SELECT count(*) FROM pg_database WHERE datname = ?", name).Scan(&n).Error
	return n > 0, err
}

func serverDBCreate(ctx context.Context, env *cliEnv, s serverSettings) error {
	if refserver.DatabaseKind(s.DatabaseURL) == "sqlite" {
		path, ok, err := sqliteFile(env, s.DatabaseURL, "create")
		if !ok {
			return err
		}
		if _, err := os.Stat(path); err == nil {
			fmt.Fprintf(env.Stdout, "Database %s already exists\n", quoteDBName(path))
			return nil
		}
		db, err := refserver.OpenDB("sqlite://" + path)
		if err != nil {
			return dbConnectError(s.DatabaseURL, err)
		}
		closeDB(db)
		fmt.Fprintf(env.Stdout, "Created database %s\n", quoteDBName(path))
		return nil
	}
	return withMaintenanceDB(s, func(db *gorm.DB, name string) error {
		db = db.WithContext(ctx)
		exists, err := databaseExists(db, name)
		if err != nil {
			return fmt.Errorf("cannot list databases: %s", oneLine(err.Error()))
		}
		if exists {
			fmt.Fprintf(env.Stdout, "Database %s already exists\n", quoteDBName(name))
			return nil
		}
		if err := db.Exec("CREATE DATABASE " + quoteIdent(name)).Error; err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42P04" {
				fmt.Fprintf(env.Stdout, "Database %s already exists\n", quoteDBName(name))
				return nil
			}
			if errors.As(err, &pgErr) && pgErr.Code == "42501" {
				return fmt.Errorf("cannot create database %s: permission denied: grant the user CREATEDB (ALTER ROLE … CREATEDB) or create it as a superuser", quoteDBName(name))
			}
			return fmt.Errorf("cannot create database %s: %s", quoteDBName(name), oneLine(err.Error()))
		}
		fmt.Fprintf(env.Stdout, "Created database %s\n", quoteDBName(name))
		return nil
	})
}

func serverDBDrop(ctx context.Context, env *cliEnv, s serverSettings) error {
	if refserver.DatabaseKind(s.DatabaseURL) == "sqlite" {
		path, ok, err := sqliteFile(env, s.DatabaseURL, "drop")
		if !ok {
			return err
		}
		if err := os.Remove(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				fmt.Fprintf(env.Stdout, "Database %s does not exist\n", quoteDBName(path))
				return nil
			}
			return fmt.Errorf("cannot drop database %s: %s", quoteDBName(path), oneLine(err.Error()))
		}
		os.Remove(path + "-wal")
		os.Remove(path + "-shm")
		fmt.Fprintf(env.Stdout, "Dropped database %s\n", quoteDBName(path))
		return nil
	}
	return withMaintenanceDB(s, func(db *gorm.DB, name string) error {
		db = db.WithContext(ctx)
		exists, err := databaseExists(db, name)
		if err != nil {
			return fmt.Errorf("cannot list databases: %s", oneLine(err.Error()))
		}
		if !exists {
			fmt.Fprintf(env.Stdout, "Database %s does not exist\n", quoteDBName(name))
			return nil
		}
		if err := db.Exec("DROP DATABASE IF EXISTS " + quoteIdent(name)).Error; err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "55006" {
				return fmt.Errorf("cannot drop database %s: it is in use: stop the server (and other clients) first", quoteDBName(name))
			}
			return fmt.Errorf("cannot drop database %s: %s", quoteDBName(name), oneLine(err.Error()))
		}
		fmt.Fprintf(env.Stdout, "Dropped database %s\n", quoteDBName(name))
		return nil
	})
}

func serverDBMigrate(ctx context.Context, env *cliEnv, s serverSettings) error {
	s.DatabaseURL = sqliteURLAbs(env, s.DatabaseURL)
	db, err := openServerDB(s)
	if err != nil {
		return err
	}
	defer closeDB(db)
	if err := refserver.Migrate(ctx, db, env.Stdout); err != nil {
		return fmt.Errorf("migration failed: %s", oneLine(strings.TrimPrefix(err.Error(), "refserver: ")))
	}
	return nil
}

// sqliteFile resolves the file of a SQLite databaseURL for db:create and
// db:drop. ok is false on an error, and for ':memory:', which has nothing
// to verb (said on env.Stdout).
func sqliteFile(env *cliEnv, databaseURL, verb string) (path string, ok bool, err error) {
	path, err = refserver.SQLitePath(databaseURL)
	if err != nil {
		return "", false, err
	}
	if path == ":memory:" {
		fmt.Fprintf(env.Stdout, "Database ':memory:' lives in memory: nothing to %s\n", verb)
		return "", false, nil
	}
	return sqliteAbs(env, path), true, nil
}

// sqliteAbs resolves a relative SQLite path against env.Dir.
func sqliteAbs(env *cliEnv, path string) string {
	if filepath.IsAbs(path) || env.Dir == "" {
		return path
	}
	return filepath.Join(env.Dir, path)
}

func sqliteURLAbs(env *cliEnv, databaseURL string) string {
	if refserver.DatabaseKind(databaseURL) != "sqlite" {
		return databaseURL
	}
	path, err := refserver.SQLitePath(databaseURL)
	if err != nil || path == ":memory:" {
		return databaseURL
	}
	return "sqlite://" + sqliteAbs(env, path)
}

// startFlags are the flags of `idcli server start` beyond the shared ones.
type startFlags struct {
	replayStore    string // memory | postgres (alias database)
	rateLimit      string // "60/m", "off", …
	rateLimitBurst int
	trustedProxies string // comma-separated CIDRs or addresses
	metrics        bool
	logLevel       string
	vestauthCompat bool
}

// Defaults of `idcli server start`.
const (
	defaultRateLimit      = "60/m"
	defaultRateLimitBurst = ratelimit.DefaultBurst
)

func (o *startFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.replayStore, "replay-store", "memory", "where signature nonces are remembered: memory (one instance) or postgres (the server's database, shared by every instance; alias: database)")
	fs.StringVar(&o.rateLimit, "rate-limit", defaultRateLimit, "registrations (POST /agents) allowed per client address: N/s, N/m, N/h, or off")
	fs.IntVar(&o.rateLimitBurst, "rate-limit-burst", defaultRateLimitBurst, "registrations a client address may make at once before --rate-limit applies")
	fs.StringVar(&o.trustedProxies, "trusted-proxies", "", "comma-separated CIDRs or addresses of reverse proxies whose X-Forwarded-For names the client (default: none; the peer address is the client)")
	fs.BoolVar(&o.metrics, "metrics", true, "serve Prometheus metrics at GET /metrics on the service host (--metrics=false to disable)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info (one line per request), warn or error (warn drops the per-request lines; 5xx are still logged)")
	fs.BoolVar(&o.vestauthCompat, "vestauth-compat", false, "also serve vestauth clients' POST /register and POST /rotate (rotation binds less than PUT /agents/{uid}/keys: see docs/migrating-from-vestauth.md)")
}

// startOptions are the validated startFlags.
type startOptions struct {
	sharedReplay bool
	limit        *ratelimit.Config // nil: registration not limited
	metrics      bool
	logLevel     slog.Level
	// vestauthCompat serves POST /register and POST /rotate.
	vestauthCompat bool
}

func (o startFlags) parse() (startOptions, error) {
	var so startOptions
	switch o.replayStore {
	case "memory":
	case "postgres", "database":
		so.sharedReplay = true
	default:
		return so, fmt.Errorf("--replay-store %q: want memory or postgres", o.replayStore)
	}
	rate, on, err := ratelimit.ParseRate(o.rateLimit)
	if err != nil {
		return so, fmt.Errorf("--rate-limit %q: want N/s, N/m, N/h (e.g. %s) or off", o.rateLimit, defaultRateLimit)
	}
	if o.rateLimitBurst < 1 {
		return so, fmt.Errorf("--rate-limit-burst %d: want 1 or more", o.rateLimitBurst)
	}
	var proxies []string
	for _, p := range strings.Split(o.trustedProxies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			proxies = append(proxies, p)
		}
	}
	if on {
		so.limit = &ratelimit.Config{Rate: rate, Burst: o.rateLimitBurst, TrustedProxies: proxies}
		if err := so.limit.Validate(); err != nil {
			return so, fmt.Errorf("--trusted-proxies: %s", strings.TrimPrefix(err.Error(), "ratelimit: "))
		}
	} else if len(proxies) > 0 {
		// Validate anyway, so a typo is not silent until the limit is on.
		if err := (ratelimit.Config{TrustedProxies: proxies}).Validate(); err != nil {
			return so, fmt.Errorf("--trusted-proxies: %s", strings.TrimPrefix(err.Error(), "ratelimit: "))
		}
	}
	so.metrics = o.metrics
	so.vestauthCompat = o.vestauthCompat
	if err := so.logLevel.UnmarshalText([]byte(o.logLevel)); err != nil {
		return so, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	return so, nil
}

func newServerStartCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli server start", env)
	var f serverFlags
	f.register(fs, true)
	var o startFlags
	o.register(fs)
	return &ffcli.Command{
		Name:       "start",
		ShortUsage: "idcli server start [--port P] [--hostname URL] [--database-url URL] [--replay-store memory|postgres] [--rate-limit 60/m|off] [--rate-limit-burst N] [--trusted-proxies CIDR,…] [--metrics=true|false] [--log-level info|warn|…] [--vestauth-compat]",
		ShortHelp:  "run the reference server until SIGINT/SIGTERM",
		LongHelp: "Runs the reference server. Several instances behind a load balancer share one\n" +
			"database: start each with --replay-store postgres so a nonce accepted by one is\n" +
			"refused by all. Registration (POST /agents) is limited per client address\n" +
			"(default " + defaultRateLimit + ", burst " + fmt.Sprint(defaultRateLimitBurst) + "; 429 rate_limited with Retry-After). Behind a\n" +
			"reverse proxy, list it in --trusted-proxies so its X-Forwarded-For names the\n" +
			"client; otherwise every client shares the proxy's limit.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("server start takes no arguments (got %q)", args[0])
			}
			so, err := o.parse()
			if err != nil {
				return err
			}
			s, err := resolveServerSettings(env, f, true)
			if err != nil {
				return err
			}
			return serverStart(ctx, env, s, so)
		},
	}
}

// serverStart runs the server until ctx is cancelled, then shuts down
// gracefully (in-flight requests finish, up to 20 s).
func serverStart(ctx context.Context, env *cliEnv, s serverSettings, so startOptions) error {
	setServerGC(env)
	s.DatabaseURL = sqliteURLAbs(env, s.DatabaseURL)
	db, err := openServerDB(s)
	if err != nil {
		return err
	}
	defer closeDB(db)

	pending, err := refserver.Pending(ctx, db)
	if err != nil {
		return dbConnectError(s.DatabaseURL, err)
	}
	if len(pending) > 0 {
		if path, _ := refserver.SQLitePath(s.DatabaseURL); path == ":memory:" {
			// An in-memory database cannot be migrated by another command.
			if err := refserver.Migrate(ctx, db, nil); err != nil {
				return fmt.Errorf("migration failed: %s", oneLine(err.Error()))
			}
		} else {
			return fmt.Errorf("the database is not migrated (%d pending migrations): run idcli server db:migrate", len(pending))
		}
	}

	logger := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: so.logLevel}))
	cfg := refserver.Config{DB: db, Hostname: s.Hostname, Version: Version, Logger: logger, VestauthCompat: so.vestauthCompat}
	if so.vestauthCompat {
		logger.Warn("vestauth compatibility on: POST /register and POST /rotate are served; /rotate accepts any unused signature of the agent's current key for this host (see docs/migrating-from-vestauth.md)")
	}
	if so.sharedReplay {
		store, err := replaypg.New(replaypg.Config{DB: db, Logger: logger})
		if err != nil {
			return err
		}
		stop := store.Start(ctx)
		defer stop()
		cfg.Replay = store
	} else {
		cfg.Replay = middleware.NewMemoryReplayStore()
	}
	if so.limit != nil {
		if cfg.RegisterLimit, err = ratelimit.New(*so.limit); err != nil {
			return err
		}
	}
	if so.metrics {
		cfg.Metrics = metrics.NewRegistry()
	}
	srv, err := refserver.New(cfg)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", ":"+s.Port)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("port %s is already in use: stop the process using it or choose another port with --port (or PORT)", s.Port)
		}
		if errors.Is(err, syscall.EACCES) {
			return fmt.Errorf("port %s needs privileges: choose a port above 1023 with --port (or PORT)", s.Port)
		}
		return fmt.Errorf("cannot listen on port %s: %s", s.Port, netCause(err))
	}
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	fmt.Fprintf(env.Stdout, "idcli server listening on %s\n", s.Hostname)

	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("server stopped: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	<-served
	return nil
}

// serverGCPercent is the garbage collector target of `server start` when the
// GOGC variable is unset. The server's live heap is small (tens of MiB even
// under load), so collecting at 4× instead of 2× the live heap costs little
// memory and, measured with `idcli bench` on two cores, raises /whoami
// throughput by about 15–20% (less GC work competing with Ed25519).
const serverGCPercent = 400

func setServerGC(env *cliEnv) {
	if env.Getenv("GOGC") == "" {
		debug.SetGCPercent(serverGCPercent)
	}
}
