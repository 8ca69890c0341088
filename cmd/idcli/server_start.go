package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/envflag"
	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware/ratelimit"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/asynclog"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// startFlags are the flags of `idcli server start` beyond the shared ones.
type startFlags struct {
	replayStore    string // memory | postgres (alias database)
	rateLimit      string // "60/m", "off", …
	rateLimitBurst int
	trustedProxies string // comma-separated CIDRs or addresses
	metricsListen  string // host:port of the metrics listener; "" means METRICS_LISTEN, then none
	statusPage     bool
	logLevel       string
	vestauthCompat bool
	bind           string // listen host; "" means every interface
	registration   string // open | closed | token
	auditRetention time.Duration
	webhooks       stringsFlag // URLs, each maybe a comma-separated list
	webhookPrivate bool
	webhookTimeout time.Duration
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
	fs.StringVar(&o.metricsListen, "metrics-listen", "", "serve Prometheus metrics (request counts, verification outcomes, no identities) at GET /metrics on this separate address, such as 127.0.0.1:9090, never on the service host (default: AGENTID_METRICS_LISTEN, METRICS_LISTEN, then off)")
	fs.BoolVar(&o.statusPage, "status-page", false, "also serve the status page at GET /status on the service host: it shows anyone who reaches the host the top agents' identities and request counts (default off)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info (one line per request), warn or error (warn drops the per-request lines; 5xx are still logged)")
	fs.StringVar(&o.bind, "bind", "", "address to listen on, such as 127.0.0.1 for this machine only (default: every interface)")
	fs.StringVar(&o.registration, "registration", refserver.RegistrationOpen, "who may register new agents (POST /agents): open (anyone), closed (no one), token (with an invitation token from idcli server tokens create), or approval (anyone, pending until idcli server agents approve)")
	fs.DurationVar(&o.auditRetention, "audit-retention", store.DefaultAuditRetention, "how long the audit trail is kept (idcli server audit); 0 keeps it for ever")
	fs.Var(&o.webhooks, "webhook", "post every change event (agent or key state) to this https URL, signed by the service key (repeatable, or comma-separated; see docs/operating.md#webhooks); a URL holding a secret (Slack, Discord) belongs in AGENTID_WEBHOOK, since a flag's value shows in the process list")
	fs.BoolVar(&o.webhookPrivate, "webhook-allow-private", false, "let --webhook URLs be plain http or private, loopback or link-local addresses (default off: refused at startup and when dialing)")
	fs.DurationVar(&o.webhookTimeout, "webhook-timeout", refserver.DefaultWebhookTimeout, "bound on one webhook delivery; an instance that dies mid-delivery delays the URL's events by three times this")
	fs.BoolVar(&o.vestauthCompat, "vestauth-compat", false, "also serve vestauth clients' POST /register and POST /rotate (rotation binds less than PUT /agents/{uid}/keys: see docs/migrating-from-vestauth.md)")
}

// parse validates the flags into the settings refserver.Open takes (all
// but the database URL, hostname and listen address); Open checks
// --replay-store.
func (o startFlags) parse() (refserver.Options, slog.Level, error) {
	ro := refserver.Options{ReplayStore: o.replayStore}
	var level slog.Level
	var errs []error // every bad flag at once
	rate, on, err := ratelimit.ParseRate(o.rateLimit)
	if err != nil {
		errs = append(errs, fmt.Errorf("--rate-limit %q: want N/s, N/m, N/h (e.g. %s) or off", o.rateLimit, defaultRateLimit))
	}
	if o.rateLimitBurst < 1 {
		errs = append(errs, fmt.Errorf("--rate-limit-burst %d: want 1 or more", o.rateLimitBurst))
	}
	var proxies []string
	for _, p := range strings.Split(o.trustedProxies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			proxies = append(proxies, p)
		}
	}
	limit := ratelimit.Config{Rate: rate, Burst: o.rateLimitBurst, TrustedProxies: proxies}
	if !on || len(errs) > 0 {
		// Validate the proxies anyway, so a typo is not silent until the
		// limit is on.
		limit = ratelimit.Config{TrustedProxies: proxies}
	}
	if err := limit.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--trusted-proxies: %s", strings.TrimPrefix(err.Error(), "ratelimit: ")))
	}
	if on {
		ro.RegisterLimit = &limit
	}
	ro.StatusPage = o.statusPage
	ro.VestauthCompat = o.vestauthCompat
	ro.AuditRetention = o.auditRetention
	ro.Webhooks, ro.WebhookAllowPrivate, ro.WebhookTimeout = o.webhooks, o.webhookPrivate, o.webhookTimeout
	if o.webhookTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--webhook-timeout %v: want a positive duration such as 10s", o.webhookTimeout))
	}
	if o.auditRetention == 0 {
		ro.AuditRetention = -1 // for ever
	}
	switch o.registration {
	case refserver.RegistrationOpen, refserver.RegistrationClosed, refserver.RegistrationToken, refserver.RegistrationApproval:
		ro.Registration = o.registration
	default:
		errs = append(errs, fmt.Errorf("--registration %q: want %s, %s, %s or %s", o.registration, refserver.RegistrationOpen, refserver.RegistrationClosed, refserver.RegistrationToken, refserver.RegistrationApproval))
	}
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel))
	}
	return ro, level, errors.Join(errs...)
}

func newServerStartCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli server start", env)
	var f serverFlags
	f.register(fs, true)
	var o startFlags
	o.register(fs)
	return withServerEnv(env, &ffcli.Command{
		Name:       "start",
		ShortUsage: "idcli server start [--port P] [--hostname URL] [--database-url URL] [--replay-store memory|postgres] [--rate-limit 60/m|off] [--rate-limit-burst N] [--trusted-proxies CIDR,…] [--metrics-listen ADDR] [--status-page] [--log-level info|warn|…] [--bind ADDR] [--registration open|closed|token] [--vestauth-compat] [--audit-retention 8760h] [--webhook URL]… [--webhook-allow-private] [--webhook-timeout 10s]",
		ShortHelp:  "run the reference server until SIGINT/SIGTERM",
		LongHelp: "Runs the reference server. Several instances behind a load balancer share one\n" +
			"database: start each with --replay-store postgres so a nonce accepted by one is\n" +
			"refused by all. Registration (POST /agents) is limited per client address\n" +
			"(default " + defaultRateLimit + ", burst " + fmt.Sprint(defaultRateLimitBurst) + "; 429 rate_limited with Retry-After). Behind a\n" +
			"reverse proxy, list it in --trusted-proxies so its X-Forwarded-For names the\n" +
			"client; otherwise every client shares the proxy's limit. Each flag may be set\n" +
			"by the AGENTID_ variable its help names, in the environment or ./.env; a flag\n" +
			"on the command line wins.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			if err := noArgs("server start", args); err != nil {
				return err
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
			if ro.MetricsListen, err = metricsListen(env, o.metricsListen); err != nil {
				return err
			}
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
	})
}

// serverStart opens the server with refserver.Open, prints where it
// listens and serves until ctx is cancelled, then shuts down gracefully
// (in-flight requests finish, up to 20 s).
func serverStart(ctx context.Context, env *cliEnv, ro refserver.Options) error {
	setServerGC(env)
	stopTelemetry, err := startTelemetry(ctx, env, "agentid")
	if err != nil {
		return err
	}
	defer stopTelemetry()
	in, err := refserver.Open(ctx, ro)
	if err != nil {
		return startError(ro, err)
	}
	fmt.Fprintf(env.Stdout, "idcli server listening on %s (bound to %s)\n", in.URL, in.Addr)
	if in.MetricsAddr != nil {
		fmt.Fprintf(env.Stdout, "idcli server metrics on http://%s/metrics\n", in.MetricsAddr)
	}
	return in.Serve(ctx)
}

// metricsListen resolves the metrics address: the --metrics-listen flag
// (or AGENTID_METRICS_LISTEN), else METRICS_LISTEN from the environment,
// else from ./.env; "" for none. It must be host:port (the host may be
// empty: every interface).
func metricsListen(env *cliEnv, flagValue string) (string, error) {
	addr, source := flagValue, "--metrics-listen"
	if addr == "" {
		src, err := serverEnv(env)
		if err != nil {
			return "", err
		}
		var name, where string
		addr, name, where = envflag.First(src, "METRICS_LISTEN")
		source = name + where + " (--metrics-listen)"
	}
	if addr == "" {
		return "", nil
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" || strings.Contains(addr, "/") {
		return "", fmt.Errorf("%s %q: want host:port, such as 127.0.0.1:9090", source, addr)
	}
	return addr, nil
}

// startError words a failure of refserver.Open with ro for the command
// line: one line naming the cause and the fix.
func startError(ro refserver.Options, err error) error {
	_, port, _ := net.SplitHostPort(ro.Addr)
	if errors.Is(err, refserver.ErrMetricsListen) {
		if lerr := listenError("--metrics-listen "+ro.MetricsListen, "--metrics-listen (or METRICS_LISTEN)", err); lerr != nil {
			return lerr
		}
		return fmt.Errorf("--metrics-listen: %s", strings.TrimPrefix(err.Error(), "refserver: "))
	}
	if lerr := listenError("port "+port, "--port (or PORT)", err); lerr != nil {
		return lerr
	}
	if errors.Is(err, refserver.ErrWebhookURL) {
		msg := "--webhook: " + strings.TrimPrefix(err.Error(), "refserver: ")
		if errors.Is(err, keyfetch.ErrPrivateAddress) || strings.Contains(msg, "plain http") {
			msg += " (--webhook-allow-private allows it, for local development or a receiver on your own network)"
		}
		return errors.New(msg)
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
// GOGC variable is unset. The server's live heap is small, so letting the
// heap grow to five times the live heap before collecting, instead of
// twice, costs little memory and raises /whoami throughput: less GC work
// competes with Ed25519 (docs/benchmarks.md has the measurement).
const serverGCPercent = 400

func setServerGC(env *cliEnv) {
	if env.Getenv("GOGC") == "" {
		debug.SetGCPercent(serverGCPercent)
	}
}
