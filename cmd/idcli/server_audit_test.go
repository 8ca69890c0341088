package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
)

// auditRows is the answer of idcli server audit --json.
type auditRows struct {
	Events []struct {
		ID        uint64          `json:"id"`
		Time      time.Time       `json:"time"`
		Action    string          `json:"action"`
		Actor     string          `json:"actor"`
		Agent     string          `json:"agent"`
		Kid       string          `json:"kid"`
		Reason    string          `json:"reason"`
		RequestID string          `json:"request_id"`
		Detail    json.RawMessage `json:"detail"`
	} `json:"events"`
}

// TestServerAuditOnDatabase: on PostgreSQL and SQLite, the reasons given
// to agents disable and keys revoke reach the audit trail with the
// command as the actor; idcli server audit filters by agent, key, action,
// time and invitation token, pages with --before (keeping the filters),
// and refuses bad values (an id of 0 or above 2^63-1 too) before it opens
// the database; a reason with a control character changes nothing.
func TestServerAuditOnDatabase(t *testing.T) {
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir, dbURL := t.TempDir(), b.URL(t)
			env := map[string]string{"DATABASE_URL": dbURL, "USER": "tester"}
			cli := func(args ...string) cliResult {
				t.Helper()
				r := runCLI(ctx, dir, env, append([]string{"server"}, args...)...)
				if r.err != nil {
					t.Fatalf("idcli server %s: %v\n%s", strings.Join(args, " "), r.err, r.stderr)
				}
				return r
			}
			cli("db:migrate")
			db, err := store.Open(ctx, dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			uid, key := "agent-00000000000000000000a0d1", signertest.Key(0xd1)
			if err := db.CreateAgent(ctx, store.NewAgent{UID: uid, Kid: key.KeyID(), JWK: key.Public.JWK.MarshalPublic(), Now: time.Now().UTC()}); err != nil {
				t.Fatal(err)
			}

			bad := runCLI(ctx, dir, env, "server", "agents", "disable", uid, "--reason", "two\nlines")
			if bad.err == nil || !strings.Contains(bad.err.Error(), "--reason") {
				t.Fatalf("a reason with a newline: %v", bad.err)
			}
			cli("agents", "disable", uid, "--reason", "lost laptop")
			cli("keys", "revoke", uid, key.KeyID(), "--reason", `leaked "in" logs`)

			var all auditRows
			if err := json.Unmarshal([]byte(cli("audit", "--agent", uid, "--json").stdout), &all); err != nil {
				t.Fatal(err)
			}
			want := []struct{ action, reason, actor string }{
				{store.ActionKeyRevoke, `leaked "in" logs`, "idcli server keys revoke (user tester on "},
				{store.ActionDisable, "lost laptop", "idcli server agents disable (user tester on "},
				{store.ActionRegister, "", store.ActorDatabase},
			}
			if len(all.Events) != len(want) {
				t.Fatalf("audit --agent: %d events, want %d: %+v", len(all.Events), len(want), all.Events)
			}
			for i, w := range want {
				e := all.Events[i]
				if e.Action != w.action || e.Reason != w.reason || !strings.HasPrefix(e.Actor, w.actor) || e.Agent != uid || time.Since(e.Time) > time.Minute {
					t.Errorf("event %d: %+v, want %s by %q… reason %q", i, e, w.action, w.actor, w.reason)
				}
			}
			if all.Events[0].Kid != key.KeyID() {
				t.Errorf("key.revoked names kid %q, want %q", all.Events[0].Kid, key.KeyID())
			}

			text := cli("audit", "--agent", uid, "--limit", "2").stdout
			lines := strings.Split(strings.TrimSpace(text), "\n")
			next := "⮕ next page: [idcli server audit --agent " + uid + " --limit 2 --before " + itoa(all.Events[1].ID) + "]"
			if len(lines) != 3 || !strings.Contains(lines[0], `reason "leaked \"in\" logs"`) || lines[2] != next {
				t.Errorf("audit --limit 2:\n%s\nwant 2 rows, the reason quoted, then %s", text, next)
			}
			if page := cli("audit", "--agent", uid, "--limit", "2", "--before", itoa(all.Events[1].ID)).stdout; !strings.Contains(page, "agent.registered") || strings.Count(page, "\n") != 1 {
				t.Errorf("second page:\n%s", page)
			}
			if got := cli("audit", "--kid", key.KeyID(), "--action", store.ActionKeyRevoke).stdout; strings.Count(got, "\n") != 1 || !strings.Contains(got, "key.revoked") {
				t.Errorf("audit --kid --action:\n%s", got)
			}
			if got := cli("audit", "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)).stdout; got != "no audit events\n" {
				t.Errorf("audit --since in an hour: %q", got)
			}
			if got := cli("audit", "--since", "1h", "--action", store.ActionDisable).stdout; !strings.Contains(got, "lost laptop") {
				t.Errorf("audit --since 1h:\n%s", got)
			}
			var inv struct{ Invite store.InviteInfo }
			if err := json.Unmarshal([]byte(cli("tokens", "create", "--note", "for bob", "--json").stdout), &inv); err != nil {
				t.Fatal(err)
			}
			other := cli("tokens", "create", "--note", "for carol").stdout
			cli("tokens", "revoke", itoa(inv.Invite.ID))
			var trail auditRows
			if err := json.Unmarshal([]byte(cli("audit", "--invitation", itoa(inv.Invite.ID), "--json").stdout), &trail); err != nil {
				t.Fatal(err)
			}
			if len(trail.Events) != 2 || trail.Events[0].Action != store.ActionInviteRevoke || trail.Events[1].Action != store.ActionInviteCreate ||
				trail.Events[1].Reason != "for bob" {
				t.Errorf("audit --invitation %d (other: %s): %+v, want its revocation then its creation", inv.Invite.ID, other, trail.Events)
			}
			wantNext := "⮕ next page: [idcli server audit --invitation " + itoa(inv.Invite.ID) + " --limit 1 --before " + itoa(trail.Events[0].ID) + "]"
			if got := cli("audit", "--invitation", itoa(inv.Invite.ID), "--limit", "1").stdout; !strings.HasSuffix(got, wantNext+"\n") {
				t.Errorf("audit --invitation --limit 1:\n%s\nwant it to end with %s", got, wantNext)
			}
			if got := cli("audit", "--invitation", "9223372036854775807").stdout; got != "no audit events\n" {
				t.Errorf("audit --invitation of no token: %q", got)
			}
			for _, args := range [][]string{{"--limit", "0"}, {"--limit", "1001"}, {"--since", "yesterday"}, {"--agent", "bob"},
				{"--kid", "nokid"}, {"--action", "agent.exploded"}, {"--actor", "a\x1b[2Jb"},
				{"--invitation", "0"}, {"--invitation", "-1"}, {"--invitation", "9223372036854775808"}, {"--invitation", "1e3"},
				{"--invitation", "+1"}, {"--invitation", " 1"}, {"--before", "0"}, {"--before", "18446744073709551616"}} {
				r := runCLI(ctx, dir, map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none"}, append([]string{"server", "audit"}, args...)...)
				if r.err == nil || !strings.Contains(r.err.Error(), args[0]) {
					t.Errorf("audit %v: %v, want an error naming %s (before any database)", args, r.err, args[0])
				}
			}
		})
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
