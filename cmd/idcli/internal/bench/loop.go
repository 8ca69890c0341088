package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/bench/proccpu"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
)

// do sends one request of target and returns its status.
func (b *bench) do(ctx context.Context, target string) (int, error) {
	switch target {
	case Register:
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
	case Whoami:
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
	case Directory:
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
func (b *bench) run(ctx context.Context, target string) TargetReport {
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
	var before proccpu.Snapshot
	probe := b.cpu
	if probe != nil {
		var err error
		if before, err = probe.Snapshot(); err != nil {
			probe = nil
		}
	}
	var hits0, misses0 int64
	if target == Whoami {
		_, _, hits0, misses0 = b.serverMetrics(ctx)
	}
	var out TargetReport
	if b.cfg.Rate > 0 {
		out = b.runOpen(ctx, target)
	} else {
		out = b.runClosed(ctx, target)
	}
	if target == Whoami {
		if _, _, hits, misses := b.serverMetrics(ctx); hits+misses > hits0+misses0 {
			pct := 100 * float64(hits-hits0) / float64(hits+misses-hits0-misses0)
			out.KeyCacheHitPercent = &pct
		}
	}
	if probe != nil && out.Requests > 0 {
		if use, err := probe.Since(before); err == nil {
			out.CPU = perRequest(use, out.Requests)
		}
	}
	return out
}

// runClosed drives target with cfg.Concurrency workers until the request or
// time budget is used up. Requests in flight at the deadline finish
// (bounded by the request timeout) and are counted.
func (b *bench) runClosed(ctx context.Context, target string) TargetReport {
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

// runOpen drives target in the open loop: request i is due at start +
// i/Rate. Each of cfg.Concurrency workers takes the next request, waits for
// its scheduled time (if still ahead), sends it and records the latency
// from the scheduled time, so time a request spends waiting for a busy
// server or a free connection counts. Every scheduled request is sent;
// those in flight at the end finish (bounded by the request timeout).
func (b *bench) runOpen(ctx context.Context, target string) TargetReport {
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
