package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// apiFixture is a running server (idcli server start) on a migrated
// database, and the operator tokens made for it.
type apiFixture struct {
	t       *testing.T
	dir, db string
	srv     *startedServer
	tokens  []string // every operator token made, none of which may show
	outputs strings.Builder
	uids    []string
	kid     string // the key of uids[0]
	fullTok string // every scope
	readTok string // agents:read only
}

func newAPIFixture(t *testing.T, databaseURL string, serverFlags ...string) *apiFixture {
	t.Helper()
	f := &apiFixture{t: t, dir: t.TempDir(), db: databaseURL}
	if r := runCLI(context.Background(), f.dir, nil, "server", "db:migrate", "--database-url", f.db); r.err != nil {
		t.Fatal(r.err)
	}
	f.srv = startServerOn(t, freePort(t), f.dir, f.db, append([]string{"--bind", "127.0.0.1"}, serverFlags...)...)
	f.fullTok = f.operator("full", strings.Join(store.Scopes(), ","), "24h")
	f.readTok = f.operator("reader", store.ScopeAgentsRead, "24h")
	for i := range 3 {
		key := signertest.Key(byte(0xe0 + i))
		reg := clitest.MustSend(t, http.DefaultClient, f.srv.registerReq(t, key))
		var body struct{ UID string }
		if err := json.Unmarshal([]byte(reg.Body), &body); err != nil || reg.Status != http.StatusCreated {
			t.Fatalf("register: %d %s", reg.Status, reg.Body)
		}
		f.uids = append(f.uids, body.UID)
		if i == 0 {
			f.kid = key.KeyID()
		}
	}
	return f
}

// operator makes an operator token on the database.
func (f *apiFixture) operator(name, scopes, expires string) string {
	f.t.Helper()
	r := runCLI(context.Background(), f.dir, map[string]string{"DATABASE_URL": f.db},
		"server", "operators", "create", name, "--scopes", scopes, "--expires", expires, "--json")
	var created struct{ Token string }
	if r.err != nil || json.Unmarshal([]byte(r.stdout), &created) != nil {
		f.t.Fatalf("operators create %s: %v\n%s", name, r.err, r.stderr)
	}
	f.tokens = append(f.tokens, created.Token)
	return created.Token
}

// api runs idcli server args on the admin API (--server, unless args
// give it) with token in the environment (none when ""); everything it prints is kept for the check
// that no token shows.
func (f *apiFixture) api(token string, args ...string) cliResult {
	f.t.Helper()
	env := map[string]string{"USER": "tester"}
	if token != "" {
		env["AGENTID_OPERATOR_TOKEN"] = token
	}
	if !slices.Contains(args, "--server") {
		args = append(args, "--server", f.srv.base)
	}
	r := runCLI(context.Background(), f.dir, env, append([]string{"server"}, args...)...)
	f.outputs.WriteString(r.stdout + r.stderr)
	if r.err != nil {
		f.outputs.WriteString(r.err.Error())
	}
	return r
}

// ok is api with the full token, failing the test on an error.
func (f *apiFixture) ok(args ...string) cliResult {
	f.t.Helper()
	r := f.api(f.fullTok, args...)
	if r.err != nil {
		f.t.Fatalf("idcli server %s --server: %v\n%s", strings.Join(args, " "), r.err, r.stderr)
	}
	return r
}

// onDB runs idcli server args on the database.
func (f *apiFixture) onDB(args ...string) cliResult {
	f.t.Helper()
	r := runCLI(context.Background(), f.dir, map[string]string{"DATABASE_URL": f.db, "USER": "tester"}, append([]string{"server"}, args...)...)
	if r.err != nil {
		f.t.Fatalf("idcli server %s: %v\n%s", strings.Join(args, " "), r.err, r.stderr)
	}
	return r
}

// same runs args on the database and on the admin API and wants the
// same output.
func (f *apiFixture) same(args ...string) string {
	f.t.Helper()
	db, api := f.onDB(args...), f.ok(args...)
	if db.stdout != api.stdout {
		f.t.Errorf("idcli server %s: the admin API printed\n%s\nthe database\n%s", strings.Join(args, " "), api.stdout, db.stdout)
	}
	return api.stdout
}

// TestServerOpsOverAPI: the operator's commands on the admin API of a
// running server (PostgreSQL and SQLite) with an operator token print
// what they print on the database, --json included: agents list (paged),
// show, disable and enable with a reason, keys revoke with a reason,
// tokens create, list and revoke, and the audit trail (by agent, action,
// time or invitation token), which names the operator token as the actor
// of each change with its reason.
func TestServerOpsOverAPI(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			f := newAPIFixture(t, b.URL(t))
			uid := f.uids[0]

			page := f.same("agents", "list", "--limit", "2")
			if !strings.Contains(page, "⮕ next page: [idcli server agents list --after ") || strings.Count(page, "agent-") != 3 {
				t.Errorf("agents list --limit 2:\n%s", page)
			}
			f.same("agents", "list", "--limit", "2", "--json")
			f.same("agents", "list", "--after", f.uids[0])
			f.same("agents", "show", uid)
			f.same("agents", "show", uid, "--json")

			if out := f.ok("agents", "disable", uid, "--reason", "lost laptop").stdout; !strings.HasPrefix(out, "✔ agent "+uid+" disabled") {
				t.Errorf("disable: %q", out)
			}
			if out := f.ok("agents", "disable", uid, "--reason", "again").stdout; !strings.HasPrefix(out, "• agent "+uid+" already disabled") {
				t.Errorf("disable again: %q", out)
			}
			f.same("agents", "list", "--disabled")
			f.same("agents", "show", uid, "--json")
			if out := f.ok("agents", "enable", uid, "--json").stdout; !strings.Contains(out, `"changed":true`) {
				t.Errorf("enable --json: %s", out)
			}
			for _, kid := range []string{"../../../invitations/1", f.kid[:42] + "/", "..", f.kid + "x"} {
				if r := f.api(f.fullTok, "keys", "revoke", uid, kid); r.err == nil || !strings.Contains(r.err.Error(), "is not a key id") {
					t.Errorf("keys revoke %q: %v, want it refused as no key id", kid, r.err)
				}
			}
			if out := f.ok("keys", "revoke", uid, f.kid, "--reason", "leaked").stdout; !strings.Contains(out, "✔ key "+f.kid+" of "+uid+" revoked") ||
				!strings.Contains(out, "has no active key left") {
				t.Errorf("keys revoke:\n%s", out)
			}
			if out := f.ok("keys", "revoke", uid, f.kid, "--json").stdout; !strings.Contains(out, `"changed":false,"active_keys":0`) {
				t.Errorf("keys revoke again --json: %s", out)
			}
			dash := dashKeys(1)[0] // a kid beginning with -, a path segment of the route
			reg := clitest.MustSend(t, http.DefaultClient, f.srv.registerReq(t, dash))
			if dashUID := jsonField(t, reg.Body, "uid"); !strings.Contains(f.ok("keys", "revoke", dashUID, dash.KeyID()).stdout, "✔ key "+dash.KeyID()+" of "+dashUID+" revoked") {
				t.Errorf("keys revoke UID -KID over the admin API: %d %s", reg.Status, reg.Body)
			}

			var inv struct {
				Token  string
				Invite store.InviteInfo
			}
			if err := json.Unmarshal([]byte(f.ok("tokens", "create", "--uses", "3", "--note", "for ci", "--json").stdout), &inv); err != nil ||
				!strings.HasPrefix(inv.Token, "agentid_inv_") || inv.Invite.UsesLeft != 3 || inv.Invite.Note != "for ci" {
				t.Errorf("tokens create --json: %v %+v", err, inv)
			}
			f.same("tokens", "list")
			f.same("tokens", "list", "--json")
			if out := f.ok("tokens", "revoke", "1").stdout; out != "✔ invitation token 1 revoked\n" {
				t.Errorf("tokens revoke: %q", out)
			}
			if r := f.api(f.fullTok, "tokens", "revoke", "99"); r.err == nil || !strings.Contains(r.err.Error(), "no such invitation token") {
				t.Errorf("tokens revoke 99: %v", r.err)
			}
			if r := f.api(f.fullTok, "agents", "show", "agent-0000000000000000000000ff"); r.err == nil || !strings.Contains(r.err.Error(), "no such agent") {
				t.Errorf("agents show of no agent: %v", r.err)
			}

			f.same("audit")
			f.same("audit", "--agent", uid, "--json")
			var trail auditRows
			if err := json.Unmarshal([]byte(f.ok("audit", "--agent", uid, "--limit", "3", "--json").stdout), &trail); err != nil || len(trail.Events) != 3 {
				t.Fatalf("audit --agent: %v %+v", err, trail)
			}
			for i, w := range []struct{ action, reason string }{{store.ActionKeyRevoke, "leaked"}, {store.ActionEnable, ""}, {store.ActionDisable, "lost laptop"}} {
				e := trail.Events[i]
				if e.Action != w.action || e.Reason != w.reason || e.Actor != "operator:full" || e.RequestID == "" {
					t.Errorf("audit event %d: %+v, want %s by operator:full, reason %q, with a request id", i, e, w.action, w.reason)
				}
			}
			next := f.same("audit", "--agent", uid, "--limit", "2")
			if !strings.Contains(next, "--before ") {
				t.Errorf("audit --limit 2 has no next page:\n%s", next)
			}
			f.same("audit", "--action", store.ActionInviteCreate, "--since", "1h")
			if out := f.same("audit", "--invitation", "1"); strings.Count(out, "\n") != 2 || !strings.Contains(out, store.ActionInviteRevoke) ||
				!strings.Contains(out, store.ActionInviteCreate) {
				t.Errorf("audit --invitation 1, want its creation and revocation:\n%s", out)
			}
			f.same("audit", "--invitation", "1", "--json", "--limit", "1")

			f.noToken(t)
		})
	}
}

// noToken fails t if any output of the fixture's commands, or the
// server's log, holds an operator token.
func (f *apiFixture) noToken(t *testing.T) {
	t.Helper()
	logs := f.outputs.String() + f.srv.stdout.String() + f.srv.stderr.String()
	for _, tok := range f.tokens {
		if strings.Contains(logs, tok) || strings.Contains(logs, tok[len(store.OperatorTokenPrefix):]) {
			t.Errorf("an operator token shows in the output or the server's log")
		}
	}
}

// TestServerOpsAPIRefusals: on the admin API, a token without the scope
// a command needs is refused naming the scope; no token, an unknown,
// a revoked or an expired one are refused, each on one clear line; no
// refusal or output holds the token. The token is read from
// --token-file (its trailing newline trimmed; a file others may read is
// warned about), and no flag takes the token itself.
func TestServerOpsAPIRefusals(t *testing.T) {
	t.Parallel()
	f := newAPIFixture(t, dbtest.SQLiteURL(t))
	uid := f.uids[1]
	refused := func(token string, want string, args ...string) {
		t.Helper()
		r := f.api(token, args...)
		if r.err == nil || !strings.Contains(r.err.Error(), want) || strings.Contains(r.err.Error(), "\n") {
			t.Errorf("idcli server %s with token %q…: %v, want one line with %q", strings.Join(args, " "), token[:min(len(token), 8)], r.err, want)
		}
		if r.stdout != "" {
			t.Errorf("a refused command printed %q", r.stdout)
		}
	}
	for _, c := range []struct {
		scope string
		args  []string
	}{
		{store.ScopeAgentsWrite, []string{"agents", "disable", uid, "--reason", "no"}},
		{store.ScopeAgentsWrite, []string{"agents", "enable", uid}},
		{store.ScopeKeysRevoke, []string{"keys", "revoke", uid, f.kid}},
		{store.ScopeTokensWrite, []string{"tokens", "create"}},
		{store.ScopeTokensWrite, []string{"tokens", "list"}},
		{store.ScopeTokensWrite, []string{"tokens", "revoke", "1"}},
		{store.ScopeAuditRead, []string{"audit"}},
	} {
		refused(f.readTok, "the operator token lacks the scope "+c.scope+":", c.args...)
	}
	if got := f.onDB("agents", "show", uid).stdout; !strings.Contains(got, "state:      active") {
		t.Errorf("a refused disable disabled the agent:\n%s", got)
	}
	if r := f.api(f.readTok, "agents", "list"); r.err != nil {
		t.Errorf("agents list with agents:read: %v", r.err)
	}

	refused("", "no operator token: set AGENTID_OPERATOR_TOKEN or give --token-file PATH", "agents", "list")
	refused("aidop_"+strings.Repeat("A", 43), "the token is missing, unknown, revoked or expired (the operator token is not known", "agents", "list")
	refused("not-a-token", "AGENTID_OPERATOR_TOKEN does not hold an operator token", "agents", "list")
	gone := f.operator("gone", store.ScopeAgentsRead, "24h")
	f.onDB("operators", "revoke", "gone")
	refused(gone, "the token is missing, unknown, revoked or expired (the operator token was revoked", "agents", "list")
	brief := f.operator("brief", store.ScopeAgentsRead, "1s")
	time.Sleep(1100 * time.Millisecond)
	refused(brief, "the token is missing, unknown, revoked or expired (the operator token expired", "agents", "list")

	// --token-file: a trailing newline is trimmed; the variable is not read.
	path := filepath.Join(f.dir, "operator-token")
	if err := os.WriteFile(path, []byte(f.readTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := f.api("", "agents", "list", "--token-file", "operator-token")
	if r.err != nil || !strings.Contains(r.stdout, uid) || r.stderr != "" {
		t.Errorf("--token-file (0600, trailing newline): %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	r = f.api(f.fullTok, "agents", "disable", uid, "--token-file", path)
	if r.err == nil || !strings.Contains(r.err.Error(), "lacks the scope agents:write") {
		t.Errorf("--token-file is read before AGENTID_OPERATOR_TOKEN: %v", r.err)
	}
	if !strings.Contains(r.stderr, "warning: --token-file "+path+" may be read by other users (mode 0644)") {
		t.Errorf("no warning about a token file others may read: %q", r.stderr)
	}
	if err := os.WriteFile(path, []byte(f.readTok+"\n"+f.fullTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused("", "--token-file "+path+" does not hold an operator token", "agents", "list", "--token-file", path)

	// No flag holds the token: --token is unknown, and no command's help
	// offers a flag but --token-file for it.
	refused(f.readTok, "unknown flag --token", "agents", "list", "--token", f.readTok)
	for _, c := range [][]string{{"agents", "list"}, {"agents", "disable"}, {"keys", "revoke"}, {"tokens", "create"}, {"audit"}} {
		help := runCLI(context.Background(), f.dir, nil, append(append([]string{"server"}, c...), "--help")...).stdout
		if !strings.Contains(help, "--token-file PATH") || strings.Count(help, "--token") != strings.Count(help, "--token-file") {
			t.Errorf("idcli server %s --help: want --token-file and no other token flag:\n%s", strings.Join(c, " "), help)
		}
	}
	refused(f.readTok, "--token-file is for the admin API: give --server URL too", "agents", "list", "--token-file", path, "--server", "")
	refused(f.readTok, "give --server (the admin API) or --database-url (the database), not both", "agents", "list", "--database-url", f.db)
	refused(f.readTok, "plain http would send the operator token in clear", "agents", "list", "--server", "http://agentid.example")
	refused(f.readTok, "is --server the service's HOSTNAME", "agents", "list", "--server", "http://127.0.0.1:"+f.srv.port)
	f.noToken(t)
}

// TestServerAgentsListPages: agents list reads pages of at most
// store.MaxAgentPage until it has --limit agents, on the database and on
// the admin API alike: over a page's worth, it prints every agent once,
// in order, and the next page's command only when there is one.
func TestServerAgentsListPages(t *testing.T) {
	t.Parallel()
	f := newAPIFixture(t, dbtest.SQLiteURL(t))
	ctx := context.Background()
	db, err := store.Open(ctx, f.db)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	total := store.MaxAgentPage + 2 - len(f.uids)
	for i := range total {
		seed := sha256.Sum256([]byte(fmt.Sprint("list-pages-", i)))
		key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(seed[:]))
		uid := fmt.Sprintf("agent-%024x", 0x1000+i)
		if err := db.CreateAgent(ctx, store.NewAgent{UID: uid, Kid: key.KeyID(), JWK: key.Public.JWK.MarshalPublic(), Now: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	all := store.MaxAgentPage + 2

	var page struct {
		Agents []store.AgentInfo `json:"agents"`
		Next   *string           `json:"next"`
	}
	out := f.same("agents", "list", "--limit", fmt.Sprint(store.MaxAgentPage+1), "--json")
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Agents) != store.MaxAgentPage+1 || page.Next == nil ||
		*page.Next != page.Agents[store.MaxAgentPage].UID {
		t.Fatalf("list --limit %d: %v, %d agents, next %v", store.MaxAgentPage+1, err, len(page.Agents), page.Next)
	}
	seen := map[string]bool{}
	for i, a := range page.Agents {
		if seen[a.UID] || (i > 0 && a.UID <= page.Agents[i-1].UID) {
			t.Fatalf("agent %d, %s, repeated or out of order", i, a.UID)
		}
		seen[a.UID] = true
	}
	text := f.same("agents", "list", "--limit", "5000")
	if n := strings.Count(text, "agent-"); n != all || strings.Contains(text, "next page") {
		t.Errorf("list --limit 5000: %d agents (want %d) and no next page:\n%s", n, all, text[len(text)-200:])
	}
	rest := f.same("agents", "list", "--after", *page.Next)
	if n := strings.Count(rest, "agent-"); n != 1 {
		t.Errorf("the page after: %d agents, want 1:\n%s", n, rest)
	}
}
