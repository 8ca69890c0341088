package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/internal/webhook"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/redact"
	"github.com/agentid/agentid/signer/signertest"
)

// Paths of capability webhooks: the secret is a path segment, and every
// secret contains "s3cret".
const (
	slackPath   = "/services/T0A1B2C3D/B0E4F5G6H/s3cretSlackXyZ0123456789"
	discordPath = "/api/webhooks/123456789012345678/s3cretDiscord-AbCdEf_0123456789"
)

// showsPath reports whether s holds a trace of a capability path.
func showsPath(s string) bool {
	return strings.Contains(s, "s3cret") || strings.Contains(s, "/services/") || strings.Contains(s, "/api/webhooks")
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestPostErrorsShowNoPath: whatever fails — the receiver's status, a
// private address, a refused connection, a timeout, TLS against plain
// HTTP, a transport whose error quotes the URL, a URL that does not
// parse — the error names a Slack-style or a Discord-style webhook by its
// host and digest, and shows none of its path; errors.Is still finds the
// cause.
func TestPostErrorsShowNoPath(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/fail"+slackPath, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", 500) })
	mux.HandleFunc("/fail"+discordPath, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", 500) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	key := signertest.Key(0x52)
	ev := webhook.Event{ID: "0123456789abcdef0123456789abcdef", Type: "agent.enabled", Agent: "agent-0123456789abcdef01234567", Time: time.Now().UTC()}
	quoting := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return nil, fmt.Errorf("upstream refused %s (path %s, escaped %s, last segment %s)", r.URL, r.URL.Path, r.URL.EscapedPath(), r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:])
	})}
	httpsURL := "https" + strings.TrimPrefix(srv.URL, "http")
	for _, path := range []string{slackPath, discordPath} {
		tests := []struct {
			name         string
			url          string
			client       *http.Client
			timeout      time.Duration
			is           error // errors.Is(err, is), if not nil
			status       int
			allowPrivate bool
		}{
			{name: "500", url: srv.URL + "/fail" + path, status: 500, allowPrivate: true},
			{name: "private address", url: srv.URL + path, is: keyfetch.ErrPrivateAddress},
			{name: "connection refused", url: "http://" + closedAddr(t) + path, allowPrivate: true},
			{name: "timeout", url: srv.URL + "/slow" + path, timeout: 200 * time.Millisecond, is: context.DeadlineExceeded, allowPrivate: true},
			{name: "TLS to plain HTTP", url: httpsURL + path, allowPrivate: true},
			{name: "the transport quotes the URL", url: "https://hooks.example" + path + "?token=s3cret", client: quoting},
			{name: "does not parse", url: "https://hooks.example/%zz" + path},
		}
		for _, tt := range tests {
			timeout := cmpOr(tt.timeout, 2*time.Second)
			client := tt.client
			if client == nil {
				client = keyfetch.NewClient(tt.allowPrivate, timeout)
			}
			d := &webhook.Deliverer{Client: client, Key: key, Origin: "https://agentid.example", Timeout: timeout}
			err := d.Post(context.Background(), tt.url, ev)
			name := redact.HostOnly(tt.url)
			var we *webhook.Error
			switch {
			case err == nil:
				t.Errorf("%s %s: delivered, want an error", path, tt.name)
			case showsPath(err.Error()):
				t.Errorf("%s %s: the error shows the path: %v", path, tt.name, err)
			case !strings.Contains(err.Error(), name):
				t.Errorf("%s %s: %v; want it to name %s", path, tt.name, err, name)
			case !errors.As(err, &we) || we.URL != name || we.Status != tt.status:
				t.Errorf("%s %s: %#v; want a *webhook.Error named %s, status %d", path, tt.name, err, name, tt.status)
			case tt.is != nil && !errors.Is(err, tt.is):
				t.Errorf("%s %s: %v; want it to wrap %v", path, tt.name, err, tt.is)
			}
		}
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d != 0 {
		return d
	}
	return def
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWorkerShowsNoPath: a worker delivering to a Slack-style and a
// Discord-style webhook (refusing for a while) and to one on a closed
// port logs each failure naming the webhook by its host and digest,
// stores no path in webhook_cursors, and delivers every event once the
// receivers are up. Both databases.
func TestWorkerShowsNoPath(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			u := b.URL(t)
			g := dbtest.Migrated(t, u)
			ctx := context.Background()
			db := store.New(g)
			slack, discord := newFlaky(t), newFlaky(t)
			urls := []string{slack.URL + slackPath, discord.URL + discordPath, "http://" + closedAddr(t) + slackPath}
			var logs syncBuffer
			w := &webhook.Worker{DB: db, URLs: urls, Owner: "a", Poll: 20 * time.Millisecond,
				MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
				Log:       slog.New(slog.NewTextHandler(&logs, nil)),
				Deliverer: &webhook.Deliverer{Client: keyfetch.NewClient(true, time.Second), Key: signertest.Key(4), Origin: "https://agentid.example", Timeout: time.Second}}
			for _, u := range urls {
				if err := db.EnsureWebhookCursor(ctx, u); err != nil {
					t.Fatal(err)
				}
			}
			wctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); w.Run(wctx) }()
			defer func() { stop(); <-done }()

			const n = 3
			for i := range n {
				k := signertest.Key(byte(20 + i))
				if err := db.CreateAgent(ctx, store.NewAgent{UID: fmt.Sprintf("agent-%024x", i+1), Kid: k.KeyID(), JWK: k.Public.JWK.MarshalPublic(), Now: time.Now().UTC()}); err != nil {
					t.Fatal(err)
				}
			}
			failed := func() bool {
				cs, _ := db.WebhookCursors(ctx)
				for _, c := range cs {
					if c.Attempts < 2 {
						return false
					}
				}
				return len(cs) == len(urls)
			}
			deadline := time.Now().Add(10 * time.Second)
			for !failed() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if dump := dbtest.Dump(t, g, "webhook_cursors"); !failed() || showsPath(dump) || !strings.Contains(dump, "answered 503") || !strings.Contains(dump, "connection refused") {
				t.Errorf("while the receivers refuse, webhook_cursors (want 2 failures each, no path, the causes):\n%s", dump)
			}
			slack.up.Store(true)
			discord.up.Store(true)
			for (len(slack.ids()) < n || len(discord.ids()) < n) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if len(slack.ids()) < n || len(discord.ids()) < n {
				t.Errorf("delivered %d and %d events, want %d each", len(slack.ids()), len(discord.ids()), n)
			}
			stop()
			<-done
			out := logs.String()
			if showsPath(out) {
				t.Errorf("the log shows a webhook's path:\n%s", out)
			}
			for _, u := range urls {
				if !strings.Contains(out, "url="+redact.HostOnly(u)) {
					t.Errorf("the log never names %s:\n%s", redact.HostOnly(u), out)
				}
			}
			if dump := dbtest.Dump(t, g, "webhook_cursors"); showsPath(dump) {
				t.Errorf("webhook_cursors shows a webhook's path:\n%s", dump)
			}
		})
	}
}
