package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentid/agentid/middleware/asynclog"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/ratelimit"
	"github.com/agentid/agentid/signer/envfile"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// Server configuration defaults (the PORT and DATABASE_URL rows of
// docs/deployment.md).
const (
	defaultServerPort        = "3000"
	defaultServerDatabaseURL = "postgres://localhost/service_production"
)

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
}

// resolveServerSettings applies flags > process environment > ./.env > defaults.
// HOSTNAME is resolved (and a scheme-less value warned about) only when
// needHostname is set: the db: commands do not use it.
func resolveServerSettings(env *cliEnv, f serverFlags, needHostname bool) (serverSettings, error) {
	ef, err := envfile.Read(filepath.Join(env.Dir, ".env"))
	if err != nil {
		return serverSettings{}, err
	}
	var s serverSettings
	lookup := func(flagValue, name string) string {
		if flagValue != "" {
			return flagValue
		}
		if v := env.Getenv(name); v != "" {
			return v
		}
		v, _ := ef.Get(name)
		return v
	}
	s.Port = lookup(f.port, "PORT")
	portGiven := s.Port != ""
	if s.Port == "" {
		s.Port = defaultServerPort
	}
	if n, err := strconv.Atoi(s.Port); err != nil || n < 0 || n > 65535 {
		return serverSettings{}, fmt.Errorf("port %q is not a port number (0-65535)", s.Port)
	}
	s.DatabaseURL = lookup(f.databaseURL, "DATABASE_URL")
	if s.DatabaseURL == "" {
		s.DatabaseURL = defaultServerDatabaseURL
	}
	if refserver.DatabaseKind(s.DatabaseURL) == "" {
		//lint:ignore ST1005 the message ends with the URL form sqlite::memory:
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
		svc, err := refserver.ParseHostname(c.value)
		if err != nil {
			return serverSettings{}, fmt.Errorf("%s: %s", c.source, strings.TrimPrefix(err.Error(), "refserver: "))
		}
		s.Hostname = svc.String()
		// A local HOSTNAME names the port the server listens on: from
		// --hostname unless --port is given, from a variable unless PORT is
		// set anywhere.
		if port, ok := localPort(c.value); ok && f.port == "" && (c.source == "--hostname" || !portGiven) {
			s.Port = port
		}
		break
	}
	if s.Hostname == "" {
		s.Hostname = "http://localhost:" + s.Port
	}
	return s, nil
}

// localPort returns the port written in hostname, a valid HOSTNAME value,
// when it names this machine (localhost, a *.localhost name or a loopback
// address). The scheme's default port counts when written
// ("http://localhost:80" is port 80), though the service URL drops it.
func localPort(hostname string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(hostname))
	if err != nil || u.Port() == "" {
		return "", false
	}
	return u.Port(), isLocalHost(strings.ToLower(u.Hostname()))
}

// dbJSON is the --json output of the `idcli server db:*` commands.
type dbJSON struct {
	Command  string `json:"command"`  // db:create, db:migrate or db:drop
	Database string `json:"database"` // the PostgreSQL database name, the SQLite file, or :memory:
	// Changed is true when the command created, dropped or migrated the
	// database, false when it already was as asked.
	Changed bool `json:"changed"`
}

// dbMigrateJSON is the --json output of `idcli server db:migrate`.
type dbMigrateJSON struct {
	dbJSON
	// Applied lists the migrations applied, oldest first.
	Applied []dbMigration `json:"applied"`
}

type dbMigration struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

func newServerDBCmd(env *cliEnv, name, help string, do func(ctx context.Context, env *cliEnv, s serverSettings, asJSON bool) error) *ffcli.Command {
	fs := newFlagSet("idcli server "+name, env)
	var f serverFlags
	f.register(fs, false)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	return &ffcli.Command{
		Name:       name,
		ShortUsage: "idcli server " + name + " [--database-url URL] [--json]",
		ShortHelp:  help,
		LongHelp:   `With --json: {"command":"` + name + `","database":NAME,"changed":true|false` + map[bool]string{true: `,"applied":[{"id","name"}…]}.`, false: `}.`}[name == "db:migrate"],
		FlagSet:    fs,
		Exec: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("server %s takes no arguments (got %q)", name, args[0])
			}
			s, err := resolveServerSettings(env, f, false)
			if err != nil {
				return err
			}
			return do(ctx, env, s, *asJSON)
		},
	}
}

func serverDBCreate(ctx context.Context, env *cliEnv, s serverSettings, asJSON bool) error {
	name, created, err := refserver.CreateDatabase(ctx, sqliteURLAbs(env, s.DatabaseURL))
	if asJSON && err == nil {
		return writeJSON(env.Stdout, dbJSON{Command: "db:create", Database: name, Changed: created}, false)
	}
	return printDBChange(env, "create", "Created", "already exists", name, created, err)
}

func serverDBDrop(ctx context.Context, env *cliEnv, s serverSettings, asJSON bool) error {
	name, dropped, err := refserver.DropDatabase(ctx, sqliteURLAbs(env, s.DatabaseURL))
	if asJSON && err == nil {
		return writeJSON(env.Stdout, dbJSON{Command: "db:drop", Database: name, Changed: dropped}, false)
	}
	return printDBChange(env, "drop", "Dropped", "does not exist", name, dropped, err)
}

// printDBChange prints what db:create or db:drop (verb) did to the
// database name: done when it changed it, else that the database already
// is as asked (asIs).
func printDBChange(env *cliEnv, verb, done, asIs, name string, changed bool, err error) error {
	switch {
	case err != nil:
		return cliDBError(err)
	case name == refserver.InMemory:
		fmt.Fprintf(env.Stdout, "Database %s lives in memory: nothing to %s\n", quoteDBName(name), verb)
	case changed:
		fmt.Fprintf(env.Stdout, "%s database %s\n", done, quoteDBName(name))
	default:
		fmt.Fprintf(env.Stdout, "Database %s %s\n", quoteDBName(name), asIs)
	}
	return nil
}

func serverDBMigrate(ctx context.Context, env *cliEnv, s serverSettings, asJSON bool) error {
	url := sqliteURLAbs(env, s.DatabaseURL)
	if !asJSON {
		return cliDBError(refserver.MigrateDatabase(ctx, url, env.Stdout))
	}
	var log bytes.Buffer
	if err := refserver.MigrateDatabase(ctx, url, &log); err != nil {
		return cliDBError(err)
	}
	name, err := refserver.DatabaseName(url)
	if err != nil {
		return cliDBError(err)
	}
	out := dbMigrateJSON{dbJSON: dbJSON{Command: "db:migrate", Database: name}, Applied: []dbMigration{}}
	for _, m := range migratedLine.FindAllStringSubmatch(log.String(), -1) {
		out.Applied = append(out.Applied, dbMigration{ID: m[1], Name: m[2]})
	}
	out.Changed = len(out.Applied) > 0
	return writeJSON(env.Stdout, out, false)
}

// migratedLine matches the line refserver.Migrate prints once a migration
// is applied: "== ID Name: migrated (0.0123s) ===…".
var migratedLine = regexp.MustCompile(`(?m)^== (\S+) (.+): migrated \(`)

func quoteDBName(name string) string { return "'" + name + "'" }

// cliDBError words a refserver database error for the command line:
// refserver names the cause and a fix in terms of DATABASE_URL; where the
// fix is an idcli command, or the --database-url flag, the CLI says so.
func cliDBError(err error) error {
	var de *refserver.DBError
	if !errors.As(err, &de) {
		return err
	}
	fix := de.Fix
	switch {
	case errors.Is(de.Kind, refserver.ErrDatabaseNotFound):
		fix = "run idcli server db:create (or fix DATABASE_URL / --database-url)"
	case errors.Is(de.Kind, refserver.ErrNotMigrated):
		fix = "run idcli server db:migrate"
	default:
		fix = strings.Replace(fix, "DATABASE_URL", "DATABASE_URL / --database-url", 1)
	}
	if fix == "" {
		return errors.New(de.Cause)
	}
	return errors.New(de.Cause + ": " + fix)
}

// sqliteURLAbs resolves the path of a relative sqlite:// URL against
// env.Dir, the command's working directory.
func sqliteURLAbs(env *cliEnv, databaseURL string) string {
	if refserver.DatabaseKind(databaseURL) != "sqlite" || env.Dir == "" {
		return databaseURL
	}
	path, err := refserver.SQLitePath(databaseURL)
	if err != nil || path == refserver.InMemory || filepath.IsAbs(path) {
		return databaseURL
	}
	return "sqlite://" + filepath.Join(env.Dir, path)
}

// startFlags are the flags of `idcli server start` beyond the shared ones.
type startFlags struct {
	replayStore    string // memory | postgres (alias database)
	rateLimit      string // "60/m", "off", …
	rateLimitBurst int
	trustedProxies string // comma-separated CIDRs or addresses
	metrics        bool
	statusPage     bool
	logLevel       string
	vestauthCompat bool
	bind           string // listen host; "" means every interface
	registration   string // open | closed | token
}

// Defaults of `idcli server start`.
const (
	defaultRateLimit      = "60/m"
	defaultRateLimitBurst = ratelimit.DefaultBurst
)

func (o *startFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.replayStore, "replay-store", "memory", "where signature nonces are remembered: memory (one instance) or postgres (the server's database, shared by every instance; alias: database)")
	fs.StringVar(&o.rateLimit, "rate-limit", defaultRateLimit, "sustained rate of registrations (POST /agents, and POST /register with --vestauth-compat) per client address, after --rate-limit-burst: N/s, N/m, N/h, or off")
	fs.IntVar(&o.rateLimitBurst, "rate-limit-burst", defaultRateLimitBurst, "registrations a client address may make at once before --rate-limit applies")
	fs.StringVar(&o.trustedProxies, "trusted-proxies", "", "comma-separated CIDRs or addresses of reverse proxies whose X-Forwarded-For names the client (default: none; the peer address is the client)")
	fs.BoolVar(&o.metrics, "metrics", true, "serve Prometheus metrics (request counts, verification outcomes, no identities) at GET /metrics on the service host (--metrics=false to disable)")
	fs.BoolVar(&o.statusPage, "status-page", false, "also serve the status page at GET /status on the service host: it shows anyone who reaches the host the top agents' identities and request counts (default off)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info (one line per request), warn or error (warn drops the per-request lines; 5xx are still logged)")
	fs.StringVar(&o.bind, "bind", "", "address to listen on, such as 127.0.0.1 for this machine only (default: every interface)")
	fs.StringVar(&o.registration, "registration", refserver.RegistrationOpen, "who may register new agents (POST /agents): open (anyone), closed (no one), or token (with an invitation token from idcli server tokens create)")
	fs.BoolVar(&o.vestauthCompat, "vestauth-compat", false, "also serve vestauth clients' POST /register and POST /rotate (rotation binds less than PUT /agents/{uid}/keys: see docs/migrating-from-vestauth.md)")
}

// parse validates the flags into the settings refserver.Open takes (all
// but the database URL, hostname and listen address); Open checks
// --replay-store.
func (o startFlags) parse() (refserver.Options, slog.Level, error) {
	ro := refserver.Options{ReplayStore: o.replayStore}
	var level slog.Level
	rate, on, err := ratelimit.ParseRate(o.rateLimit)
	if err != nil {
		return ro, level, fmt.Errorf("--rate-limit %q: want N/s, N/m, N/h (e.g. %s) or off", o.rateLimit, defaultRateLimit)
	}
	if o.rateLimitBurst < 1 {
		return ro, level, fmt.Errorf("--rate-limit-burst %d: want 1 or more", o.rateLimitBurst)
	}
	var proxies []string
	for _, p := range strings.Split(o.trustedProxies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			proxies = append(proxies, p)
		}
	}
	limit := ratelimit.Config{Rate: rate, Burst: o.rateLimitBurst, TrustedProxies: proxies}
	if !on {
		// Validate the proxies anyway, so a typo is not silent until the
		// limit is on.
		limit = ratelimit.Config{TrustedProxies: proxies}
	}
	if err := limit.Validate(); err != nil {
		return ro, level, fmt.Errorf("--trusted-proxies: %s", strings.TrimPrefix(err.Error(), "ratelimit: "))
	}
	if on {
		ro.RegisterLimit = &limit
	}
	ro.Metrics = o.metrics
	ro.StatusPage = o.statusPage
	ro.VestauthCompat = o.vestauthCompat
	switch o.registration {
	case refserver.RegistrationOpen, refserver.RegistrationClosed, refserver.RegistrationToken:
		ro.Registration = o.registration
	default:
		return ro, level, fmt.Errorf("--registration %q: want %s, %s or %s", o.registration, refserver.RegistrationOpen, refserver.RegistrationClosed, refserver.RegistrationToken)
	}
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return ro, level, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	return ro, level, nil
}

func newServerStartCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli server start", env)
	var f serverFlags
	f.register(fs, true)
	var o startFlags
	o.register(fs)
	return &ffcli.Command{
		Name:       "start",
		ShortUsage: "idcli server start [--port P] [--hostname URL] [--database-url URL] [--replay-store memory|postgres] [--rate-limit 60/m|off] [--rate-limit-burst N] [--trusted-proxies CIDR,…] [--metrics=true|false] [--status-page] [--log-level info|warn|…] [--bind ADDR] [--registration open|closed|token] [--vestauth-compat]",
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
			ro, level, err := o.parse()
			if err != nil {
				return err
			}
			s, err := resolveServerSettings(env, f, true)
			if err != nil {
				return err
			}
			ro.DatabaseURL = sqliteURLAbs(env, s.DatabaseURL)
			ro.Hostname = s.Hostname
			ro.Addr = net.JoinHostPort(o.bind, s.Port)
			// One line per request: formatted and written by a goroutine
			// of its own, never on the request path; lines that find its
			// queue full are dropped and counted in /metrics.
			logs := asynclog.New(env.Stderr, asynclog.DefaultQueue, func(w io.Writer) slog.Handler {
				return slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})
			})
			defer logs.Close()
			ro.Logger = slog.New(logs)
			ro.Configure = func(c *refserver.Config) {
				if c.Metrics != nil {
					c.Metrics.CountLogDrops(logs.Dropped)
				}
			}
			return serverStart(ctx, env, ro)
		},
	}
}

// serverStart opens the server with refserver.Open, prints where it
// listens and serves until ctx is cancelled, then shuts down gracefully
// (in-flight requests finish, up to 20 s).
func serverStart(ctx context.Context, env *cliEnv, ro refserver.Options) error {
	setServerGC(env)
	in, err := refserver.Open(ctx, ro)
	if err != nil {
		return startError(ro, err)
	}
	fmt.Fprintf(env.Stdout, "idcli server listening on %s (bound to %s)\n", in.URL, in.Addr)
	return in.Serve(ctx)
}

// startError words a failure of refserver.Open with ro for the command
// line: one line naming the cause and the fix.
func startError(ro refserver.Options, err error) error {
	_, port, _ := net.SplitHostPort(ro.Addr)
	if lerr := listenError("port "+port, "--port (or PORT)", err); lerr != nil {
		return lerr
	}
	if errors.Is(err, refserver.ErrUnknownReplayStore) {
		return fmt.Errorf("--replay-store %q: want memory or postgres", ro.ReplayStore)
	}
	return cliDBError(err)
}

// listenError words a failure to listen as one line with its fix, or
// returns nil when err is none: an address in use, or a port that needs
// privileges. what names the address ("port 3000", "--listen :80: the
// address"); fix, if not "", is where to choose another port.
func listenError(what, fix string, err error) error {
	if fix != "" {
		fix = " with " + fix
	}
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%s is already in use: stop the process using it or choose another port%s", what, fix)
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%s needs privileges: choose a port above 1023%s", what, fix)
	}
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
