package agent

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/agentid/agentid/signer/envfile"
)

// RefreshTransport is an http.RoundTripper that keeps the agent's directory
// signature fresh on the agent's signed calls: before passing a request to
// Base it runs RefreshIfDue with Options when the signature recorded in
// the credentials file is past half its validity. The record is read once
// and again only after a refresh attempt, so a call costs no file access
// until the signature is due; a failed refresh is reported to OnError and
// tried again after RetryAfter, and the call goes on either way. It is
// safe for concurrent use; one refresh runs at a time.
//
//	creds, _ := agent.Load(agent.LoadOptions{})
//	client := &http.Client{Transport: &agent.RefreshTransport{Base: creds.Transport(nil)}}
type RefreshTransport struct {
	// Base sends the requests (it signs them: Credentials.Transport). If
	// nil, http.DefaultTransport.
	Base http.RoundTripper
	// Options locate the credentials and the service, as for Refresh.
	Options RefreshOptions
	// OnError, if set, receives each failed refresh.
	OnError func(error)
	// RetryAfter is how long a failed refresh waits before the next try.
	// If 0, one minute.
	RetryAfter time.Duration

	mu     sync.Mutex
	loaded bool
	due    time.Time // zero: nothing recorded, never due
}

// RoundTrip implements http.RoundTripper.
func (t *RefreshTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.refreshIfDue(req.Context())
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(req)
}

func (t *RefreshTransport) refreshIfDue(ctx context.Context) {
	now := t.Options.now
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.loaded {
		t.loaded = true
		t.due = t.readDue()
	}
	if t.due.IsZero() || now().Before(t.due) {
		return
	}
	if _, _, err := RefreshIfDue(ctx, t.Options); err != nil {
		if t.OnError != nil {
			t.OnError(err)
		}
		retry := t.RetryAfter
		if retry <= 0 {
			retry = time.Minute
		}
		t.due = now().Add(retry)
		return
	}
	t.due = t.readDue()
}

// readDue returns when the recorded signature is due for a refresh (zero
// when none is recorded or the file cannot be read).
func (t *RefreshTransport) readDue() time.Time {
	f, err := envfile.Read(t.Options.loadOptions().Path)
	if err != nil {
		return time.Time{}
	}
	created, expires, ok := directoryState(f)
	if !ok {
		return time.Time{}
	}
	return refreshAt(created, expires)
}
