package refserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/refserver/internal/webhook"
	"github.com/agentid/agentid/signer/redact"
)

// DefaultWebhookTimeout bounds one delivery of a change event (see
// Options.WebhookTimeout).
const DefaultWebhookTimeout = webhook.DefaultTimeout

// ErrWebhookURL marks an Options.Webhooks URL Open refuses (see
// keyfetch.CheckDestination; errors.Is(err, keyfetch.ErrPrivateAddress)
// tells a private address).
var ErrWebhookURL = errors.New("refserver: webhook URL refused")

// webhookURLs splits the Options.Webhooks entries on commas, drops empty
// items and repeats, and checks each with keyfetch.CheckDestination.
func webhookURLs(entries []string, allowPrivate bool) ([]string, error) {
	var urls []string
	seen := map[string]bool{}
	for _, e := range entries {
		for _, u := range strings.Split(e, ",") {
			u = strings.TrimSpace(u)
			if u == "" || seen[u] {
				continue
			}
			seen[u] = true
			if err := keyfetch.CheckDestination(u, allowPrivate); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrWebhookURL, err) // err names u by redact.HostOnly
			}
			urls = append(urls, u)
		}
	}
	return urls, nil
}

// openWebhooks prepares the delivery of change events to the URLs of o,
// if any: checked URLs, the service key (created if need be) and the
// worker Serve runs.
func (in *Instance) openWebhooks(ctx context.Context, o Options, logger *slog.Logger) error {
	urls, err := webhookURLs(o.Webhooks, o.WebhookAllowPrivate)
	if err != nil || len(urls) == 0 {
		return err
	}
	if o.WebhookTimeout < 0 {
		return fmt.Errorf("refserver: the webhook timeout %v is negative", o.WebhookTimeout)
	}
	key, err := in.db.EnsureServiceKey(ctx)
	if err != nil {
		return err
	}
	// A URL newly configured starts after the events already in the
	// outbox: from now, not from whenever the worker first runs.
	for _, u := range urls {
		if err := in.db.EnsureWebhookCursor(ctx, u); err != nil {
			return err
		}
	}
	timeout := o.WebhookTimeout
	if timeout == 0 {
		timeout = DefaultWebhookTimeout
	}
	d := &webhook.Deliverer{Client: keyfetch.NewClient(o.WebhookAllowPrivate, timeout), Key: key,
		Origin: in.Server.service.String(), Timeout: timeout, UserAgent: "agentid/" + in.Server.cfg.Version}
	in.webhooks = &webhook.Worker{DB: in.db, URLs: urls, Deliverer: d, Log: logger}
	shown := make([]string, len(urls))
	for i, u := range urls {
		shown[i] = redact.HostOnly(u) // a path may be the secret (Slack, Discord)
	}
	logger.Info("change events delivered to webhooks", slog.Any("urls", shown), slog.String("service_key", key.Public.Thumbprint))
	return nil
}

// startWebhooks runs the webhook worker, if any, until ctx is done or the
// returned stop is called; stop waits for it to give up its leases.
func (in *Instance) startWebhooks(ctx context.Context) (stop func()) {
	if in.webhooks == nil {
		return func() {}
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		in.webhooks.Run(wctx)
	}()
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
}
