package main

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
)

// TestServerAgentsQuery: agents list filters (state, created since, key,
// invitation) and pages, agents show with the state and the key history
// (rotated told from revoked), and agents delete, on the database and
// on the admin API alike (PostgreSQL and SQLite); bad filters are
// refused before anything is opened.
func TestServerAgentsQuery(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newAPIFixture(t, b.URL(t))
			active, noKeys, disabled := f.uids[0], f.uids[1], f.uids[2]
			f.ok("keys", "revoke", noKeys, signertest.Key(0xe1).KeyID(), "--reason", "leaked in a log")
			f.ok("agents", "disable", disabled, "--reason", "spam reports")
			db, err := store.Open(ctx, f.db)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			next := signertest.Key(0xf0)
			if _, err := db.Rotate(ctx, store.Rotation{UID: active, SigningKid: f.kid, Kid: next.KeyID(), JWK: next.Public.JWK.MarshalPublic(), Proven: true, Now: time.Now().UTC()}); err != nil {
				t.Fatal(err)
			}

			list := f.same("agents", "list")
			for _, want := range []*regexp.Regexp{
				regexp.MustCompile(active + ` .* 1 +active\n`),
				regexp.MustCompile(noKeys + ` .* 0 +no_keys \(no active key left`),
				regexp.MustCompile(disabled + ` .* 1 +disabled since \S+: "spam reports"\n`),
			} {
				if !want.MatchString(list) {
					t.Errorf("agents list: no line matching %s in\n%s", want, list)
				}
			}
			uidsOf := func(args ...string) []string {
				t.Helper()
				var page struct {
					Agents []store.AgentInfo `json:"agents"`
					Next   *string           `json:"next"`
				}
				out := f.same(append([]string{"agents", "list", "--json"}, args...)...)
				if err := json.Unmarshal([]byte(out), &page); err != nil {
					t.Fatalf("agents list %v --json: %s", args, out)
				}
				var uids []string
				for _, a := range page.Agents {
					uids = append(uids, a.UID)
				}
				return uids
			}
			for _, c := range []struct {
				args []string
				want []string
			}{
				{[]string{"--state", "no_keys"}, []string{noKeys}},
				{[]string{"--state", "disabled"}, []string{disabled}},
				{[]string{"--disabled"}, []string{disabled}},
				{[]string{"--state", "active"}, []string{active}},
				{[]string{"--state", "pending"}, nil},
				{[]string{"--kid", f.kid}, []string{active}}, // rotated away, still its
				{[]string{"--kid", next.KeyID(), "--state", "disabled"}, nil},
				{[]string{"--created-since", "1h"}, f.uids},
				{[]string{"--created-since", "2099-01-01"}, nil},
				{[]string{"--invitation", "7"}, nil},
			} {
				if got := uidsOf(c.args...); strings.Join(got, " ") != strings.Join(slices.Sorted(slices.Values(c.want)), " ") {
					t.Errorf("agents list %v: %v, want %v", c.args, got, c.want)
				}
			}
			page := f.same("agents", "list", "--limit", "1", "--created-since", "2000-01-01")
			if !strings.Contains(page, "⮕ next page: [idcli server agents list --after ") || !strings.Contains(page, " --created-since 2000-01-01T00:00:00Z --limit 1]") {
				t.Errorf("agents list --limit 1 --created-since: the next page's command misses the filters:\n%s", page)
			}

			show := f.same("agents", "show", active)
			for _, want := range []string{"state:      active\n", "keys:       1 active of 2\n",
				f.kid + "  created ", "  rotated ", next.KeyID() + "  created "} {
				if !strings.Contains(show, want) {
					t.Errorf("agents show: no %q in\n%s", want, show)
				}
			}
			show = f.same("agents", "show", noKeys)
			if !regexp.MustCompile(`revoked \S+: "leaked in a log"`).MatchString(show) || !strings.Contains(show, "state:      no_keys") {
				t.Errorf("agents show of a revoked key:\n%s", show)
			}
			var shown store.AgentInfo
			if err := json.Unmarshal([]byte(f.same("agents", "show", active, "--json")), &shown); err != nil || shown.State != store.StateActive ||
				len(shown.Keys) != 2 || shown.Keys[0].RevokedWhy != store.RevokedRotated || !shown.Keys[1].Proven {
				t.Errorf("agents show --json: %+v %v", shown, err)
			}

			if out := f.ok("agents", "delete", disabled, "--json").stdout; strings.TrimSpace(out) != `{"uid":"`+disabled+`","deleted":true}` {
				t.Errorf("agents delete --json: %q", out)
			}
			if out := f.onDB("agents", "delete", noKeys).stdout; !strings.HasPrefix(out, "✔ agent "+noKeys+" deleted with its keys") {
				t.Errorf("agents delete: %q", out)
			}
			for _, r := range []cliResult{f.api(f.fullTok, "agents", "delete", disabled),
				runCLI(ctx, f.dir, map[string]string{"DATABASE_URL": f.db}, "server", "agents", "delete", noKeys)} {
				if r.err == nil || !strings.Contains(r.err.Error(), "no such agent") {
					t.Errorf("a second delete: %v", r.err)
				}
			}
			if r := f.api(f.readTok, "agents", "delete", active); r.err == nil || !strings.Contains(r.err.Error(), "agents:write") {
				t.Errorf("delete with agents:read only: %v", r.err)
			}
			if got := uidsOf(); strings.Join(got, " ") != active {
				t.Errorf("after the deletes: %v, want [%s]", got, active)
			}
			for uid, actor := range map[string]string{disabled: "operator:full", noKeys: "idcli server agents delete (user tester on "} {
				rows, err := db.Audit(ctx, store.AuditQuery{AgentUID: uid, Action: store.ActionDelete})
				if err != nil || len(rows) != 1 || !strings.HasPrefix(rows[0].Actor, actor) {
					t.Errorf("audit of deleting %s: %+v %v, want one row by %s", uid, rows, err, actor)
				}
			}

			for _, c := range []struct {
				args []string
				want string
			}{
				{[]string{"--state", "enabled"}, "--state"},
				{[]string{"--state", "active", "--disabled"}, "--disabled"},
				{[]string{"--kid", "abc"}, "--kid"},
				{[]string{"--created-since", "soon"}, "--created-since"},
				{[]string{"--after", "bob"}, "--after"},
				{[]string{"--limit", "0"}, "--limit"},
				{[]string{"--invitation", "x"}, "invitation"},
			} {
				// No database is reachable: the flags are refused first.
				r := runCLI(ctx, f.dir, map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}, append([]string{"server", "agents", "list"}, c.args...)...)
				if r.err == nil || !strings.Contains(r.err.Error(), c.want) || strings.Contains(r.err.Error(), "127.0.0.1:1") {
					t.Errorf("agents list %v: %v, want an error naming %s", c.args, r.err, c.want)
				}
			}
			f.noToken(t)
		})
	}
}
