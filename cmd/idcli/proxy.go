package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/agentid/agentid/cmd/idcli/internal/accesslog"
	"github.com/agentid/agentid/cmd/idcli/internal/otelsetup"
	"github.com/agentid/agentid/middleware/proxy/proxyconfig"
	"github.com/agentid/agentid/signer/redact"
)

// Defaults of `idcli proxy`.
const (
	// proxyShutdownTimeout bounds the graceful stop: requests in flight
	// finish (upstream answers included) for up to this long.
	proxyShutdownTimeout = 20 * time.Second
	// proxyReadHeaderTimeout bounds how long a client may take to send its
	// request headers.
	proxyReadHeaderTimeout = 10 * time.Second
	// telemetryFlushTimeout bounds the export of the last spans and
	// metrics at exit.
	telemetryFlushTimeout = 5 * time.Second
)

const proxyUsage = "idcli proxy (--upstream URL | --forward-auth --front nginx|traefik|caddy [--forward-auth-from CIDR…]) --authority HOST… --trust PATTERN… [--agentid-service URL…] [--registry URL…] [--config FILE [--check]] [--listen ADDR] [--mode required|optional|observe] [--allow-http] [--allow-private] [--redis-url URL] [--metrics-listen ADDR] [--access-log stdout|stderr|off] [--refusal-status 401|403] [--profile deployed|strict-01] [--upstream-max-idle N] [--log-level info|debug|…] [--cache-key-sets N] [--cache-key-sets-on-probation N] [--cache-key-sets-per-site N|-1] [--cache-signature-agents N|-1] [--cache-expanded-keys N|-1]"

// proxyFlags are the flags of `idcli proxy`. Each setting flag records
// the values given; they go onto the configuration model
// (proxyconfig.Config) over the --config file's.
type proxyFlags struct {
	settings map[string]*settingFlag // by flag name
	config   string                  // --config (proxy_config.go)
	check    bool                    // --check
}

// settingFlag records the values a setting flag was given.
type settingFlag struct {
	def    string
	isBool bool
	values []string
}

func (s *settingFlag) String() string {
	if s == nil {
		return ""
	}
	return s.def
}
func (s *settingFlag) Set(v string) error { s.values = append(s.values, v); return nil }
func (s *settingFlag) IsBoolFlag() bool   { return s.isBool }

func (f *proxyFlags) register(fs *flag.FlagSet) {
	f.settings = map[string]*settingFlag{}
	def := proxyconfig.Default()
	add := func(name, usage string) {
		sf := &settingFlag{isBool: proxyconfig.IsBoolFlag(name), def: def.FlagDefault(name)}
		f.settings[name] = sf
		fs.Var(sf, name, usage)
	}
	add("listen", "address to listen on, host:port (port 0 picks a free port; the banner names it)")
	add("upstream", "URL of the service to forward verified requests to, e.g. http://127.0.0.1:8000")
	add("forward-auth", "answer auth subrequests (nginx auth_request, Traefik ForwardAuth, Caddy forward_auth) instead of forwarding; needs --front")
	add("front", "with --forward-auth: the proxy in front, whose headers alone describe the original request: nginx (X-Original-Method, X-Original-URI, Host), traefik or caddy (X-Forwarded-Method, -Uri, -Host, -Proto)")
	add("forward-auth-from", "with --forward-auth: address or CIDR of the front proxy, whose subrequests alone are answered (repeatable or comma-separated; default 127.0.0.0/8 and ::1)")
	add("agentid-service", "base URL of an agentid service, such as https://agentid.example: its agents (<uid>.<host>) get X-Agent-Uid (repeatable; others get X-Agent-Id only)")
	add("upstream-max-idle", "idle connections kept open to the upstream for reuse; at least the number of requests in flight at once")
	add("mode", "required (refuse unsigned and invalid requests), optional (forward unsigned ones too) or observe (forward everything with its verdict)")
	add("authority", "host[:port] (or *.suffix) the proxied service answers for; a signature made for any other host is refused with 421 (repeatable or comma-separated; at least one)")
	add("trust", "host whose agents' key sets may be fetched: exact host[:port] or *.suffix (repeatable; at least one)")
	add("registry", "URL of a registry: a plain-text list of Signature Agent Card URLs whose agents are trusted too, refreshed every 15 minutes; its own host must be trusted by --trust (repeatable)")
	add("allow-http", "fetch key sets of http:// signature agents (local development only)")
	add("allow-private", "fetch key sets from loopback and private addresses, and resolve *.localhost to loopback (local development only)")
	add("redis-url", "remember nonces in Redis, shared by every proxy instance: redis://[:PASSWORD@]HOST:PORT[/DB], or HOST:PORT,HOST:PORT,… for a Redis Cluster (default: in memory)")
	add("metrics-listen", "serve Prometheus metrics at GET /metrics and the status page at GET /status on this separate address, such as 127.0.0.1:9090 (default: off)")
	add("access-log", "where the JSON access log goes, one line per request: stdout, stderr or off")
	add("refusal-status", "status of refused requests: 401, or 403 as web-bot-auth protocol-01 describes")
	add("profile", "how Signature-Agent is read: deployed (every form deployed signers send) or strict-01 (web-bot-auth protocol-01 exactly: the member keyed by the label, covered, fetched as sent)")
	add("log-level", "level of the operational log on stderr: debug (key fetches, each refusal), info, warn or error")
	add("cache-key-sets", "admitted key sets kept (those a signature verified with); beyond, the least recently used are evicted, and their agents' next requests fetch them again (1 to 1000000)")
	add("cache-key-sets-on-probation", "key sets kept that were fetched but have not verified a signature yet; they never evict an admitted one (1 to 1000000; default: as many as --cache-key-sets)")
	add("cache-key-sets-per-site", "admitted key sets one site (a host, or the label under a *.suffix trusted) may hold, so that one agent cannot fill the cache (1 to 1000000, or -1 for no cap)")
	add("cache-signature-agents", "parsed Signature-Agent values kept: at least the number of agents signing requests here, or their values are parsed again (about 0.4 to 1.1 KB each; -1: none)")
	add("cache-expanded-keys", "expanded Ed25519 keys kept for the agents verifying most often (about 1.7 KB each; -1: none, about 10% more CPU per request)")
	registerProxyConfig(fs, f)
}

// newProxyCmd is `idcli proxy`: the verification middleware in front of a
// service written in anything, as a reverse proxy or a forward-auth
// endpoint (package middleware/proxy).
func newProxyCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli proxy", env)
	var f proxyFlags
	f.register(fs)
	return &ffcli.Command{
		Name:       "proxy",
		ShortUsage: proxyUsage,
		ShortHelp:  "verify agents in front of any service: a reverse proxy or a forward-auth endpoint",
		LongHelp: "Verifies every request's web-bot-auth signature, fetching the agents' keys\n" +
			"from their key sets (only from --trust hosts), and passes the outcome on in\n" +
			"X-Agent-* headers: X-Agent-Verdict (verified, invalid or unverified), and for\n" +
			"a verified request X-Agent-Id (the identity), X-Agent-Uid (agents of an\n" +
			"agentid service) and X-Agent-Key-Id; an invalid one gets X-Agent-Reason (the\n" +
			"error code). Every X-Agent-* header a client sends, in any spelling (any\n" +
			"case, _ for -), is removed, and the proxy's own are set after the\n" +
			"hop-by-hop headers are removed, so Connection cannot name them.\n" +
			"\n" +
			"With --upstream, verified requests are forwarded there (required mode);\n" +
			"optional mode also forwards unsigned ones, observe mode everything. A\n" +
			"refused request gets 401 (403 with --refusal-status 403) with a JSON error\n" +
			"body and never reaches the upstream. A replayed signature is refused in\n" +
			"required and optional modes (and marked invalid in observe mode).\n" +
			"\n" +
			"With --forward-auth there is no upstream: each request is an auth\n" +
			"subrequest describing the original one, read only from the headers of the\n" +
			"--front proxy (nginx: X-Original-Method, X-Original-URI and Host; traefik\n" +
			"and caddy: X-Forwarded-Method, -Proto, -Host and -Uri; all: the client's\n" +
			"address as the last X-Forwarded-For entry) and answered only from\n" +
			"--forward-auth-from addresses (default loopback); the answer is 200\n" +
			"with the X-Agent-* headers, or the refusal (its JSON body also in\n" +
			"X-Agent-Refusal, for nginx; nginx gets a status other than 401 and 403 as\n" +
			"403 with X-Agent-Refusal-Status). A request carrying X-Agent-* headers, which a\n" +
			"forward-auth endpoint cannot remove, is refused in every mode, and so is a\n" +
			"signature covering content-digest (no body is seen; observe mode: marked\n" +
			"invalid).\n" +
			"\n" +
			"In both roles a path that is not normal (a . or .. segment, //, an encoded\n" +
			"/ or ., a backslash, ;) is refused with 400 invalid_request: the path a\n" +
			"route matched is the path forwarded.\n" +
			"\n" +
			"X-Agent-Uid is set only for agents of an --agentid-service. The access log\n" +
			"is JSON lines on stdout; the banner and operational log go to stderr.\n" +
			"\n" +
			"Every flag is also a key of the --config YAML file (flags win); the file\n" +
			"adds per-route modes, allow and deny lists and rate limits. --check\n" +
			"validates it all, prints the effective configuration (secrets masked) and\n" +
			"exits. SIGHUP rereads the file and applies its mode, routes, lists and\n" +
			"limits (requests in flight finish under the old ones), or refuses it as a\n" +
			"whole and logs why: a file that would not start, does not end with a\n" +
			"newline (cut short while written), leaves out a key the file in force\n" +
			"sets (clear one with an explicit [] or \"\"), or changes a key that needs a\n" +
			"restart.\n" +
			"\n" +
			"Runs until SIGINT/SIGTERM, then finishes the requests in flight.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("proxy takes no arguments (got %q): see idcli proxy --help", args[0])
			}
			cfg, err := f.resolve(env)
			if err != nil {
				return err
			}
			if f.check {
				return checkProxyConfig(env, cfg)
			}
			return runProxy(ctx, env, f, cfg)
		},
	}
}

// runProxy builds the proxy of cfg, listens, prints the banner and serves
// until ctx ends; with --config, SIGHUP reloads the file's rules.
func runProxy(ctx context.Context, env *cliEnv, f proxyFlags, cfg *proxyconfig.Config) error {
	stopTelemetry, err := startTelemetry(ctx, env, "agentid-proxy")
	if err != nil {
		return err
	}
	defer stopTelemetry()
	p, err := proxyconfig.Build(ctx, cfg, proxyconfig.Options{
		Stdout: env.Stdout, Stderr: env.Stderr,
		AccessLogHandler: func(w io.Writer) slog.Handler {
			return accesslog.New(w) // slog's JSON lines, formatted for less CPU
		},
		Reloadable:  f.config != "",
		StatusTitle: "idcli proxy status",
	})
	if err != nil {
		return err
	}
	defer p.Close() // once the servers have stopped: writes out the access log
	logger := p.Logger()

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return proxyListenError("--listen", cfg.Listen, err)
	}
	servers := []*http.Server{newProxyServer(p.Handler(), logger)}
	listeners := []net.Listener{ln}
	if m := p.Metrics(); m != nil {
		mln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			ln.Close()
			return proxyListenError("--metrics-listen", cfg.MetricsListen, err)
		}
		servers = append(servers, newProxyServer(m, logger))
		listeners = append(listeners, mln)
	}

	printProxyBanner(env, cfg, ln.Addr().String())
	for _, l := range p.Summary() {
		fmt.Fprintln(env.Stderr, l)
	}
	if len(listeners) > 1 {
		fmt.Fprintf(env.Stderr, "• metrics at http://%s/metrics\n", listeners[1].Addr())
		fmt.Fprintf(env.Stderr, "• status page at http://%s/status\n", listeners[1].Addr())
	}
	if f.config != "" {
		stop := reloadOnHangup(ctx, env, f, p)
		defer stop()
	}
	return serveUntilDone(ctx, servers, listeners)
}

// startTelemetry sets the OpenTelemetry providers from the OTEL_*
// variables when an OTLP endpoint is set (package otelsetup; service is
// the default service.name) and returns what flushes them, waiting up to
// telemetryFlushTimeout.
func startTelemetry(ctx context.Context, env *cliEnv, service string) (stop func(), err error) {
	shutdown, err := otelsetup.Start(ctx, env.Getenv, service)
	if err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), telemetryFlushTimeout)
		defer cancel()
		shutdown(sctx)
	}, nil
}

func newProxyServer(h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: proxyReadHeaderTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// serveUntilDone serves each server on its listener until ctx ends (then
// shuts them down gracefully) or one of them fails.
func serveUntilDone(ctx context.Context, servers []*http.Server, listeners []net.Listener) error {
	served := make(chan error, len(servers))
	for i, hs := range servers {
		go func() { served <- hs.Serve(listeners[i]) }()
	}
	var failed error
	select {
	case failed = <-served:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), proxyShutdownTimeout)
	defer cancel()
	var errs []error
	for _, hs := range servers {
		if err := hs.Shutdown(sctx); err != nil {
			hs.Close()
			errs = append(errs, fmt.Errorf("proxy: shutdown: %w", err))
		}
	}
	remaining := len(servers)
	if failed != nil {
		remaining--
		if !errors.Is(failed, http.ErrServerClosed) {
			errs = append([]error{fmt.Errorf("proxy: serve: %w", failed)}, errs...)
		}
	}
	for range remaining {
		<-served
	}
	return errors.Join(errs...)
}

// proxyListenError words a failure to listen on the address of a flag as
// one line (with its fix, see listenError).
func proxyListenError(flagName, addr string, err error) error {
	if lerr := listenError(flagName+" "+addr+": the address", "", err); lerr != nil {
		return lerr
	}
	return fmt.Errorf("%s %s: %v", flagName, addr, err)
}

// printProxyBanner names, on stderr (stdout is the JSON access log), where
// the proxy listens and what it forwards to; the proxy's Summary follows.
func printProxyBanner(env *cliEnv, cfg *proxyconfig.Config, addr string) {
	target := "(forward-auth behind " + strings.ToLower(cfg.Front) + ": answers auth subrequests with 200 or " + strconv.Itoa(cfg.RefusalStatus) + ")"
	if !cfg.ForwardAuth {
		target = "→ upstream " + redact.URL(cfg.Upstream)
	}
	fmt.Fprintf(env.Stderr, "idcli proxy listening on http://%s %s\n", addr, target)
}
