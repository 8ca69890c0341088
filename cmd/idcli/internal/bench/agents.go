package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/hint"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
	"golang.org/x/sync/errgroup"
)

// removeTimeout bounds the removal of a run's agents; it runs even when the
// run was interrupted.
const removeTimeout = time.Minute

// removeAgents deletes the agents uids and their keys from db and returns
// how many agents it deleted. It runs on ctx's values but not its
// cancellation (an interrupted run still cleans up), bounded by
// removeTimeout.
func removeAgents(ctx context.Context, db AgentStore, uids []string) (int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	return db.DeleteAgents(ctx, uids)
}

// MaxAgents bounds Config.Agents (--agents).
const MaxAgents = 1_000_000

// benchAgent is one agent whose signatures the whoami target sends.
type benchAgent struct {
	key    signer.PrivateKey
	origin string // its Signature-Agent
}

// agentFor returns the agent signing whoami request i of the current run:
// round-robin over the first b.spread agents.
func (b *bench) agentFor(i int64) benchAgent {
	if b.spread <= 1 {
		return b.agents[0]
	}
	return b.agents[i%int64(b.spread)]
}

// registerAgents registers n more agents (POST /agents, a new key each),
// cfg.Concurrency at a time, for --agents; the run removes them at the end
// as it does the bench agent.
func (b *bench) registerAgents(ctx context.Context, n int) error {
	b.say("bench: registering %d more agents for --agents %d…", n, n+1)
	var next atomic.Int64
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	for range min(b.cfg.Concurrency, n) {
		g.Go(func() error {
			for next.Add(1) <= int64(n) {
				key, err := signer.GenerateKey(rand.Reader)
				if err != nil {
					return err
				}
				reg, err := agent.Register(gctx, b.client, b.base, key)
				if err != nil {
					return hint.With(fmt.Errorf("bench: register the agents of --agents at %s: %w", b.base, err),
						"registration is rate limited per client address by default: start the server with --rate-limit off to register many agents")
				}
				b.noteRegistered(reg.UID, reg.IsNew)
				mu.Lock()
				b.agents = append(b.agents, benchAgent{key: key, origin: b.service.AgentOrigin(reg.UID)})
				mu.Unlock()
			}
			return nil
		})
	}
	return g.Wait()
}

// runSpread runs the whoami target again, signed round-robin by every
// agent of --agents, and sets its CPU ratio to one, the run signed by the
// bench agent alone. It returns the server's RSS after one, and the run.
func (b *bench) runSpread(ctx context.Context, one TargetReport) (int64, TargetReport, error) {
	oneRSS, _ := b.serverMemory(ctx)
	b.spread = len(b.agents)
	defer func() { b.spread = 0 }()
	b.presigned = nil
	// One untimed request per agent first: the timed run measures agents
	// the server has seen once, as in a service that has been up a while.
	b.say("bench: one request from each of the %d agents before the run…", b.spread)
	b.next.Store(0)
	var warmErr atomic.Value
	runWorkers(min(b.cfg.Concurrency, b.spread), func(*workerStats) {
		for b.next.Load() < int64(b.spread) && ctx.Err() == nil {
			status, err := b.do(ctx, Whoami)
			if err == nil && status != http.StatusOK {
				err = fmt.Errorf("status %d", status)
			}
			if err != nil {
				warmErr.CompareAndSwap(nil, err)
				return
			}
		}
	})
	if err, _ := warmErr.Load().(error); err != nil {
		return oneRSS, TargetReport{}, fmt.Errorf("bench: a first request of the agents of --agents: %w", err)
	}
	b.next.Store(0)
	if b.cfg.Presign > 0 {
		b.say("bench: signing %d whoami requests of %d agents before the run…", b.cfg.Presign, b.spread)
		if err := b.presign(b.cfg.Presign); err != nil {
			return oneRSS, TargetReport{}, fmt.Errorf("bench: presign: %w", err)
		}
	}
	many := b.run(ctx, Whoami)
	many.Agents = b.spread
	many.ServerRSSBytes, _ = b.serverMemory(ctx)
	if one.CPU != nil && many.CPU != nil {
		if base := one.CPU.ServerUS + one.CPU.DatabaseUS; base > 0 {
			many.CPUvsOneAgent = (many.CPU.ServerUS + many.CPU.DatabaseUS) / base
		}
	}
	return oneRSS, many, nil
}
