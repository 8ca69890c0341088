package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/redact"
	"gorm.io/gorm"
)

// Capability webhook URLs: the secret is a path segment. Every secret
// contains "s3cret".
const (
	slackHook   = "https://hooks.slack.com/services/T0A1B2C3D/B0E4F5G6H/s3cretSlackXyZ0123456789"
	discordHook = "https://discord.com/api/webhooks/123456789012345678/s3cretDiscord-AbCdEf_0123456789"
)

// TestWebhookCursorStoresNoSecretPath: a Slack-style and a Discord-style
// URL, the secret in the path, leave no trace of it in webhook_cursors,
// even given a failure's cause quoting the URL (raw or through
// redact.URL); each cursor is named by its host and the first 8 hex of
// its key, the URL's SHA-256. Both databases.
func TestWebhookCursorStoresNoSecretPath(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := newAuditFixture(t, b.URL(t)).db
			for _, u := range []string{slackHook, discordHook} {
				if err := db.EnsureWebhookCursor(ctx, u); err != nil {
					t.Fatal(err)
				}
				if _, ok, err := db.ClaimWebhook(ctx, u, "me", time.Minute); !ok || err != nil {
					t.Fatalf("ClaimWebhook(%s) = %v, %v", redact.HostOnly(u), ok, err)
				}
				cause := fmt.Sprintf("webhook %s answered 500; Post %q: refused (%s)", redact.URL(u), u, u)
				if err := db.FailWebhook(ctx, u, "me", time.Minute, cause); err != nil {
					t.Fatal(err)
				}
			}
			cs, err := db.WebhookCursors(ctx)
			if err != nil || len(cs) != 2 {
				t.Fatalf("WebhookCursors = %+v, %v; want 2", cs, err)
			}
			for i, u := range []string{slackHook, discordHook} {
				sum := sha256.Sum256([]byte(u))
				key := hex.EncodeToString(sum[:])
				if cs[i].URL != redact.HostOnly(u) || !strings.HasSuffix(cs[i].URL, "#"+key[:8]) {
					t.Errorf("cursor %d named %q, want %q, ending with its key's first 8 hex", i, cs[i].URL, redact.HostOnly(u))
				}
				if want := "answered 500"; !strings.Contains(cs[i].LastError, want) || !strings.Contains(cs[i].LastError, redact.HostOnly(u)) {
					t.Errorf("cursor %d last error %q, want %q and the name", i, cs[i].LastError, want)
				}
			}
			if dump := dbtest.Dump(t, db.Gorm(), "webhook_cursors"); strings.Contains(dump, "s3cret") || strings.Contains(dump, "/services/") || strings.Contains(dump, "/api/webhooks/") {
				t.Errorf("webhook_cursors holds a webhook's path:\n%s", dump)
			}
		})
	}
}

// TestNameWebhookCursorsMigration: 20261211120000 rewrites the cursors
// written before it, whose url was the URL through redact.URL (its path
// kept, secret included), as the name the store writes now, and drops
// the URL from last_error; a row already named, and a second run, are
// left alone. Both databases.
func TestNameWebhookCursorsMigration(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, g *gorm.DB) {
		ctx := context.Background()
		if err := store.Migrate(ctx, g, nil); err != nil {
			t.Fatal(err)
		}
		if err := g.Exec("DELETE FROM "+store.MigrationsTable+" WHERE id = ?", "20261211120000").Error; err != nil {
			t.Fatal(err)
		}
		key := func(u string) string { s := sha256.Sum256([]byte(u)); return hex.EncodeToString(s[:]) }
		queryHook := "https://hooks.example/in?token=s3cretQuery"
		old := []struct{ url, stored, lastError, wantError string }{
			{slackHook, redact.URL(slackHook), "webhook " + redact.URL(slackHook) + " answered 500",
				"webhook " + redact.HostOnly(slackHook) + " answered 500"},
			{discordHook, redact.URL(discordHook), "webhook x: dial tcp: refused at /api/webhooks/123456789012345678/s3cretDiscord-AbCdEf_0123456789", ""},
			{queryHook, redact.URL(queryHook), "", ""},
			{"https://named.example/x", redact.HostOnly("https://named.example/x"), "kept", "kept"},
		}
		now := time.Now().UTC()
		for _, o := range old {
			if err := g.Exec(`INSERT INTO webhook_cursors (url_key, url, last_event_id, attempts, next_attempt_at, lease_owner, last_error, updated_at) VALUES (?, ?, 0, 0, ?, '', ?, ?)`,
				key(o.url), o.stored, now, o.lastError, now).Error; err != nil {
				t.Fatal(err)
			}
		}
		var out strings.Builder
		if err := store.Migrate(ctx, g, &out); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		if !strings.Contains(out.String(), "20261211120000 NameWebhookCursorsByHost: migrated") {
			t.Errorf("Migrate printed %q, want 20261211120000 applied", out.String())
		}
		check := func(when string) {
			cs, err := store.New(g).WebhookCursors(ctx)
			if err != nil || len(cs) != len(old) {
				t.Fatalf("%s: WebhookCursors = %+v, %v", when, cs, err)
			}
			for i, o := range old {
				if want := redact.HostOnly(o.url); cs[i].URL != want || cs[i].LastError != o.wantError {
					t.Errorf("%s: cursor %d = %q, last error %q; want %q, %q", when, i, cs[i].URL, cs[i].LastError, want, o.wantError)
				}
			}
			if dump := dbtest.Dump(t, g, "webhook_cursors"); strings.Contains(dump, "s3cret") {
				t.Errorf("%s: webhook_cursors holds a secret:\n%s", when, dump)
			}
		}
		check("after the migration")
		if err := g.Exec("DELETE FROM "+store.MigrationsTable+" WHERE id = ?", "20261211120000").Error; err != nil {
			t.Fatal(err)
		}
		if err := store.Migrate(ctx, g, nil); err != nil {
			t.Fatal(err)
		}
		check("after a second run")
	})
}
