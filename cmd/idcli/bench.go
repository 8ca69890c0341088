package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/hint"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
	"github.com/peterbourgon/ff/v3/ffcli"
	"golang.org/x/sync/errgroup"
)

// Bench targets.
const (
	benchWhoami    = "whoami"
	benchRegister  = "register"
	benchDirectory = "directory"
	benchAll       = "all"
)

var benchTargets = []string{benchWhoami, benchRegister, benchDirectory}

// benchConfig is what `idcli bench` runs.
type benchConfig struct {
	// URL is the service base URL (its HOSTNAME), e.g. http://localhost:3000.
	URL string
	// Connect is the host:port every connection dials (agent hosts
	// included). If "", the URL's host and port.
	Connect string
	// Duration bounds each target's run; 0 means no time bound.
	Duration time.Duration
	// Requests bounds each target's request count; 0 means no count bound.
	Requests int64
	// Concurrency is the number of workers (and connections).
	Concurrency int
	// Targets run one after another.
	Targets []string
	// Timeout bounds one request.
	Timeout time.Duration
	// Rate, if positive, is the open loop's arrival rate in requests per
	// second: request i is due at start + i/Rate whether or not earlier
	// ones have been answered, and its latency is measured from that
	// scheduled time. Concurrency then caps the requests in flight. If 0,
	// the closed loop: each worker sends its next request when the last is
	// answered.
	Rate float64
	// Credentials, if set, is the agent whose key signs /whoami (an agent
	// registered beforehand, e.g. with `vestauth agent init`), instead of a
	// bench agent registered with POST /agents.
	Credentials *agent.Credentials
	// Legacy signs /whoami in the pre-protocol-01 shape (the Signature-Agent
	// member not covered), which vestauth 0.21.1's server needs.
	Legacy bool
	// Presign is how many /whoami requests are signed before the timed
	// phase (each with its own nonce, so replay protection stays on); the
	// run signs more inside the loop if it uses them up. 0 signs every
	// request inside the loop, as a real client does.
	Presign int
	// Agents spreads /whoami over this many registered agents (the bench
	// agent and Agents-1 more registered before the run): the whoami
	// target then runs twice, signed by the bench agent alone, then by the
	// Agents round-robin, each request uniquely signed. 0 or 1: one agent.
	Agents int
	// Progress, if not nil, receives a line about the run at least once a
	// second (ProgressEvery).
	Progress io.Writer
	// ProgressEvery is the interval of the progress lines; 0 means 1 s.
	ProgressEvery time.Duration
	// MetricsURL, if set, is the server's Prometheus metrics (served on
	// its --metrics-listen address, e.g. http://127.0.0.1:9090/metrics),
	// read before and after runs for the key-cache hit rate and memory. If
	// "", those figures are left out.
	MetricsURL string
	// DB, if not nil, is the server's database: the agents the run
	// registers (the bench agent and those of the register target) are
	// removed from it at the end. If nil, they are kept.
	DB *refserver.AgentDB
}

// benchTarget is the outcome of one target's run.
type benchTarget struct {
	Target string `json:"target"`
	// Mode is "closed" or "open" (--rate).
	Mode string `json:"mode"`
	// OfferedRPS is the open loop's arrival rate (--rate); 0 in the
	// closed loop.
	OfferedRPS float64 `json:"offered_requests_per_second,omitempty"`
	Requests   int     `json:"requests"`
	Seconds    float64 `json:"seconds"`
	// RPS is the achieved rate: requests answered per second of the run.
	RPS   float64 `json:"requests_per_second"`
	P50ms float64 `json:"p50_ms"`
	P90ms float64 `json:"p90_ms"`
	P99ms float64 `json:"p99_ms"`
	// P999ms is the 99.9th percentile.
	P999ms float64 `json:"p99_9_ms"`
	Maxms  float64 `json:"max_ms"`
	// SentLate counts open-loop requests sent more than 10 ms after their
	// scheduled time because every connection was busy (their latency
	// includes the wait).
	SentLate int            `json:"sent_late,omitempty"`
	Status   map[string]int `json:"status"` // "200", "429", …, "error"
	Errors   int            `json:"errors"`
	// FirstError is the first transport error, if any.
	FirstError string `json:"first_error,omitempty"`
	// Agents is the number of agents whose signatures this run spread its
	// /whoami requests over (--agents; 0 for one agent).
	Agents int `json:"agents,omitempty"`
	// CPUvsOneAgent is the server+PostgreSQL CPU per request of this run
	// over that of the one-agent run of the same bench (--agents).
	CPUvsOneAgent float64 `json:"cpu_vs_one_agent,omitempty"`
	// ServerRSSBytes is the server's resident memory after this run
	// (--agents; 0 when its /metrics does not say).
	ServerRSSBytes int64 `json:"server_rss_bytes,omitempty"`
	// KeyCacheHitPercent is the share of the server's key lookups answered
	// from its cache during a whoami run (agentid_key_cache_total of its
	// /metrics; absent when it does not say).
	KeyCacheHitPercent *float64 `json:"key_cache_hit_percent,omitempty"`
	// CPU is the server's CPU per request during this target's run, when
	// the server runs on this host (Linux).
	CPU *benchCPU `json:"cpu,omitempty"`
}

// benchCPU is the CPU time the server (and its PostgreSQL backends) used
// during one target's run, per request answered. The generator's own CPU
// is not in it.
type benchCPU struct {
	// ServerUS is the server process's user+system CPU per request, in µs.
	ServerUS float64 `json:"server_us_per_request"`
	// DatabaseUS is that of the PostgreSQL backends serving the server's
	// connections plus PostgreSQL's background processes (WAL writer,
	// checkpointer, …); 0 with no PostgreSQL backend (SQLite).
	DatabaseUS float64 `json:"database_us_per_request"`
	// DatabaseBackgroundUS is the part of DatabaseUS spent by PostgreSQL's
	// background processes, which serve every database of that PostgreSQL
	// server: other load on it shows here.
	DatabaseBackgroundUS float64 `json:"database_background_us_per_request"`
	// DatabaseBackends counts the server's PostgreSQL backends at the end.
	DatabaseBackends int `json:"database_backends"`
	// ServerPerCore is 1e6 / ServerUS: the requests per second one core
	// spent only on the server would answer; PerCore is the same for
	// server and database together (both on one host).
	ServerPerCore float64 `json:"server_requests_per_core_second"`
	PerCore       float64 `json:"requests_per_core_second"`
}

// benchReport is the whole run.
type benchReport struct {
	URL         string        `json:"url"`
	Concurrency int           `json:"concurrency"`
	AgentUID    string        `json:"agent_uid"`
	Targets     []benchTarget `json:"targets"`
	// ServerRSSBytes and ServerHeapBytes come from the server's /metrics
	// after the run (0 when it does not expose them).
	ServerRSSBytes  int64 `json:"server_rss_bytes,omitempty"`
	ServerHeapBytes int64 `json:"server_heap_bytes,omitempty"`
	// AgentsRegistered counts the agents the run registered (the bench
	// agent and every new one of the register target); AgentsRemoved
	// those it removed from the server's database afterwards (0 with
	// --keep-agents).
	AgentsRegistered int `json:"agents_registered"`
	AgentsRemoved    int `json:"agents_removed"`
	// ServerPID is the process measured for the targets' CPU (the one
	// listening on the port bench dials), 0 when none on this host;
	// ServerCPU then says why.
	ServerPID int    `json:"server_pid,omitempty"`
	ServerCPU string `json:"server_cpu_unavailable,omitempty"`
}

func newBenchCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli bench", env)
	rawURL := fs.String("url", "http://localhost:3000", "service base URL (the server's HOSTNAME)")
	connect := fs.String("connect", "", "host:port to dial for every request (default: the URL's host and port)")
	duration := fs.Duration("duration", 10*time.Second, "time budget per target (0: none)")
	requests := fs.Int64("requests", 0, "request budget per target (0: none)")
	concurrency := fs.Int("concurrency", 64, "concurrent connections")
	target := fs.String("target", benchWhoami, "whoami, register, directory or all (each in turn)")
	timeout := fs.Duration("timeout", 10*time.Second, "timeout of one request")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	rate := fs.Float64("rate", 0, "open loop: send this many requests per second on a fixed schedule for --duration (or --requests), measuring latency from each request's scheduled send time; 0: closed loop")
	envFile := fs.String("env-file", "", "sign /whoami as the agent of this credentials file (written by idcli agent init or vestauth agent init) instead of registering a bench agent")
	presign := fs.Int("presign", 0, "sign this many whoami requests before the timed phase (each with its own nonce), so signing cost stays out of the measured loop; 0 signs inside the loop")
	legacy := fs.Bool("legacy", false, legacyUsage)
	agents := fs.Int("agents", 1, "spread /whoami over N agents (the bench agent and N-1 more, registered before the run): whoami runs signed by one agent, then round-robin over the N, and reports the CPU ratio")
	metricsURL := fs.String("metrics-url", "", "the URL of the server's metrics, on its own metrics address (e.g. http://127.0.0.1:9090/metrics), for the key-cache hit rate and memory figures (default: none)")
	keepAgents := fs.Bool("keep-agents", false, "leave the agents the run registers in the server's database (needed when bench cannot reach that database)")
	var dbFlags serverFlags
	dbFlags.register(fs, false)
	return &ffcli.Command{
		Name:       "bench",
		ShortUsage: "idcli bench [--url URL] [--connect HOST:PORT] [--duration 10s] [--requests N] [--concurrency 64] [--rate R] [--timeout 10s] [--target whoami|register|directory|all] [--env-file PATH] [--legacy] [--presign N] [--agents N] [--metrics-url URL] [--database-url URL] [--keep-agents] [--json]",
		ShortHelp:  "load-test a running agentid server",
		LongHelp: "Registers a bench agent (or signs as the agent of --env-file), then sends signed\n" +
			"requests with a fresh nonce each (replay protection stays on): GET /whoami signed\n" +
			"by the bench agent (--presign signs them before the timed phase); POST /agents\n" +
			"with a new key each time; GET of the bench agent's key directory on its agent host\n" +
			"(dialed at the service address). Each target runs until --requests or --duration\n" +
			"is used up, then prints requests/s, latency percentiles and status counts.\n" +
			"Registration is rate limited per client address by default: start the server with\n" +
			"idcli server start --rate-limit off to measure its throughput.\n\n" +
			"A progress line goes to stderr every second. The server has no API to delete an\n" +
			"agent, so bench removes the agents it registered from the server's database\n" +
			"when it ends: --database-url, then DATABASE_URL, then ./.env, as for idcli\n" +
			"server start. It checks before the run that the database holds the bench agent;\n" +
			"with --keep-agents (a server whose database bench cannot reach) they stay.\n\n" +
			"Closed loop (default): --concurrency workers each send a request when their last one\n" +
			"is answered; it measures the server's capacity, but a server that stalls also stops\n" +
			"the load, so the stall shows in one sample per worker (coordinated omission).\n" +
			"Open loop (--rate R): requests are due at a fixed rate whatever the answers, and each\n" +
			"latency counts from the request's scheduled time, so a stall shows in every request\n" +
			"that was due during it; --concurrency caps the requests in flight (sent_late counts\n" +
			"requests that waited for a free connection). Use it at a fraction of the closed-loop\n" +
			"maximum to see the latency users see.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("bench: unexpected argument %q", args[0])
			}
			setServerGC(env) // the generator is as allocation-heavy as the server
			if *agents < 1 {
				return fmt.Errorf("bench: --agents %d: want 1 to %d", *agents, maxBenchAgents)
			}
			cfg := benchConfig{URL: *rawURL, Connect: *connect, Duration: *duration, Requests: *requests,
				Concurrency: *concurrency, Timeout: *timeout, Presign: *presign, Rate: *rate, Legacy: *legacy, Agents: *agents, MetricsURL: *metricsURL}
			if *envFile != "" {
				creds, err := agent.Load(agent.LoadOptions{Path: env.path(*envFile), Getenv: noEnv})
				if err != nil {
					return fmt.Errorf("bench: --env-file: %w", err)
				}
				cfg.Credentials = &creds
			}
			switch *target {
			case benchAll:
				cfg.Targets = benchTargets
			case benchWhoami, benchRegister, benchDirectory:
				cfg.Targets = []string{*target}
			default:
				return fmt.Errorf("bench: --target %q: want whoami, register, directory or all", *target)
			}
			if span := cfg.presignSpan(); span > signer.DefaultTTL {
				fmt.Fprintf(env.Stderr, "idcli: warning: the last of --presign %d requests at --rate %g is due %v into the run, but a signature expires %v after it is made: the later ones would be refused as expired\n",
					cfg.Presign, cfg.Rate, span.Round(time.Second), signer.DefaultTTL)
			}
			cfg.Progress = env.Stderr
			if _, err := cfg.validate(); err != nil {
				return err
			}
			if !*keepAgents && (cfg.Credentials == nil || cfg.Agents > 1 || slices.Contains(cfg.Targets, benchRegister)) {
				db, err := benchDB(env, dbFlags)
				if err != nil {
					return err
				}
				defer db.Close()
				cfg.DB = db
			}
			rep, err := runBench(ctx, cfg)
			if rep.AgentsRemoved > 0 {
				fmt.Fprintf(env.Stderr, "bench: removed the %d agents it registered from the server's database (--keep-agents keeps them)\n", rep.AgentsRemoved)
			}
			if err == nil && cfg.DB != nil && rep.AgentsRemoved < rep.AgentsRegistered {
				fmt.Fprintf(env.Stderr, "idcli: warning: %d of the %d agents bench registered were not in the database given: is it the server's?\n", rep.AgentsRegistered-rep.AgentsRemoved, rep.AgentsRegistered)
			}
			if err != nil {
				return err
			}
			if *asJSON {
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			printBench(env.Stdout, rep)
			return nil
		},
	}
}

// bench is one run's shared state.
type bench struct {
	cfg       benchConfig
	client    *http.Client
	base      string // scheme://host of --url
	whoamiURL string
	service   signer.ServiceURL
	key       signer.PrivateKey
	uid       string
	origin    string // the bench agent's Signature-Agent origin

	presigned []signer.SignatureHeaders // whoami headers signed before the run
	// agents are the --agents agents (the bench agent first); spread is
	// how many of them the current run signs with, round-robin (0 or 1:
	// the bench agent alone). Set between runs only.
	agents []benchAgent
	spread int
	next   atomic.Int64 // index of the next unused presigned entry

	progress io.Writer    // progress lines; nil for none
	cpu      *cpuProbe    // the server's CPU; nil when not on this host
	answered atomic.Int64 // requests of the current target answered or failed
	failed   atomic.Int64 // of which transport errors

	mu         sync.Mutex
	registered []string // uids of the agents this run created
}

// noteRegistered records uid when the run created it (isNew), for removal.
func (b *bench) noteRegistered(uid string, isNew bool) {
	if !isNew {
		return
	}
	b.mu.Lock()
	b.registered = append(b.registered, uid)
	b.mu.Unlock()
}

// say prints a progress line, if progress lines are wanted.
func (b *bench) say(format string, args ...any) {
	if b.progress != nil {
		fmt.Fprintf(b.progress, format+"\n", args...)
	}
}

// reportProgress prints, every cfg.ProgressEvery until stop is closed, how
// far target's run is: elapsed time, requests answered and the rate since
// the last line.
func (b *bench) reportProgress(target string, start time.Time, stop <-chan struct{}) {
	every := b.cfg.ProgressEvery
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	last, lastAt := int64(0), start
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			n := b.answered.Load()
			rate := float64(n-last) / now.Sub(lastAt).Seconds()
			b.say("bench %s: %.0fs, %d requests, %.0f req/s, %d errors", target, now.Sub(start).Seconds(), n, rate, b.failed.Load())
			last, lastAt = n, now
		}
	}
}

// presign signs n whoami requests on every CPU.
func (b *bench) presign(n int) error {
	b.presigned = make([]signer.SignatureHeaders, n)
	workers := runtime.NumCPU()
	var g errgroup.Group
	for w := range workers {
		g.Go(func() error {
			for i := w; i < n; i += workers {
				a := b.agentFor(int64(i))
				h, err := signer.Headers(http.MethodGet, b.whoamiURL, a.key, signer.Options{SignatureAgent: a.origin, Legacy: b.cfg.Legacy})
				if err != nil {
					return err
				}
				b.presigned[i] = h
			}
			return nil
		})
	}
	return g.Wait()
}

// validate checks the configuration and returns the service URL of --url.
func (c benchConfig) validate() (signer.ServiceURL, error) {
	var none signer.ServiceURL
	if !strings.Contains(c.URL, "://") {
		return none, fmt.Errorf("bench: --url %q: want http(s)://host[:port]%s", c.URL, hint.Scheme(c.URL))
	}
	svc, err := signer.ParseServiceURL(c.URL)
	if err != nil {
		return none, fmt.Errorf("bench: --url: %s", strings.TrimPrefix(err.Error(), "signer: "))
	}
	if c.Duration < 0 || c.Requests < 0 {
		return none, errors.New("bench: --duration and --requests must not be negative")
	}
	if c.Duration == 0 && c.Requests == 0 {
		return none, errors.New("bench: give --duration or --requests (a run must be bounded)")
	}
	if c.Concurrency < 1 || c.Concurrency > 10000 {
		return none, fmt.Errorf("bench: --concurrency %d: want 1 to 10000", c.Concurrency)
	}
	if c.Timeout <= 0 {
		return none, errors.New("bench: --timeout must be positive")
	}
	if c.Agents < 0 || c.Agents > maxBenchAgents {
		return none, fmt.Errorf("bench: --agents %d: want 1 to %d", c.Agents, maxBenchAgents)
	}
	if c.Agents > 1 && !slices.Contains(c.Targets, benchWhoami) {
		return none, errors.New("bench: --agents spreads the whoami target: run it (--target whoami or all)")
	}
	if c.Rate < 0 || c.Rate > 1e6 {
		return none, fmt.Errorf("bench: --rate %g: want 0 (closed loop) or up to 1000000 requests per second", c.Rate)
	}
	return svc, nil
}

// presignSpan is how far into an open-loop run the last presigned /whoami
// request is due; 0 in the closed loop, whose pace is not known ahead.
func (c benchConfig) presignSpan() time.Duration {
	if c.Presign <= 0 || c.Rate <= 0 {
		return 0
	}
	n := min(int64(c.Presign), c.openLoopCount())
	return time.Duration(float64(n) / c.Rate * float64(time.Second))
}

// runBench registers a bench agent and runs each target in turn; then,
// with cfg.DB, it removes the agents it registered, whether or not the run
// succeeded.
func runBench(ctx context.Context, cfg benchConfig) (rep benchReport, err error) {
	svc, err := cfg.validate()
	if err != nil {
		return benchReport{}, err
	}
	addr := cfg.Connect
	if addr == "" {
		addr = svc.Host
		if _, _, err := net.SplitHostPort(addr); err != nil { // no port: the scheme's default
			port := "80"
			if svc.Scheme == "https" {
				port = "443"
			}
			addr = net.JoinHostPort(strings.Trim(addr, "[]"), port)
		}
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		// Every host (the service host and <uid>.<service host>) is dialed
		// at the service address, so agent hosts need no DNS.
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, addr)
		},
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: cfg.Concurrency,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 5 * time.Second,
	}
	defer tr.CloseIdleConnections()
	b := &bench{
		cfg:       cfg,
		progress:  cfg.Progress,
		client:    &http.Client{Transport: tr, Timeout: cfg.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		base:      svc.String(),
		whoamiURL: svc.String() + "/whoami",
		service:   svc,
	}
	if c := cfg.Credentials; c != nil {
		if c.Hostname != svc.String() {
			return benchReport{}, fmt.Errorf("bench: the agent of --env-file belongs to %s, not --url %s", c.Hostname, svc)
		}
		b.key, b.uid = c.Key, c.UID
	} else {
		if b.key, err = signer.GenerateKey(rand.Reader); err != nil {
			return benchReport{}, err
		}
		reg, err := agent.Register(ctx, b.client, b.base, b.key)
		if err != nil {
			return benchReport{}, hint.With(fmt.Errorf("bench: register the bench agent at %s: %w", b.base, err), hint.Refused(err, b.base))
		}
		b.uid = reg.UID
		b.noteRegistered(reg.UID, reg.IsNew)
	}
	defer func() {
		rep.AgentsRegistered = len(b.registered)
		if cfg.DB != nil && len(b.registered) > 0 {
			b.say("bench: removing the %d agents it registered…", len(b.registered))
			n, derr := removeAgents(ctx, cfg.DB, b.registered)
			rep.AgentsRemoved = n
			if derr != nil && err == nil {
				err = fmt.Errorf("bench: remove the %d bench agents from the server's database: %w", len(b.registered), derr)
			}
		}
	}()
	if cfg.DB != nil && cfg.Credentials == nil {
		// The agents are removed from cfg.DB: it must be the server's.
		has, err := cfg.DB.HasAgent(ctx, b.uid)
		if err != nil {
			return benchReport{}, fmt.Errorf("bench: read the server's database: %w", err)
		}
		if !has {
			return benchReport{}, fmt.Errorf("bench: the database given (--database-url, DATABASE_URL or ./.env) does not hold the bench agent %s just registered at %s: give the server's database with --database-url, or --keep-agents to leave the bench agents registered", b.uid, b.base)
		}
	}
	b.origin = b.service.AgentOrigin(b.uid)
	b.agents = []benchAgent{{key: b.key, origin: b.origin}}
	if cfg.Agents > 1 {
		if err := b.registerAgents(ctx, cfg.Agents-1); err != nil {
			return benchReport{}, err
		}
	}
	if cfg.Presign > 0 && slices.Contains(cfg.Targets, benchWhoami) {
		b.say("bench: signing %d whoami requests before the run…", cfg.Presign)
		if err := b.presign(cfg.Presign); err != nil {
			return benchReport{}, fmt.Errorf("bench: presign: %w", err)
		}
	}

	rep = benchReport{URL: b.base, Concurrency: cfg.Concurrency, AgentUID: b.uid}
	if b.cpu, err = findServerProcess(addr); err != nil {
		rep.ServerCPU = err.Error()
	} else {
		rep.ServerPID = b.cpu.pid
	}
	for _, t := range cfg.Targets {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		one := b.run(ctx, t)
		rep.Targets = append(rep.Targets, one)
		if t == benchWhoami && cfg.Agents > 1 {
			oneRSS, many, err := b.runSpread(ctx, one)
			rep.Targets[len(rep.Targets)-1].ServerRSSBytes = oneRSS
			if err != nil {
				return rep, err
			}
			rep.Targets = append(rep.Targets, many)
		}
	}
	rep.ServerRSSBytes, rep.ServerHeapBytes = b.serverMemory(ctx)
	return rep, nil
}

// do sends one request of target and returns its status.
func (b *bench) do(ctx context.Context, target string) (int, error) {
	switch target {
	case benchRegister:
		key, err := signer.GenerateKey(rand.Reader)
		if err != nil {
			return 0, err
		}
		// agent.Register checks the answer; an error answer (such as 429
		// rate_limited) is counted by its status, not as a failure.
		reg, err := agent.Register(ctx, b.client, b.base, key)
		if err == nil {
			b.noteRegistered(reg.UID, reg.IsNew)
		}
		var se *agent.ServerError
		switch {
		case err == nil && reg.IsNew:
			return http.StatusCreated, nil
		case err == nil:
			return http.StatusOK, nil
		case errors.As(err, &se):
			return se.Status, nil
		}
		return 0, err
	case benchWhoami:
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.whoamiURL, nil)
		if err != nil {
			return 0, err
		}
		// A fresh nonce per request: the server's replay check stays on.
		i := b.next.Add(1) - 1
		if i < int64(len(b.presigned)) {
			h := b.presigned[i]
			req.Header["Signature"] = []string{h.Signature}
			req.Header["Signature-Input"] = []string{h.SignatureInput}
			req.Header["Signature-Agent"] = []string{h.SignatureAgent}
		} else {
			a := b.agentFor(i)
			if err := signer.Sign(req, a.key, signer.Options{SignatureAgent: a.origin, Legacy: b.cfg.Legacy}); err != nil {
				return 0, err
			}
		}
		return b.send(req)
	case benchDirectory:
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.origin+signer.DirectoryPath, nil)
		if err != nil {
			return 0, err
		}
		return b.send(req)
	}
	return 0, fmt.Errorf("bench: unknown target %q", target)
}

func (b *bench) send(req *http.Request) (int, error) {
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// workerStats is one worker's record, merged after the run.
type workerStats struct {
	lat      []time.Duration
	status   map[int]int
	errors   int
	firstErr string
	late     int // open loop: sent more than lateAfter after the schedule

	answered, failed *atomic.Int64 // the run's shared counters, for progress; nil for none
}

// record notes one answered (or failed) request and its latency. It
// returns false when the request was interrupted by ctx (not measured).
func (ws *workerStats) record(ctx context.Context, lat time.Duration, status int, err error) bool {
	if ws.answered != nil && (err == nil || ctx.Err() == nil) {
		ws.answered.Add(1)
		if err != nil {
			ws.failed.Add(1)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		ws.lat = append(ws.lat, lat)
		ws.errors++
		if ws.firstErr == "" {
			ws.firstErr = err.Error()
		}
		return true
	}
	ws.lat = append(ws.lat, lat)
	ws.status[status]++
	return true
}

// run drives target in the closed or open loop, printing progress.
func (b *bench) run(ctx context.Context, target string) benchTarget {
	b.answered.Store(0)
	b.failed.Store(0)
	if b.progress != nil {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			b.reportProgress(target, time.Now(), stop)
		}()
		defer func() { close(stop); <-done }()
	}
	var before cpuSnapshot
	probe := b.cpu
	if probe != nil {
		var err error
		if before, err = probe.snapshot(); err != nil {
			probe = nil
		}
	}
	var hits0, misses0 int64
	if target == benchWhoami {
		_, _, hits0, misses0 = b.serverMetrics(ctx)
	}
	var out benchTarget
	if b.cfg.Rate > 0 {
		out = b.runOpen(ctx, target)
	} else {
		out = b.runClosed(ctx, target)
	}
	if target == benchWhoami {
		if _, _, hits, misses := b.serverMetrics(ctx); hits+misses > hits0+misses0 {
			pct := 100 * float64(hits-hits0) / float64(hits+misses-hits0-misses0)
			out.KeyCacheHitPercent = &pct
		}
	}
	if probe != nil && out.Requests > 0 {
		if use, err := probe.since(before); err == nil {
			out.CPU = perRequest(use, out.Requests)
		}
	}
	return out
}

// findServerProcess returns a probe of the process listening on addr's
// port when addr is on this host, or why there is none.
func findServerProcess(addr string) (*cpuProbe, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("port %q is not a number", port)
	}
	if !isThisHost(host) {
		return nil, fmt.Errorf("%s is not an address of this host", host)
	}
	fs := procFS{root: "/proc"}
	pid, err := fs.listenerPID(p)
	if err != nil {
		return nil, err
	}
	return &cpuProbe{fs: fs, pid: pid}, nil
}

// isThisHost reports whether host (a name or address) is this host:
// localhost, a loopback address or one of the interfaces' addresses.
func isThisHost(host string) bool {
	if hint.IsLocalHost(strings.Trim(strings.ToLower(host), "[]")) {
		return true
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return false
	}
	addrs, _ := net.InterfaceAddrs()
	for _, ip := range ips {
		if ip.IsLoopback() || ip.IsUnspecified() {
			return true
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}

// perRequest divides a run's CPU by the requests answered.
func perRequest(use cpuUse, requests int) *benchCPU {
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(requests) }
	c := &benchCPU{ServerUS: us(use.server), DatabaseUS: us(use.database),
		DatabaseBackgroundUS: us(use.background), DatabaseBackends: use.backends}
	if c.ServerUS > 0 {
		c.ServerPerCore = 1e6 / c.ServerUS
	}
	if t := c.ServerUS + c.DatabaseUS; t > 0 {
		c.PerCore = 1e6 / t
	}
	return c
}

// runClosed drives target with cfg.Concurrency workers until the request or
// time budget is used up. Requests in flight at the deadline finish
// (bounded by the request timeout) and are counted.
func (b *bench) runClosed(ctx context.Context, target string) benchTarget {
	var (
		issued   atomic.Int64
		deadline time.Time
	)
	start := time.Now()
	if b.cfg.Duration > 0 {
		deadline = start.Add(b.cfg.Duration)
	}
	stats := runWorkers(b.cfg.Concurrency, func(ws *workerStats) {
		ws.answered, ws.failed = &b.answered, &b.failed
		for ctx.Err() == nil {
			if !deadline.IsZero() && !time.Now().Before(deadline) {
				return
			}
			if n := issued.Add(1); b.cfg.Requests > 0 && n > b.cfg.Requests {
				return
			}
			t0 := time.Now()
			status, err := b.do(ctx, target)
			if !ws.record(ctx, time.Since(t0), status, err) {
				return
			}
		}
	})
	out := summarize(target, stats, time.Since(start))
	out.Mode = "closed"
	return out
}

// runWorkers runs work in n goroutines, each recording into its own
// workerStats, and returns the records once every one has returned.
func runWorkers(n int, work func(ws *workerStats)) []workerStats {
	stats := make([]workerStats, n)
	var wg sync.WaitGroup
	for i := range stats {
		wg.Add(1)
		go func(ws *workerStats) {
			defer wg.Done()
			ws.status = map[int]int{}
			work(ws)
		}(&stats[i])
	}
	wg.Wait()
	return stats
}

// lateAfter is how far behind its schedule an open-loop request may be sent
// before it counts as sent late.
const lateAfter = 10 * time.Millisecond

// openLoopCount is the number of requests an open loop schedules: Rate ×
// Duration, at most Requests.
func (c benchConfig) openLoopCount() int64 {
	n := int64(-1)
	if c.Duration > 0 {
		n = int64(c.Rate * c.Duration.Seconds())
	}
	if c.Requests > 0 && (n < 0 || c.Requests < n) {
		n = c.Requests
	}
	return max(n, 1)
}

// runOpen drives target in the open loop: request i is due at start +
// i/Rate. Each of cfg.Concurrency workers takes the next request, waits for
// its scheduled time (if still ahead), sends it and records the latency
// from the scheduled time, so time a request spends waiting for a busy
// server or a free connection counts. Every scheduled request is sent;
// those in flight at the end finish (bounded by the request timeout).
func (b *bench) runOpen(ctx context.Context, target string) benchTarget {
	n := b.cfg.openLoopCount()
	perRequest := float64(time.Second) / b.cfg.Rate
	var next atomic.Int64
	start := time.Now()
	stats := runWorkers(int(min(int64(b.cfg.Concurrency), n)), func(ws *workerStats) {
		ws.answered, ws.failed = &b.answered, &b.failed
		timer := time.NewTimer(0)
		defer timer.Stop()
		<-timer.C
		for ctx.Err() == nil {
			i := next.Add(1) - 1
			if i >= n {
				return
			}
			due := start.Add(time.Duration(float64(i) * perRequest))
			if wait := time.Until(due); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-ctx.Done():
					return
				}
			} else if -wait > lateAfter {
				ws.late++
			}
			status, err := b.do(ctx, target)
			if !ws.record(ctx, time.Since(due), status, err) {
				return
			}
		}
	})
	out := summarize(target, stats, time.Since(start))
	out.Mode = "open"
	out.OfferedRPS = b.cfg.Rate
	for _, ws := range stats {
		out.SentLate += ws.late
	}
	return out
}

// summarize merges the workers' records of one target.
func summarize(target string, stats []workerStats, elapsed time.Duration) benchTarget {
	out := benchTarget{Target: target, Seconds: elapsed.Seconds(), Status: map[string]int{}}
	var lat []time.Duration
	for _, ws := range stats {
		lat = append(lat, ws.lat...)
		for s, n := range ws.status {
			out.Status[strconv.Itoa(s)] += n
		}
		if ws.errors > 0 {
			out.Status["error"] += ws.errors
			out.Errors += ws.errors
			if out.FirstError == "" {
				out.FirstError = ws.firstErr
			}
		}
	}
	slices.Sort(lat)
	out.Requests = len(lat)
	if elapsed > 0 {
		out.RPS = float64(len(lat)) / elapsed.Seconds()
	}
	out.P50ms = ms(percentile(lat, 50, 100))
	out.P90ms = ms(percentile(lat, 90, 100))
	out.P99ms = ms(percentile(lat, 99, 100))
	out.P999ms = ms(percentile(lat, 999, 1000))
	if len(lat) > 0 {
		out.Maxms = ms(lat[len(lat)-1])
	}
	return out
}

// percentile returns the nearest-rank percentile num/den of sorted (99/100
// for p99, 999/1000 for p99.9): the value at rank ceil(n·num/den).
func percentile(sorted []time.Duration, num, den int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*num + den - 1) / den
	return sorted[max(i, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// printBench writes the report as a table.
func printBench(w io.Writer, rep benchReport) {
	fmt.Fprintf(w, "idcli bench %s: %d connections, bench agent %s\n", rep.URL, rep.Concurrency, rep.AgentUID)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tloop\trequests\tseconds\treq/s\tp50 ms\tp90 ms\tp99 ms\tp99.9 ms\tmax ms\tstatus")
	for _, t := range rep.Targets {
		codes := make([]string, 0, len(t.Status))
		for c := range t.Status {
			codes = append(codes, c)
		}
		sort.Strings(codes)
		var st []string
		for _, c := range codes {
			st = append(st, fmt.Sprintf("%s:%d", c, t.Status[c]))
		}
		loop := "closed"
		if t.Mode == "open" {
			loop = fmt.Sprintf("open %g/s", t.OfferedRPS)
		}
		name := t.Target
		if t.Agents > 1 {
			name = fmt.Sprintf("%s (%d agents)", t.Target, t.Agents)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\n",
			name, loop, t.Requests, t.Seconds, t.RPS, t.P50ms, t.P90ms, t.P99ms, t.P999ms, t.Maxms, strings.Join(st, " "))
	}
	tw.Flush()
	for _, t := range rep.Targets {
		if t.Mode == "open" {
			fmt.Fprintf(w, "%s: offered %g req/s, achieved %.0f req/s; latency counted from each request's scheduled send time", t.Target, t.OfferedRPS, t.RPS)
			if t.SentLate > 0 {
				fmt.Fprintf(w, "; %d sent more than %v late (every connection busy: raise --concurrency if the server is not the cause)", t.SentLate, lateAfter)
			}
			fmt.Fprintln(w)
		}
		if t.FirstError != "" {
			fmt.Fprintf(w, "%s: %d transport errors, first: %s\n", t.Target, t.Errors, t.FirstError)
		}
	}
	for _, t := range rep.Targets {
		if c := t.CPU; c != nil {
			fmt.Fprintf(w, "%s: server CPU %.1f µs/request (pid %d)", t.Target, c.ServerUS, rep.ServerPID)
			if c.DatabaseBackends > 0 {
				fmt.Fprintf(w, ", PostgreSQL %.1f µs/request (%d backends %.1f, background processes %.1f)",
					c.DatabaseUS, c.DatabaseBackends, c.DatabaseUS-c.DatabaseBackgroundUS, c.DatabaseBackgroundUS)
			}
			fmt.Fprintf(w, ": %.0f requests per core-second (server alone: %.0f)", c.PerCore, c.ServerPerCore)
			if t.Agents > 1 && t.CPUvsOneAgent > 0 {
				fmt.Fprintf(w, "; over %d agents %.2f× the one-agent CPU of this run", t.Agents, t.CPUvsOneAgent)
			}
			if t.KeyCacheHitPercent != nil {
				fmt.Fprintf(w, "; key cache hits %.1f%%", *t.KeyCacheHitPercent)
			}
			if t.ServerRSSBytes > 0 {
				fmt.Fprintf(w, "; server RSS %.1f MiB after it", float64(t.ServerRSSBytes)/(1<<20))
			}
			fmt.Fprintln(w)
		}
	}
	if rep.ServerPID == 0 && rep.ServerCPU != "" {
		fmt.Fprintf(w, "server CPU not measured: %s\n", rep.ServerCPU)
	}
	if rep.ServerRSSBytes > 0 || rep.ServerHeapBytes > 0 {
		fmt.Fprintf(w, "server memory after the run: RSS %.1f MiB, Go heap %.1f MiB\n",
			float64(rep.ServerRSSBytes)/(1<<20), float64(rep.ServerHeapBytes)/(1<<20))
	}
}
