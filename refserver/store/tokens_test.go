package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"gorm.io/gorm"
)

// TestOperatorTokens: a token is created once by name, shown once and
// stored as its digest; it authenticates until revoked or expired (by the
// database's clock), each refusal with its own error, none of which, nor
// any listing, holds the token.
func TestOperatorTokens(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, g *gorm.DB) {
		ctx := context.Background()
		if err := store.Migrate(ctx, g, nil); err != nil {
			t.Fatal(err)
		}
		db := store.New(g)
		use := store.OperatorUse{Method: "GET", Route: "/admin/v1/agents"}
		start := time.Now()
		token, info, err := db.CreateOperatorToken(ctx, "ci-bot", []string{"audit:read", "agents:read", "agents:read"}, 720*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if !store.ValidOperatorTokenFormat(token) || len(token) != store.OperatorTokenLen || !strings.HasPrefix(token, "aidop_") {
			t.Errorf("token %q is not of the format", token)
		}
		if info.Name != "ci-bot" || info.Prefix != token[:12] || strings.Join(info.Scopes, " ") != "agents:read audit:read" ||
			info.State != store.TokenActive || info.RevokedAt != nil || info.LastUsedAt != nil {
			t.Errorf("info = %+v", info)
		}
		if d := info.ExpiresAt.Sub(info.CreatedAt); d < 720*time.Hour-time.Second || d > 720*time.Hour+time.Second {
			t.Errorf("expires %v after creation, want 720h", d)
		}
		if skew := info.CreatedAt.Sub(start); skew < -time.Minute || skew > time.Minute {
			t.Errorf("created_at %v is far from now %v", info.CreatedAt, start)
		}
		var stored []byte
		if err := g.Raw("SELECT hash FROM operator_tokens WHERE name = ?", "ci-bot").Row().Scan(&stored); err != nil || len(stored) != 32 {
			t.Errorf("stored hash: %x, %v; want 32 bytes", stored, err)
		}
		if _, _, err := db.CreateOperatorToken(ctx, "ci-bot", []string{"agents:read"}, time.Hour); !errors.Is(err, store.ErrOperatorTokenExists) {
			t.Errorf("second ci-bot: %v, want ErrOperatorTokenExists", err)
		}

		got, err := db.AuthenticateOperator(ctx, token, use)
		if err != nil || got.Name != "ci-bot" || !got.Allows(store.ScopeAuditRead) || got.Allows(store.ScopeAgentsWrite) {
			t.Fatalf("AuthenticateOperator = %+v, %v", got, err)
		}
		// last_used_at is written at the first use, then at most once a minute.
		list, err := db.ListOperatorTokens(ctx)
		if err != nil || len(list) != 1 || list[0].LastUsedAt == nil {
			t.Fatalf("list after use = %+v, %v", list, err)
		}
		first := *list[0].LastUsedAt
		if _, err := db.AuthenticateOperator(ctx, token, use); err != nil {
			t.Fatal(err)
		}
		if list, _ := db.ListOperatorTokens(ctx); !list[0].LastUsedAt.Equal(first) {
			t.Errorf("last_used_at moved from %v to %v within a minute", first, list[0].LastUsedAt)
		}
		if err := g.Exec("UPDATE operator_tokens SET last_used_at = ?", time.Now().UTC().Add(-2*time.Minute)).Error; err != nil {
			t.Fatal(err)
		}
		if _, err := db.AuthenticateOperator(ctx, token, use); err != nil {
			t.Fatal(err)
		}
		if list, _ := db.ListOperatorTokens(ctx); !list[0].LastUsedAt.After(first.Add(-time.Second)) {
			t.Errorf("last_used_at %v not written again after two minutes", list[0].LastUsedAt)
		}

		other := "aidop_" + strings.Repeat("A", 43)
		for _, bad := range []string{other, "", token[:len(token)-1], token + "A", strings.ToUpper(token), " " + token,
			"Bearer " + token, strings.Replace(token, "aidop_", "aidop-", 1), token[:len(token)-1] + "!"} {
			if _, err := db.AuthenticateOperator(ctx, bad, use); !errors.Is(err, store.ErrOperatorTokenUnknown) {
				t.Errorf("AuthenticateOperator(%q) = %v, want ErrOperatorTokenUnknown", bad, err)
			}
		}

		short, _, err := db.CreateOperatorToken(ctx, "short", []string{"agents:read"}, 500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.AuthenticateOperator(ctx, short, use); err != nil {
			t.Fatalf("short-lived token at once: %v", err)
		}
		time.Sleep(700 * time.Millisecond)
		if _, err := db.AuthenticateOperator(ctx, short, use); !errors.Is(err, store.ErrOperatorTokenExpired) || strings.Contains(err.Error(), short) {
			t.Errorf("short-lived token after its ttl: %v, want ErrOperatorTokenExpired", err)
		}

		revoked, changed, err := db.RevokeOperatorToken(ctx, "ci-bot")
		if err != nil || !changed || revoked.State != store.TokenRevoked || revoked.RevokedAt == nil {
			t.Fatalf("revoke = %+v, %v, %v", revoked, changed, err)
		}
		if _, changed, err := db.RevokeOperatorToken(ctx, "ci-bot"); err != nil || changed {
			t.Errorf("second revoke: changed %v, %v; want false, nil", changed, err)
		}
		if _, err := db.AuthenticateOperator(ctx, token, use); !errors.Is(err, store.ErrOperatorTokenRevoked) || strings.Contains(err.Error(), token) {
			t.Errorf("revoked token: %v, want ErrOperatorTokenRevoked", err)
		}
		if _, _, err := db.RevokeOperatorToken(ctx, "nobody"); !errors.Is(err, store.ErrNoSuchOperatorToken) {
			t.Errorf("revoke nobody: %v, want ErrNoSuchOperatorToken", err)
		}
		// A revoked name stays taken: the audit trail's operator:ci-bot is one token.
		if _, _, err := db.CreateOperatorToken(ctx, "ci-bot", []string{"agents:read"}, time.Hour); !errors.Is(err, store.ErrOperatorTokenExists) {
			t.Errorf("ci-bot after revoke: %v, want ErrOperatorTokenExists", err)
		}

		list, err = db.ListOperatorTokens(ctx)
		if err != nil || len(list) != 2 || list[0].Name != "ci-bot" || list[0].State != store.TokenRevoked ||
			list[1].Name != "short" || list[1].State != store.TokenExpired {
			t.Fatalf("list = %+v, %v", list, err)
		}
		b, _ := json.Marshal(list)
		if strings.Contains(string(b), token) || strings.Contains(string(b), short) {
			t.Errorf("the listing holds a token: %s", b)
		}
		// Two creations and one revocation (the second changed nothing),
		// by the actor of the context (none here: the database), and the
		// uses recorded (the first of each token, and ci-bot's a minute on:
		// see TestOperatorTokenUse), never the token.
		audit, err := db.Audit(ctx, store.AuditQuery{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var trail []string
		for _, r := range audit {
			var d struct{ Name, Scopes string }
			json.Unmarshal(r.Detail, &d)
			trail = append(trail, r.Action+" "+r.Actor+" "+d.Name+" "+d.Scopes)
		}
		want := []string{"operator_token.revoked database ci-bot ", "operator_token.used operator:short  ",
			"operator_token.created database short agents:read", "operator_token.used operator:ci-bot  ",
			"operator_token.used operator:ci-bot  ", "operator_token.created database ci-bot agents:read audit:read"}
		if strings.Join(trail, "\n") != strings.Join(want, "\n") {
			t.Errorf("audit trail:\n%s\nwant\n%s", strings.Join(trail, "\n"), strings.Join(want, "\n"))
		}
		b, _ = json.Marshal(audit)
		if strings.Contains(string(b), token) || strings.Contains(string(b), short) || strings.Contains(string(b), token[:12]) {
			t.Errorf("the audit trail holds a token or its prefix: %s", b)
		}
	})
}

// TestOperatorTokenRequestsRefused: names, scopes and lifetimes outside
// the rules are refused before anything is written.
func TestOperatorTokenRequestsRefused(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, g *gorm.DB) {
		ctx := context.Background()
		if err := store.Migrate(ctx, g, nil); err != nil {
			t.Fatal(err)
		}
		db := store.New(g)
		for _, c := range []struct {
			name   string
			scopes []string
			ttl    time.Duration
		}{
			{"", []string{"agents:read"}, time.Hour},
			{"CI", []string{"agents:read"}, time.Hour},
			{"-ci", []string{"agents:read"}, time.Hour},
			{".ci", []string{"agents:read"}, time.Hour},
			{"ci bot", []string{"agents:read"}, time.Hour},
			{"ci/bot", []string{"agents:read"}, time.Hour},
			{"cí", []string{"agents:read"}, time.Hour},
			{strings.Repeat("a", 65), []string{"agents:read"}, time.Hour},
			{"ci", nil, time.Hour},
			{"ci", []string{"agents:read", "agents:admin"}, time.Hour},
			{"ci", []string{"Agents:Read"}, time.Hour},
			{"ci", []string{"agents:read"}, 0},
			{"ci", []string{"agents:read"}, -time.Hour},
			{"ci", []string{"agents:read"}, store.MaxOperatorTokenTTL + time.Second},
		} {
			if _, _, err := db.CreateOperatorToken(ctx, c.name, c.scopes, c.ttl); !errors.Is(err, store.ErrInvalidOperatorToken) {
				t.Errorf("CreateOperatorToken(%q, %q, %v) = %v, want ErrInvalidOperatorToken", c.name, c.scopes, c.ttl, err)
			}
		}
		if list, err := db.ListOperatorTokens(ctx); err != nil || len(list) != 0 {
			t.Errorf("after refusals: %+v, %v; want none", list, err)
		}
		if _, _, err := db.CreateOperatorToken(ctx, strings.Repeat("a", 64), store.Scopes(), store.MaxOperatorTokenTTL); err != nil {
			t.Errorf("the longest name, every scope, the longest life: %v", err)
		}
	})
}

func TestParseScopes(t *testing.T) {
	t.Parallel()
	got, err := store.ParseScopes("audit:read, agents:read agents:read\tkeys:revoke")
	if err != nil || strings.Join(got, " ") != "agents:read keys:revoke audit:read" {
		t.Errorf("ParseScopes = %q, %v", got, err)
	}
	if _, err := store.ParseScopes("agent:read"); err == nil || !strings.Contains(err.Error(), "did you mean agents:read?") {
		t.Errorf("ParseScopes(agent:read) = %v, want a suggestion", err)
	}
	for _, bad := range []string{"", " , ", "*", "agents:*", "agents:read,admin"} {
		if _, err := store.ParseScopes(bad); !errors.Is(err, store.ErrInvalidOperatorToken) {
			t.Errorf("ParseScopes(%q) = %v, want ErrInvalidOperatorToken", bad, err)
		}
	}
}

// TestOperatorTokenUse: a token's use is in the audit trail at most once
// a minute per token, in the transaction writing its last_used_at: the
// first use, and the first a minute after the last recorded, each write
// one row operator_token.used with the token's actor, the request id and
// the route (method and template, nothing of the request's values); a
// refused token writes none; a failure of the write refuses the use.
func TestOperatorTokenUse(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			g := dbtest.Migrated(t, b.URL(t))
			db := store.New(g)
			ctx := context.Background()
			token, _, err := db.CreateOperatorToken(ctx, "ci-bot", []string{store.ScopeAgentsRead}, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			other, _, err := db.CreateOperatorToken(ctx, "other", []string{store.ScopeAgentsRead}, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			uses := func() []store.AuditEvent {
				t.Helper()
				rows, err := db.Audit(ctx, store.AuditQuery{Action: store.ActionOperatorUsed})
				if err != nil {
					t.Fatal(err)
				}
				return rows
			}
			use := store.OperatorUse{Method: "DELETE", Route: "/admin/v1/agents/{uid}"}
			for i := range 3 {
				if _, err := db.AuthenticateOperator(store.WithRequestID(ctx, fmt.Sprint("req-", i)), token, use); err != nil {
					t.Fatal(err)
				}
			}
			rows := uses()
			if len(rows) != 1 {
				t.Fatalf("%d use rows after three uses within a minute, want 1", len(rows))
			}
			var detail map[string]string
			if r := rows[0]; r.Actor != "operator:ci-bot" || r.RequestID != "req-0" || r.AgentUID != "" || r.Kid != "" ||
				json.Unmarshal(r.Detail, &detail) != nil || len(detail) != 2 || detail["method"] != "DELETE" || detail["route"] != "/admin/v1/agents/{uid}" {
				t.Errorf("use row %+v (detail %s): want actor operator:ci-bot, request req-0, the method and route only", r, r.Detail)
			}
			// Another token's first use is its own row.
			if _, err := db.AuthenticateOperator(ctx, other, use); err != nil {
				t.Fatal(err)
			}
			if rows := uses(); len(rows) != 2 || rows[0].Actor != "operator:other" {
				t.Errorf("after another token's use: %+v", rows)
			}
			// A minute on (the database's clock decides; the test moves the
			// last use), the next use is recorded again; a failure of the
			// write refuses the use and records nothing.
			stale := func() {
				t.Helper()
				if err := g.Exec("UPDATE operator_tokens SET last_used_at = ? WHERE name = 'ci-bot'", time.Now().UTC().Add(-2*time.Minute)).Error; err != nil {
					t.Fatal(err)
				}
			}
			stale()
			errBoom := errors.New("boom")
			store.SetFailAfterAudit(t, store.ActionOperatorUsed, errBoom)
			if _, err := db.AuthenticateOperator(ctx, token, use); !errors.Is(err, errBoom) {
				t.Errorf("use whose record fails: %v, want %v", err, errBoom)
			}
			store.SetFailAfterAudit(t, "", nil)
			if rows := uses(); len(rows) != 2 {
				t.Errorf("%d use rows after a failed record, want 2", len(rows))
			}
			if _, err := db.AuthenticateOperator(store.WithRequestID(ctx, "req-late"), token, use); err != nil {
				t.Fatal(err)
			}
			if rows := uses(); len(rows) != 3 || rows[0].RequestID != "req-late" {
				t.Errorf("after a minute: %+v, want a third row for req-late", rows)
			}
			// Refused tokens record nothing.
			if _, _, err := db.RevokeOperatorToken(ctx, "ci-bot"); err != nil {
				t.Fatal(err)
			}
			stale()
			if _, err := db.AuthenticateOperator(ctx, token, use); !errors.Is(err, store.ErrOperatorTokenRevoked) {
				t.Fatalf("revoked: %v", err)
			}
			if _, err := db.AuthenticateOperator(ctx, "aidop_"+strings.Repeat("A", 43), use); !errors.Is(err, store.ErrOperatorTokenUnknown) {
				t.Fatalf("unknown: %v", err)
			}
			if rows := uses(); len(rows) != 3 {
				t.Errorf("%d use rows after refused tokens, want 3", len(rows))
			}
		})
	}
}
