package refserver_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/redact"
	"github.com/agentid/agentid/signer/signertest"
)

func openWithWebhooks(t *testing.T, databaseURL string, allowPrivate bool, hooks ...string) (*refserver.Instance, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return refserver.Open(context.Background(), refserver.Options{DatabaseURL: databaseURL, Listener: ln, Migrate: true,
		Webhooks: hooks, WebhookAllowPrivate: allowPrivate, WebhookTimeout: time.Second})
}

// TestWebhookURLsRefusedAtStartup: Open refuses a webhook URL that is
// plain http, names a private address or a loopback name, or carries
// user information, unless private networks are allowed (those with user
// information always); the error never shows the URL's secrets.
func TestWebhookURLsRefusedAtStartup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url          string
		allowPrivate bool
		private      bool // the error wraps keyfetch.ErrPrivateAddress
		ok           bool
	}{
		{url: "http://hooks.example/x?token=s3cret"},
		{url: "https://127.0.0.1:8443/x?token=s3cret", private: true},
		{url: "https://10.0.0.7/x", private: true},
		{url: "https://169.254.169.254/latest", private: true},
		{url: "https://[::1]/x", private: true},
		{url: "https://localhost/x", private: true},
		{url: "https://ops:s3cret@hooks.example/x"},
		{url: "https://ops:s3cret@hooks.example/x", allowPrivate: true},
		{url: "https://hooks.example/a, ftp://hooks.example/b"},
		{url: "http://hooks.slack.com/services/T0A1B2C3D/B0E4F5G6H/s3cretSlack"},
		{url: "https://10.0.0.7/api/webhooks/123456789012345678/s3cretDiscord", private: true},
		{url: "https://discord.com/api/webhooks/1/s3cret, https://10.0.0.8/services/T/B/s3cret", private: true},
		{url: "http://127.0.0.1:9/x?token=s3cret", allowPrivate: true, ok: true},
		{url: "https://hooks.example/a,https://hooks.example/b", ok: true},
	}
	for _, tt := range tests {
		in, err := openWithWebhooks(t, "sqlite::memory:", tt.allowPrivate, tt.url)
		if tt.ok {
			if err != nil {
				t.Errorf("%s (allowPrivate %v): %v, want it accepted", tt.url, tt.allowPrivate, err)
			} else {
				in.Close()
			}
			continue
		}
		if err == nil {
			in.Close()
			t.Errorf("%s (allowPrivate %v): accepted, want it refused", tt.url, tt.allowPrivate)
			continue
		}
		if !errors.Is(err, refserver.ErrWebhookURL) || errors.Is(err, keyfetch.ErrPrivateAddress) != tt.private || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s (allowPrivate %v): %v; want ErrWebhookURL (private address: %v), no secret shown", tt.url, tt.allowPrivate, err, tt.private)
		}
	}
}

// TestWebhookNameResolvingToLoopbackRefusedAtDial: a webhook URL whose
// host is a name (passing the startup check) that resolves to a loopback
// address is never connected to without WebhookAllowPrivate: each attempt
// fails at dial time, recorded in the cursor, and the receiver on that
// address accepts nothing.
func TestWebhookNameResolvingToLoopbackRefusedAtDial(t *testing.T) {
	t.Parallel()
	name, err := os.Hostname()
	if err != nil || name == "" || strings.Contains(strings.ToLower(name), "localhost") {
		t.Skipf("no host name to resolve (%q, %v)", name, err)
	}
	if addrs, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip4", name); err != nil || len(addrs) == 0 || !addrs[0].IsLoopback() {
		t.Skipf("the host name %q does not resolve to loopback here (%v, %v)", name, addrs, err)
	}
	var accepted atomic.Int64
	rcv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	rcv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}
	rcv.StartTLS()
	t.Cleanup(rcv.Close)
	_, port, _ := net.SplitHostPort(rcv.Listener.Addr().String())
	hook := "https://" + name + ":" + port + "/hook"

	databaseURL := dbtest.SQLiteURL(t)
	in, err := openWithWebhooks(t, databaseURL, false, hook)
	if err != nil {
		t.Fatalf("Open with %s: %v (a host name passes the startup check)", hook, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- in.Serve(ctx) }()
	t.Cleanup(func() { stop(); <-served })

	db, err := store.Open(context.Background(), databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	k := signertest.Key(5)
	if err := db.CreateAgent(context.Background(), store.NewAgent{UID: "agent-0123456789abcdef01234567", Kid: k.KeyID(), JWK: k.Public.JWK.MarshalPublic(), Now: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	var cur store.WebhookCursor
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		cs, err := db.WebhookCursors(context.Background())
		if err == nil && len(cs) == 1 && cs[0].Attempts > 0 {
			cur = cs[0]
			break
		}
	}
	if cur.Attempts == 0 || !strings.Contains(cur.LastError, "non-public address") {
		t.Errorf("cursor %+v; want a failed attempt naming the non-public address", cur)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the receiver accepted %d connections, want 0", n)
	}
}

// TestWebhookStartupLogShowsNoPath: the line Open logs listing the
// webhooks names a Slack-style and a Discord-style URL by host and
// digest, without the secret in its path.
func TestWebhookStartupLogShowsNoPath(t *testing.T) {
	t.Parallel()
	hooks := []string{"http://127.0.0.1:9/services/T0A1B2C3D/B0E4F5G6H/s3cretSlack", "http://127.0.0.1:9/api/webhooks/123456789012345678/s3cretDiscord"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	in, err := refserver.Open(context.Background(), refserver.Options{DatabaseURL: "sqlite::memory:", Listener: ln, Migrate: true,
		Webhooks: []string{strings.Join(hooks, ",")}, WebhookAllowPrivate: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	in.Close()
	out := logs.String()
	if strings.Contains(out, "s3cret") || strings.Contains(out, "/services/") || strings.Contains(out, "/api/webhooks") {
		t.Errorf("the startup log shows a webhook's path:\n%s", out)
	}
	for _, h := range hooks {
		if !strings.Contains(out, redact.HostOnly(h)) {
			t.Errorf("the startup log does not name %s:\n%s", redact.HostOnly(h), out)
		}
	}
}
