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
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/middleware/asynclog"
	"github.com/agentid/agentid/middleware/metrics"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/signer"
)

// Defaults of `idcli proxy`.
const (
	defaultProxyListen = ":8080"
	// proxyShutdownTimeout bounds the graceful stop: requests in flight
	// finish (upstream answers included) for up to this long.
	proxyShutdownTimeout = 20 * time.Second
	// proxyReadHeaderTimeout bounds how long a client may take to send its
	// request headers.
	proxyReadHeaderTimeout = 10 * time.Second
)

const proxyUsage = "idcli proxy (--upstream URL | --forward-auth --front nginx|traefik|caddy [--forward-auth-from CIDR…]) --authority HOST… --trust PATTERN… [--agentid-service URL…] [--registry URL…] [--config FILE] [--listen ADDR] [--mode required|optional|observe] [--allow-http] [--allow-private] [--redis-url URL] [--metrics-listen ADDR] [--access-log stdout|stderr|off] [--refusal-status 401|403] [--profile deployed|strict-01] [--upstream-max-idle N] [--log-level info|debug|…]"

// proxyFlags are the flags of `idcli proxy`.
type proxyFlags struct {
	listen, upstream, mode, redisURL     string
	metricsListen, accessLog, logLevel   string
	forwardAuth, allowHTTP, allowPrivate bool
	trust, authority                     stringsFlag
	registries                           stringsFlag
	refusalStatus                        int
	front                                string
	forwardAuthFrom, services            stringsFlag
	upstreamMaxIdle                      int
	profile                              string
	config                               string      // --config (proxy_config.go)
	rules                                *proxyRules // from --config
}

func (f *proxyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", defaultProxyListen, "address to listen on, host:port (port 0 picks a free port; the banner names it)")
	fs.StringVar(&f.upstream, "upstream", "", "URL of the service to forward verified requests to, e.g. http://127.0.0.1:8000")
	fs.BoolVar(&f.forwardAuth, "forward-auth", false, "answer auth subrequests (nginx auth_request, Traefik ForwardAuth, Caddy forward_auth) instead of forwarding; needs --front")
	fs.StringVar(&f.front, "front", "", "with --forward-auth: the proxy in front, whose headers alone describe the original request: nginx (X-Original-Method, X-Original-URI, Host), traefik or caddy (X-Forwarded-Method, -Uri, -Host, -Proto)")
	fs.Var(&f.forwardAuthFrom, "forward-auth-from", "with --forward-auth: address or CIDR of the front proxy, whose subrequests alone are answered (repeatable or comma-separated; default 127.0.0.0/8 and ::1)")
	fs.Var(&f.services, "agentid-service", "base URL of an agentid service, such as https://agentid.example: its agents (<uid>.<host>) get X-Agent-Uid (repeatable; others get X-Agent-Id only)")
	fs.IntVar(&f.upstreamMaxIdle, "upstream-max-idle", proxy.DefaultMaxIdleConnsPerHost, "idle connections kept open to the upstream for reuse; at least the number of requests in flight at once")
	fs.StringVar(&f.mode, "mode", "required", "required (refuse unsigned and invalid requests), optional (forward unsigned ones too) or observe (forward everything with its verdict)")
	fs.Var(&f.authority, "authority", "host[:port] (or *.suffix) the proxied service answers for; a signature made for any other host is refused with 421 (repeatable or comma-separated; at least one)")
	fs.Var(&f.trust, "trust", "host whose agents' key sets may be fetched: exact host[:port] or *.suffix (repeatable; at least one)")
	fs.Var(&f.registries, "registry", "URL of a registry: a plain-text list of Signature Agent Card URLs whose agents are trusted too, refreshed every 15 minutes; its own host must be trusted by --trust (repeatable)")
	fs.BoolVar(&f.allowHTTP, "allow-http", false, "fetch key sets of http:// signature agents (local development only)")
	fs.BoolVar(&f.allowPrivate, "allow-private", false, "fetch key sets from loopback and private addresses, and resolve *.localhost to loopback (local development only)")
	fs.StringVar(&f.redisURL, "redis-url", "", "remember nonces in Redis, shared by every proxy instance: redis://[:PASSWORD@]HOST:PORT[/DB], or HOST:PORT,HOST:PORT,… for a Redis Cluster (default: in memory)")
	fs.StringVar(&f.metricsListen, "metrics-listen", "", "serve Prometheus metrics at GET /metrics on this separate address, such as 127.0.0.1:9090 (default: off)")
	fs.StringVar(&f.accessLog, "access-log", "stdout", "where the JSON access log goes, one line per request: stdout, stderr or off")
	fs.IntVar(&f.refusalStatus, "refusal-status", http.StatusUnauthorized, "status of refused requests: 401, or 403 as web-bot-auth protocol-01 describes")
	fs.StringVar(&f.profile, "profile", "deployed", "how Signature-Agent is read: deployed (every form deployed signers send) or strict-01 (web-bot-auth protocol-01 exactly: the member keyed by the label, covered, fetched as sent)")
	fs.StringVar(&f.logLevel, "log-level", "info", "level of the operational log on stderr: debug (key fetches, each refusal), info, warn or error")
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
			"Runs until SIGINT/SIGTERM, then finishes the requests in flight.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("proxy takes no arguments (got %q): see idcli proxy --help", args[0])
			}
			if err := loadProxyConfig(env, fs, &f); err != nil {
				return err
			}
			return runProxy(ctx, env, f)
		},
	}
}

// proxyPlan is what the flags resolve to, before anything listens.
type proxyPlan struct {
	mode        middleware.Mode
	profile     middleware.Profile
	authorities []string
	upstream    *url.URL    // nil with --forward-auth
	front       proxy.Front // "" without --forward-auth
	from        []netip.Prefix
	keys        keyfetch.Config
	level       slog.Level
	access      io.Writer // nil: no access log
}

// plan validates the flags that need no I/O. Every error is one line naming
// the flag.
func (f proxyFlags) plan(env *cliEnv) (proxyPlan, error) {
	var p proxyPlan
	var err error
	if p.mode, err = parseMode(f.mode); err != nil {
		return p, err
	}
	switch f.profile {
	case middleware.ProfileDeployed.String():
	case middleware.ProfileStrict01.String():
		p.profile = middleware.ProfileStrict01
	default:
		return p, fmt.Errorf("--profile %q: want deployed or strict-01", f.profile)
	}
	switch {
	case f.forwardAuth && f.upstream != "":
		return p, errors.New("--upstream and --forward-auth exclude each other: a reverse proxy forwards to its upstream, a forward-auth endpoint only answers the auth subrequests of nginx, Traefik or Caddy")
	case !f.forwardAuth && f.upstream == "":
		return p, errors.New("--upstream URL is required (the service to forward verified requests to), or --forward-auth")
	case !f.forwardAuth:
		if p.upstream, err = parseUpstream(f.upstream); err != nil {
			return p, err
		}
		if f.front != "" || len(f.forwardAuthFrom) > 0 {
			return p, errors.New("--front and --forward-auth-from are for --forward-auth: a reverse proxy (--upstream) has no front proxy to trust")
		}
	default:
		if p.front, err = parseFront(f.front); err != nil {
			return p, err
		}
		if p.from, err = parsePrefixes(f.forwardAuthFrom); err != nil {
			return p, err
		}
	}
	for _, s := range f.services {
		if _, err := signer.ParseServiceURL(s); err != nil {
			return p, fmt.Errorf("--agentid-service: %s", strings.TrimPrefix(err.Error(), "signer: "))
		}
	}
	if f.upstreamMaxIdle < 1 {
		return p, fmt.Errorf("--upstream-max-idle %d: want at least 1", f.upstreamMaxIdle)
	}
	for _, a := range f.authority {
		for _, h := range strings.Split(a, ",") {
			if h = strings.TrimSpace(h); h != "" {
				p.authorities = append(p.authorities, h)
			}
		}
	}
	if len(p.authorities) == 0 {
		return p, errors.New("--authority is required: name the host[:port] clients reach the service at, e.g. --authority api.example.com (repeatable or comma-separated); a signature made for any other host is refused")
	}
	if err := (middleware.Config{Keys: middleware.NewStaticKeys(), Authorities: p.authorities}).Validate(); err != nil {
		return p, fmt.Errorf("--authority: %s", strings.TrimPrefix(err.Error(), "middleware: Config.Authorities: "))
	}
	if len(f.trust) == 0 {
		return p, errors.New("--trust is required: name the hosts whose agents you accept, e.g. --trust '*.agentid.example' (repeatable)")
	}
	p.keys = keyfetch.Config{
		TrustedHosts:         []string(f.trust),
		AllowHTTP:            f.allowHTTP,
		AllowPrivateNetworks: f.allowPrivate,
		Registries:           []string(f.registries),
	}
	if err := p.keys.Validate(); err != nil {
		return p, fmt.Errorf("--trust: %s", strings.TrimPrefix(err.Error(), "keyfetch: invalid config: "))
	}
	if f.refusalStatus != http.StatusUnauthorized && f.refusalStatus != http.StatusForbidden {
		return p, fmt.Errorf("--refusal-status %d: want 401 or 403", f.refusalStatus)
	}
	if err := p.level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return p, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	switch f.accessLog {
	case "stdout":
		p.access = env.Stdout
	case "stderr":
		p.access = env.Stderr
	case "off", "":
	default:
		return p, fmt.Errorf("--access-log %q: want stdout, stderr or off", f.accessLog)
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return p, fmt.Errorf("--listen %q: want host:port, such as 127.0.0.1:8080 or :8080", f.listen)
	}
	if f.metricsListen != "" {
		if _, _, err := net.SplitHostPort(f.metricsListen); err != nil {
			return p, fmt.Errorf("--metrics-listen %q: want host:port, such as 127.0.0.1:9090", f.metricsListen)
		}
	}
	return p, nil
}

// parseMode reads --mode.
func parseMode(s string) (middleware.Mode, error) {
	for _, m := range []middleware.Mode{middleware.Required, middleware.Optional, middleware.Observe} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("--mode %q: want required, optional or observe", s)
}

// parseFront reads --front, which --forward-auth needs: the forward-auth
// endpoint believes only the headers of the proxy in front of it.
func parseFront(s string) (proxy.Front, error) {
	if s == "" {
		return "", errors.New("--forward-auth needs --front nginx, traefik or caddy: the original request is read only from the headers that proxy sets")
	}
	for _, f := range proxy.Fronts {
		if strings.EqualFold(s, string(f)) {
			return f, nil
		}
	}
	return "", fmt.Errorf("--front %q: want nginx, traefik or caddy", s)
}

// parsePrefixes reads --forward-auth-from: addresses or CIDRs, each flag
// value possibly comma-separated. None means nil (loopback).
func parsePrefixes(values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			p, err := agentlimit.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("--forward-auth-from %w", err)
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// parseUpstream reads --upstream: an absolute http(s) URL; a path, if any,
// prefixes every forwarded path.
func parseUpstream(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "" {
		return nil, fmt.Errorf("--upstream %q: want an http:// or https:// URL such as http://127.0.0.1:8000%s", s, schemeHint(s))
	}
	return u, nil
}

// runProxy builds the verifier and the proxy, listens, prints the banner
// and serves until ctx ends.
func runProxy(ctx context.Context, env *cliEnv, f proxyFlags) error {
	p, err := f.plan(env)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: p.level}))
	p.keys.Logger = logger.With("component", "keyfetch")

	replay, replayName, closeReplay, err := proxyReplayStore(ctx, f.redisURL)
	if err != nil {
		return err
	}
	defer closeReplay()

	keys := keyfetch.New(p.keys)
	watch, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go keys.WatchRegistries(watch) // returns at once without --registry
	vc := middleware.Config{
		Keys:          keys,
		Authorities:   p.authorities,
		Mode:          p.mode,
		Profile:       p.profile,
		Replay:        replay,
		RefusalStatus: f.refusalStatus,
		Logger:        logger.With("component", "verifier"),
	}
	var reg *metrics.Registry
	if f.metricsListen != "" {
		reg = metrics.NewRegistry()
		vc.OnResult = reg.ObserveResult // verification outcomes
	}
	owner, err := newProxyOwner(f, p, &vc, keys.AgentName) // --config rules (proxy_config.go)
	if err != nil {
		return err
	}
	verifier, err := middleware.NewVerifier(vc)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	cfg := proxy.Config{
		Verifier: verifier, Upstream: p.upstream, ForwardAuth: p.front, ForwardAuthFrom: p.from,
		Services: []string(f.services),
		// The default transport reaches the upstream directly, never
		// through an HTTP_PROXY meant for outbound traffic, and keeps
		// this many connections to it for reuse.
		MaxIdleConnsPerHost: f.upstreamMaxIdle,
		AgentCard:           keys.AgentName, // agent_name, agent_purpose in the access log
	}
	if reg != nil {
		cfg.Metrics = reg // answers
	}
	if p.access != nil {
		// Formatted and written by a goroutine of its own, off the request
		// path; lines that find its queue full are dropped and counted in
		// /metrics. Close writes out what is queued once the servers have
		// stopped.
		logs := asynclog.New(p.access, asynclog.DefaultQueue, func(w io.Writer) slog.Handler {
			return newAccessLogHandler(w) // slog's JSON lines, formatted for less CPU
		})
		defer logs.Close()
		cfg.AccessLog = slog.New(logs)
		if reg != nil {
			reg.CountLogDrops(logs.Dropped)
		}
	}
	owner.decide(&cfg, verifier)
	h, err := proxy.New(cfg)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}

	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return proxyListenError("--listen", f.listen, err)
	}
	servers := []*http.Server{newProxyServer(h, logger)}
	listeners := []net.Listener{ln}
	if reg != nil {
		mln, err := net.Listen("tcp", f.metricsListen)
		if err != nil {
			ln.Close()
			return proxyListenError("--metrics-listen", f.metricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", reg.Handler())
		owner.routes(mux) // /status
		servers = append(servers, newProxyServer(mux, logger))
		listeners = append(listeners, mln)
	}

	printProxyBanner(env, f, p, ln.Addr().String(), replayName)
	owner.banner(env)
	if reg != nil {
		fmt.Fprintf(env.Stderr, "• metrics at http://%s/metrics\n", listeners[1].Addr())
		fmt.Fprintf(env.Stderr, "• status page at http://%s/status\n", listeners[1].Addr())
	}
	return serveUntilDone(ctx, servers, listeners)
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
// the proxy listens, what it forwards to, the mode and whom it trusts.
func printProxyBanner(env *cliEnv, f proxyFlags, p proxyPlan, addr, replayName string) {
	target := "(forward-auth behind " + string(p.front) + ": answers auth subrequests with 200 or " + strconv.Itoa(f.refusalStatus) + ")"
	if p.upstream != nil {
		target = "→ upstream " + p.upstream.String()
	}
	fmt.Fprintf(env.Stderr, "idcli proxy listening on http://%s %s\n", addr, target)
	local := ""
	if f.allowHTTP {
		local += "; http:// key sets allowed"
	}
	if f.allowPrivate {
		local += "; private addresses allowed"
	}
	if len(f.services) > 0 {
		local += "; X-Agent-Uid for agents of " + strings.Join(f.services, ", ")
	}
	if p.front != "" {
		from := "loopback"
		if len(p.from) > 0 {
			from = fmt.Sprint(p.from)
		}
		local += "; subrequests from " + from
	}
	fmt.Fprintf(env.Stderr, "• mode %s; serving %s; trusting %s; nonces in %s%s\n", p.mode, strings.Join(p.authorities, ", "), strings.Join(f.trust, ", "), replayName, local)
}
