// Package webhook delivers the reference server's change events to the
// webhook URLs its operator configured: each event is POSTed alone as
// JSON, signed with RFC 9421 (tag web-bot-auth) by the service's own key,
// with the service's origin as Signature-Agent, so a receiver verifies it
// with the middleware trusting the service host, which serves that key's
// directory. Posts go through keyfetch.NewClient: no proxy, no redirect
// followed, private addresses refused at dial time unless allowed; the
// answer's body is read to a bound and discarded. Worker reads the outbox
// and delivers to each URL in order, at least once, with backoff, under a
// lease that lets any instance take over a URL whose deliverer died. A
// URL is shown, in errors and logs, only as redact.HostOnly names it.
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
	"slices"
	"strings"
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

// Error is a failed delivery. Its message names the webhook by
// redact.HostOnly (a webhook URL may carry its secret in the path, as
// Slack's and Discord's do, or in the query), never shows the URL's path
// or query (see withoutURL), and never the receiver's answer, only its
// status.
type Error struct {
	URL    string // the webhook's name (redact.HostOnly), never the URL
	Status int    // the answer's status, 0 when there was none
	Err    error  // the cause, when there was no answer, worded without the URL
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
	shown := redact.HostOnly(rawURL)
	body, err := json.Marshal(ev)
	if err != nil {
		return &Error{URL: shown, Err: withoutURL(err, rawURL, shown)}
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
		return &Error{URL: shown, Err: withoutURL(err, rawURL, shown)}
	}
	res, err := d.Client.Do(req)
	if err != nil {
		return &Error{URL: shown, Err: withoutURL(err, rawURL, shown)}
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, maxAnswerBytes))
	res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return &Error{URL: shown, Status: res.StatusCode}
	}
	return nil
}

// withoutURL returns err worded without rawURL, whose path or query may
// be a secret: the *url.Error net/http wraps a failure in, whose message
// quotes the URL, is dropped, and whatever else of the URL the message
// still holds — the URL itself, raw, reparsed or through redact.URL, is
// replaced by name; its path, query, fragment, user information and any
// path segment of 8 bytes or more, by "…". errors.Is and errors.As still
// reach the causes (a private address, a deadline).
func withoutURL(err error, rawURL, name string) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := err.Error()
	whole := []string{rawURL, redact.URL(rawURL)}
	var parts []string
	if u, perr := url.Parse(rawURL); perr == nil {
		whole = append(whole, u.String())
		parts = append(parts, u.EscapedPath(), u.Path, u.RawQuery, u.Fragment, u.User.String())
		for _, path := range []string{u.EscapedPath(), u.Path} {
			for _, seg := range strings.Split(path, "/") {
				if len(seg) >= 8 {
					parts = append(parts, seg)
				}
			}
		}
	}
	byLength := func(a, b string) int { return len(b) - len(a) }
	slices.SortFunc(whole, byLength)
	slices.SortFunc(parts, byLength)
	for _, w := range whole {
		if w != "" {
			msg = strings.ReplaceAll(msg, w, name)
		}
	}
	for _, p := range parts {
		if len(p) > 1 && !strings.Contains(name, p) {
			msg = strings.ReplaceAll(msg, p, "…")
		}
	}
	if msg == err.Error() {
		return err
	}
	return &reworded{msg: msg, err: err}
}

// reworded is an error whose message was rewritten without a URL.
type reworded struct {
	msg string
	err error
}

func (e *reworded) Error() string { return e.msg }
func (e *reworded) Unwrap() error { return e.err }
