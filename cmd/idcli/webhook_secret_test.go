package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/redact"
	"github.com/agentid/agentid/signer/signertest"
)

// Capability webhook paths: the secret is a path segment, and every
// secret contains "s3cret".
const (
	slackHookPath   = "/services/T0A1B2C3D/B0E4F5G6H/s3cretSlackXyZ0123456789"
	discordHookPath = "/api/webhooks/123456789012345678/s3cretDiscord-AbCdEf_0123456789"
)

// showsHookPath reports whether s holds a trace of a capability path.
func showsHookPath(s string) bool {
	return strings.Contains(s, "s3cret") || strings.Contains(s, "/services/") || strings.Contains(s, "/api/webhooks")
}

// refusingHook answers 503 until up is set, then takes events.
type refusingHook struct {
	*httptest.Server
	up      atomic.Bool
	refused atomic.Int64
	mu      sync.Mutex
	ids     map[string]bool
}

func newRefusingHook(t *testing.T, path string) *refusingHook {
	t.Helper()
	h := &refusingHook{ids: map[string]bool{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		if !h.up.Load() {
			h.refused.Add(1)
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		var ev struct {
			ID string `json:"id"`
		}
		json.NewDecoder(r.Body).Decode(&ev)
		h.mu.Lock()
		h.ids[ev.ID] = true
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *refusingHook) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ids)
}

// TestServerStartShowsNoWebhookPath: `idcli server start` given a
// Slack-style and a Discord-style webhook (the secret in the path) and
// one on a closed port, by AGENTID_WEBHOOK, prints no path on stdout or
// stderr — not at startup, not at each failed delivery — and leaves none
// in webhook_cursors, naming each webhook by host and digest instead; the
// events arrive once the receivers are up. PostgreSQL and SQLite.
func TestServerStartShowsNoWebhookPath(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			databaseURL := b.URL(t)
			g := dbtest.Migrated(t, databaseURL)
			db := store.New(g)
			slack, discord := newRefusingHook(t, slackHookPath), newRefusingHook(t, discordHookPath)
			hooks := []string{slack.URL + slackHookPath, discord.URL + discordHookPath, "http://" + freeAddr(t) + slackHookPath}
			server := startCLI(t, t.TempDir(), map[string]string{"AGENTID_WEBHOOK": strings.Join(hooks, ",")},
				"server", "start", "--bind", "127.0.0.1", "--port", "0", "--hostname", "http://localhost:1",
				"--database-url", databaseURL, "--webhook-allow-private", "--webhook-timeout", "1s")
			server.waitFor(t, regexp.MustCompile(`idcli server listening on `))

			const n = 2
			for i := range n {
				k := signertest.Key(byte(0x40 + i))
				if err := db.CreateAgent(context.Background(), store.NewAgent{UID: fmt.Sprintf("agent-%024x", i+1), Kid: k.KeyID(), JWK: k.Public.JWK.MarshalPublic(), Now: time.Now().UTC()}); err != nil {
					t.Fatal(err)
				}
			}
			failedEach := func() bool {
				cs, _ := db.WebhookCursors(context.Background())
				for _, c := range cs {
					if c.Attempts == 0 {
						return false
					}
				}
				return len(cs) == len(hooks)
			}
			deadline := time.Now().Add(20 * time.Second)
			for !failedEach() && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			dump := dbtest.Dump(t, g, "webhook_cursors")
			if !failedEach() || !strings.Contains(dump, "answered 503") || !strings.Contains(dump, "connection refused") {
				t.Errorf("webhook_cursors, want a failure recorded for each webhook, its cause kept:\n%s", dump)
			}
			slack.up.Store(true)
			discord.up.Store(true)
			for (slack.count() < n || discord.count() < n) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if slack.count() < n || discord.count() < n {
				t.Errorf("the receivers took %d and %d events, want %d each", slack.count(), discord.count(), n)
			}
			if err := server.stop(); err != nil {
				t.Errorf("idcli server start: %v", err)
			}
			out := server.stdout.String() + server.stderr.String()
			if showsHookPath(out) {
				t.Errorf("idcli server start printed a webhook's path:\n%s", out)
			}
			for _, h := range hooks {
				if !strings.Contains(out, redact.HostOnly(h)) {
					t.Errorf("idcli server start never names %s:\n%s", redact.HostOnly(h), out)
				}
			}
			if !strings.Contains(out, "webhook delivery failed") {
				t.Errorf("idcli server start logged no failed delivery:\n%s", out)
			}
			for _, table := range []string{"webhook_cursors", "outbox_events", "audit_events"} {
				if dump := dbtest.Dump(t, g, table); showsHookPath(dump) {
					t.Errorf("%s holds a webhook's path:\n%s", table, dump)
				}
			}
		})
	}
}

// TestServerStartRefusesWebhookWithoutPath: a webhook refused at startup,
// given by --webhook or AGENTID_WEBHOOK, is named by host and digest in
// the error, its path never shown.
func TestServerStartRefusesWebhookWithoutPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		environ map[string]string
		args    []string
		want    string
	}{
		{"private, flag", nil, []string{"--webhook", "https://10.0.0.7" + slackHookPath}, "--webhook-allow-private allows it"},
		{"plain http, environment", map[string]string{"AGENTID_WEBHOOK": "http://discord.com" + discordHookPath}, nil, "plain http"},
		{"no scheme, environment", map[string]string{"AGENTID_WEBHOOK": "discord.com" + discordHookPath}, nil, "not an absolute https URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t.Context(), t.TempDir(), tt.environ, append([]string{"server", "start", "--port", "0", "--bind", "127.0.0.1", "--hostname", "http://localhost:1", "--database-url", "sqlite::memory:"}, tt.args...)...)
			if r.err == nil {
				t.Fatalf("started; want the webhook refused\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			}
			all := r.err.Error() + r.stdout + r.stderr
			if showsHookPath(all) || !strings.Contains(r.err.Error(), tt.want) || !strings.Contains(r.err.Error(), "#") {
				t.Errorf("error %q (stdout %q, stderr %q); want %q, the webhook named by host and digest, no path", r.err, r.stdout, r.stderr, tt.want)
			}
		})
	}
}
