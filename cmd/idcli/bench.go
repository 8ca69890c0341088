package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/bench"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
	"github.com/agentid/agentid/signer/redact"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// benchAll is the --target that runs every target in turn.
const benchAll = "all"

// newBenchCmd is `idcli bench`: flags to a bench.Config, bench.Run, the
// report printed.
func newBenchCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli bench", env)
	rawURL := fs.String("url", "http://localhost:3000", "service base URL (the server's HOSTNAME)")
	connect := fs.String("connect", "", "host:port to dial for every request (default: the URL's host and port)")
	duration := fs.Duration("duration", 10*time.Second, "time budget per target (0: none)")
	requests := fs.Int64("requests", 0, "request budget per target (0: none)")
	concurrency := fs.Int("concurrency", 64, "concurrent connections")
	target := fs.String("target", bench.Whoami, "whoami, register, directory or all (each in turn)")
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
				return fmt.Errorf("bench: --agents %d: want 1 to %d", *agents, bench.MaxAgents)
			}
			cfg := bench.Config{URL: *rawURL, Connect: *connect, Duration: *duration, Requests: *requests,
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
				cfg.Targets = bench.Targets
			case bench.Whoami, bench.Register, bench.Directory:
				cfg.Targets = []string{*target}
			default:
				return fmt.Errorf("bench: --target %q: want whoami, register, directory or all", *target)
			}
			if span := cfg.PresignSpan(); span > signer.DefaultTTL {
				fmt.Fprintf(env.Stderr, "idcli: warning: the last of --presign %d requests at --rate %g is due %v into the run, but a signature expires %v after it is made: the later ones would be refused as expired\n",
					cfg.Presign, cfg.Rate, span.Round(time.Second), signer.DefaultTTL)
			}
			cfg.Progress = env.Stderr
			if err := cfg.Validate(); err != nil {
				return err
			}
			if !*keepAgents && (cfg.Credentials == nil || cfg.Agents > 1 || slices.Contains(cfg.Targets, bench.Register)) {
				db, err := benchDB(env, dbFlags)
				if err != nil {
					return err
				}
				defer db.Close()
				cfg.DB = db
			}
			rep, err := bench.Run(ctx, cfg)
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
			rep.WriteTable(env.Stdout)
			return nil
		},
	}
}

// benchDB opens the server's database as `idcli server start` finds it
// (--database-url, DATABASE_URL, ./.env, the default), for the removal of
// the bench agents, and checks that it answers.
func benchDB(env *cliEnv, f serverFlags) (*store.DB, error) {
	s, err := resolveServerSettings(env, f, false)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	url := sqliteURLAbs(env, s.DatabaseURL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := store.Open(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("bench: the bench agents are removed from the server's database afterwards, but %s does not answer: %v: give the server's database with --database-url (or DATABASE_URL), or --keep-agents to leave them registered",
			redact.URL(url), err)
	}
	return db, nil
}
