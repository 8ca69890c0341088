// Package webhook delivers the reference server's change events to the
// webhook URLs its operator configured: each event is POSTed alone as
// JSON, signed with RFC 9421 (tag web-bot-auth) by the service's own key,
// with the service's origin as Signature-Agent, so a receiver verifies it
// with the middleware trusting the service host, which serves that key's
// directory. Posts go through keyfetch.NewClient: no proxy, no redirect
// followed, private addresses refused at dial time unless allowed; the
// answer's body is read to a bound and discarded. Worker reads the outbox
// and delivers to each URL in order, at least once, with backoff, under a
// lease that lets any instance take over a URL whose deliverer died.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/redact"
)

// Event is one change event as delivered: the body of the POST.
// Receivers deduplicate by ID (delivery is at least once).
type Event struct {
	ID     string    `json:"id"`     // 32 hex, unique
	Type   string    `json:"type"`   // agent.disabled, key.revoked, …
	Agent  string    `json:"agent"`  // the agent's uid
	Kid    string    `json:"kid"`    // the key's thumbprint, "" for a change to the agent alone
	Reason string    `json:"reason"` // the operator's reason, "" when none
	Time   time.Time `json:"time"`   // when the change was committed (UTC)
}

// Defaults of Deliverer.
const (
	// DefaultTimeout bounds one delivery: the connection, the request
	// and the answer's header and (bounded) body.
	DefaultTimeout = 10 * time.Second
	// maxAnswerBytes is the most of an answer's body read (and thrown
	// away, so that the connection can be reused).
	maxAnswerBytes = 64 << 10
)

// Deliverer posts signed events. Client, Key and Origin are required.
type Deliverer struct {
	// Client sends the posts: keyfetch.NewClient, whose dialer refuses
	// private addresses unless allowed.
	Client *http.Client
	// Key is the service key (store.EnsureServiceKey).
	Key signer.PrivateKey
	// Origin is the service's origin, sent as Signature-Agent: the
	// verifier fetches the service's key directory from it.
	Origin string
	// Timeout bounds one delivery. If 0, DefaultTimeout.
	Timeout time.Duration
	// Now is the clock of the signature. If nil, time.Now.
	Now func() time.Time
	// UserAgent is sent as User-Agent.
	UserAgent string
}

// Error is a failed delivery. Its message shows the URL through
// redact.URL (a webhook URL may carry a secret in its query) and never
// the receiver's answer, only its status.
type Error struct {
	URL    string // the webhook URL, redacted
	Status int    // the answer's status, 0 when there was none
	Err    error  // the cause, when there was no answer
}

func (e *Error) Error() string {
	switch {
	case e.Status >= 300 && e.Status < 400:
		return fmt.Sprintf("webhook %s answered %d, a redirect, which is never followed", e.URL, e.Status)
	case e.Status != 0:
		return fmt.Sprintf("webhook %s answered %d", e.URL, e.Status)
	}
	return fmt.Sprintf("webhook %s: %v", e.URL, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Post delivers ev to rawURL: nil when the receiver answered 2xx.
func (d *Deliverer) Post(ctx context.Context, rawURL string, ev Event) error {
	shown := redact.URL(rawURL)
	body, err := json.Marshal(ev)
	if err != nil {
		return &Error{URL: shown, Err: err}
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return &Error{URL: shown, Err: errors.New("the URL does not parse")}
	}
	req.Header.Set("Content-Type", "application/json")
	if d.UserAgent != "" {
		req.Header.Set("User-Agent", d.UserAgent)
	}
	if err := signer.Sign(req, d.Key, signer.Options{Components: signer.WriteComponents, SignatureAgent: d.Origin, Now: d.Now}); err != nil {
		return &Error{URL: shown, Err: err}
	}
	res, err := d.Client.Do(req)
	if err != nil {
		return &Error{URL: shown, Err: unwrapURLError(err)}
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, maxAnswerBytes))
	res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return &Error{URL: shown, Status: res.StatusCode}
	}
	return nil
}

// unwrapURLError drops the *url.Error net/http wraps a failure in, whose
// message quotes the URL unredacted.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
