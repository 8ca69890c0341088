package agent

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/agentid/agentid/signer/envfile"
)

// RefreshTransport is an http.RoundTripper that keeps the agent's directory
// signature fresh on the agent's signed calls: a call that finds the
// signature recorded in the credentials file due (RefreshIfDue: past half
// its validity, and past the backoff of failed refreshes) starts a refresh
// in the background and goes on to Base at once. A call never waits for a
// refresh: a service that takes the refresh and never answers delays no
// call, and each call keeps its own context and deadline.
//
// At most one refresh is in flight. It runs on the context of the call
// that started it without its cancellation (its values kept), bounded by
// Timeout. The record is read once, and again only after a refresh
// attempt, so a call costs no file access until the signature is due. A
// failed refresh is reported to OnError; none is tried again before
// RetryAfter, nor before the backoff recorded in the credentials file. It
// is safe for concurrent use. A short-lived program calls Wait (bounded)
// and then Close before it exits.
//
//	creds, _ := agent.Load(agent.LoadOptions{})
//	tr := &agent.RefreshTransport{Base: creds.Transport(nil)}
//	defer tr.Close()
//	client := &http.Client{Transport: tr}
type RefreshTransport struct {
	// Base sends the requests (it signs them: Credentials.Transport). If
	// nil, http.DefaultTransport.
	Base http.RoundTripper
	// Options locate the credentials and the service, as for Refresh.
	Options RefreshOptions
	// OnError, if set, receives each failed refresh (a *RefreshError when
	// the request was made), from the refresh's goroutine.
	OnError func(error)
	// OnRefresh, if set, receives each successful refresh, from the
	// refresh's goroutine.
	OnRefresh func(RefreshResult)
	// RetryAfter is the least time a failed refresh waits before the next
	// try, whatever the credentials file records. If 0, one minute.
	RetryAfter time.Duration
	// Timeout bounds each refresh. If 0, DefaultTimeout.
	Timeout time.Duration

	mu     sync.Mutex
	loaded bool
	due    time.Time          // zero: nothing recorded, never due
	done   chan struct{}      // closed when the refresh in flight ends; nil when none is
	cancel context.CancelFunc // cancels the refresh in flight
	closed bool
}

// RoundTrip implements http.RoundTripper.
func (t *RefreshTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.startIfDue(req.Context())
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(req)
}

// Wait waits for the refresh in flight, if any, to end (its outcome
// reported and recorded), or for ctx to be done, and returns ctx's error
// then.
func (t *RefreshTransport) Wait(ctx context.Context) error {
	t.mu.Lock()
	done := t.done
	t.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close cancels the refresh in flight, if any, and waits for it to end:
// it is reported to OnError and recorded as failed, waiting at most 2 s for
// the credentials file's lock. No refresh starts afterwards; calls still
// go through Base. Close always returns nil.
func (t *RefreshTransport) Close() error {
	t.mu.Lock()
	t.closed = true
	done, cancel := t.done, t.cancel
	t.mu.Unlock()
	if done != nil {
		cancel()
		<-done
	}
	return nil
}

// startIfDue starts a refresh when the recorded signature is due and none
// is in flight.
func (t *RefreshTransport) startIfDue(ctx context.Context) {
	now := t.Options.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.done != nil {
		return
	}
	if !t.loaded {
		t.loaded = true
		t.due = t.readDue(now)
	}
	if t.due.IsZero() || now.Before(t.due) {
		return
	}
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	done := make(chan struct{})
	t.done, t.cancel = done, cancel
	go t.run(rctx, cancel, done)
}

// run runs one refresh, reports it and sets when the next is due.
func (t *RefreshTransport) run(ctx context.Context, cancel context.CancelFunc, done chan struct{}) {
	defer close(done)
	res, did, err := RefreshIfDue(ctx, t.Options)
	cancel()
	switch {
	case err != nil && t.OnError != nil:
		t.OnError(err)
	case did && t.OnRefresh != nil:
		t.OnRefresh(res)
	}
	now := t.Options.now()
	due := t.readDue(now)
	if err != nil && !due.IsZero() {
		retry := t.RetryAfter
		if retry <= 0 {
			retry = time.Minute
		}
		if floor := now.Add(retry); due.Before(floor) {
			due = floor
		}
	}
	t.mu.Lock()
	t.due, t.done, t.cancel = due, nil, nil
	t.mu.Unlock()
}

// readDue returns when the recorded signature is due for a refresh (zero
// when none is recorded or the file cannot be read).
func (t *RefreshTransport) readDue(now time.Time) time.Time {
	f, err := envfile.Read(t.Options.loadOptions().Path)
	if err != nil {
		return time.Time{}
	}
	due, _ := dueAt(f, now)
	return due
}
