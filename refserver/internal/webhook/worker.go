package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/redact"
)

// Defaults of Worker.
const (
	DefaultPoll       = 500 * time.Millisecond
	DefaultBatch      = 100
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = 5 * time.Minute
)

// Worker delivers the outbox to each of URLs, one goroutine per URL,
// while Run runs. DB and Deliverer are required.
type Worker struct {
	DB        *store.DB
	URLs      []string
	Deliverer *Deliverer
	// Owner names this instance in the leases it takes. If "", Owner()
	// is used.
	Owner string
	// Lease is how long a claim holds a URL without renewal; every
	// delivery renews it. If 0, three delivery timeouts: an instance that
	// dies holding a URL delays its events by at most that.
	Lease time.Duration
	// Poll is how often an idle URL is looked at. If 0, DefaultPoll.
	Poll time.Duration
	// Batch bounds the events read at once. If 0, DefaultBatch.
	Batch int
	// MinBackoff and MaxBackoff bound the wait after a failure: it doubles
	// from MinBackoff with each failure in a row, up to MaxBackoff, and is
	// drawn between half of that and all of it. If 0, 1 s and 5 min.
	MinBackoff, MaxBackoff time.Duration
	// Log receives a line per failed delivery, naming the URL by
	// redact.HostOnly (its path or query may be a secret). If nil,
	// nothing is logged.
	Log *slog.Logger
}

// Owner returns a name for this process's leases: the host name, the
// process id and a random suffix (a restarted process takes nothing over
// from its former self before the lease expires).
func Owner() string {
	host, _ := os.Hostname()
	if len(host) > 32 {
		host = host[:32]
	}
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

func (w *Worker) withDefaults() *Worker {
	c := *w
	if c.Owner == "" {
		c.Owner = Owner()
	}
	if c.Lease <= 0 {
		t := c.Deliverer.Timeout
		if t <= 0 {
			t = DefaultTimeout
		}
		c.Lease = 3 * t
	}
	if c.Poll <= 0 {
		c.Poll = DefaultPoll
	}
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return &c
}

// Run delivers until ctx is done, then gives up its leases and returns.
func (w *Worker) Run(ctx context.Context) {
	c := w.withDefaults()
	var wg sync.WaitGroup
	for _, u := range c.URLs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.run(ctx, u)
		}()
	}
	wg.Wait()
}

// run delivers to url until ctx is done.
func (c *Worker) run(ctx context.Context, url string) {
	shown := redact.HostOnly(url)
	ready := false
	for {
		more := false
		if !ready {
			err := c.DB.EnsureWebhookCursor(ctx, url)
			ready = err == nil
			if err != nil && ctx.Err() == nil {
				c.Log.LogAttrs(ctx, slog.LevelWarn, "webhook cursor not created; tried again later", slog.String("url", shown), slog.String("cause", err.Error()))
			}
		}
		if ready {
			more = c.deliver(ctx, url, shown)
		}
		wait := c.Poll
		if more {
			wait = 0
		}
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			c.DB.ReleaseWebhook(rctx, url, c.Owner)
			cancel()
			return
		case <-time.After(wait):
		}
	}
}

// deliver sends url the events past its cursor, if this instance can
// claim it, until one fails; it reports whether more may be waiting.
func (c *Worker) deliver(ctx context.Context, url, shown string) bool {
	cur, ok, err := c.DB.ClaimWebhook(ctx, url, c.Owner, c.Lease)
	if err != nil || !ok {
		return false
	}
	events, err := c.DB.OutboxAfter(ctx, cur.LastEventID, c.Batch)
	if err != nil {
		return false
	}
	for _, e := range events {
		ev := Event{ID: e.EventID, Type: e.Kind, Agent: e.AgentUID, Kid: e.Kid, Reason: e.Reason, Time: e.CreatedAt.UTC()}
		if err := c.Deliverer.Post(ctx, url, ev); err != nil {
			if ctx.Err() != nil {
				return false // shutting down: not the receiver's failure
			}
			retry := c.backoff(cur.Attempts + 1)
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			c.DB.FailWebhook(fctx, url, c.Owner, retry, err.Error())
			cancel()
			c.Log.LogAttrs(ctx, slog.LevelWarn, "webhook delivery failed; retried later",
				slog.String("url", shown), slog.String("event", e.EventID), slog.String("type", e.Kind),
				slog.Int("attempts", cur.Attempts+1), slog.Duration("retry_in", retry), slog.String("cause", err.Error()))
			return false
		}
		if ok, err := c.DB.AdvanceWebhook(ctx, url, c.Owner, e.ID, c.Lease); err != nil || !ok {
			return false // the lease was lost, or the database failed: the event may be sent again
		}
		cur.Attempts = 0
	}
	return len(events) == c.Batch
}

// backoff is the wait before attempt n+1 after n failures in a row.
func (c *Worker) backoff(n int) time.Duration {
	d := c.MinBackoff
	for i := 1; i < n && d < c.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.MaxBackoff)
	return d/2 + time.Duration(mrand.Int64N(int64(d/2)+1))
}
