package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/bench/proccpu"
	"github.com/agentid/agentid/cmd/idcli/internal/hint"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
	"golang.org/x/sync/errgroup"
)

// Run registers a bench agent (or takes cfg.Credentials' agent) and runs
// each target of cfg in turn; then, with cfg.DB, it removes the agents it
// registered, whether or not the run succeeded. The report holds what ran
// when it fails part way.
func Run(ctx context.Context, cfg Config) (rep Report, err error) {
	svc, err := cfg.validate()
	if err != nil {
		return Report{}, err
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
			return Report{}, fmt.Errorf("bench: the agent of --env-file belongs to %s, not --url %s", c.Hostname, svc)
		}
		b.key, b.uid = c.Key, c.UID
	} else {
		if b.key, err = signer.GenerateKey(rand.Reader); err != nil {
			return Report{}, err
		}
		reg, err := agent.Register(ctx, b.client, b.base, b.key)
		if err != nil {
			return Report{}, hint.With(fmt.Errorf("bench: register the bench agent at %s: %w", b.base, err), hint.Refused(err, b.base))
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
			return Report{}, fmt.Errorf("bench: read the server's database: %w", err)
		}
		if !has {
			return Report{}, fmt.Errorf("bench: the database given (--database-url, DATABASE_URL or ./.env) does not hold the bench agent %s just registered at %s: give the server's database with --database-url, or --keep-agents to leave the bench agents registered", b.uid, b.base)
		}
	}
	b.origin = b.service.AgentOrigin(b.uid)
	b.agents = []benchAgent{{key: b.key, origin: b.origin}}
	if cfg.Agents > 1 {
		if err := b.registerAgents(ctx, cfg.Agents-1); err != nil {
			return Report{}, err
		}
	}
	if cfg.Presign > 0 && slices.Contains(cfg.Targets, Whoami) {
		b.say("bench: signing %d whoami requests before the run…", cfg.Presign)
		if err := b.presign(cfg.Presign); err != nil {
			return Report{}, fmt.Errorf("bench: presign: %w", err)
		}
	}

	rep = Report{URL: b.base, Concurrency: cfg.Concurrency, AgentUID: b.uid}
	if b.cpu, err = findServerProcess(addr); err != nil {
		rep.ServerCPU = err.Error()
	} else {
		rep.ServerPID = b.cpu.PID()
	}
	for _, t := range cfg.Targets {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		one := b.run(ctx, t)
		rep.Targets = append(rep.Targets, one)
		if t == Whoami && cfg.Agents > 1 {
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

// bench is one run's shared state.
type bench struct {
	cfg       Config
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

	progress io.Writer      // progress lines; nil for none
	cpu      *proccpu.Probe // the server's CPU; nil when not on this host
	answered atomic.Int64   // requests of the current target answered or failed
	failed   atomic.Int64   // of which transport errors

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
