package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
)

// TestServerOperatorTokens: `idcli server operators create|list|revoke`
// on the database of a running `idcli server start` (PostgreSQL and
// SQLite): the token is printed once, by create, and opens the admin API
// for its scopes only, until revoked; refused names, scopes and lifetimes
// are explained; no other output (nor any log line) holds the token.
func TestServerOperatorTokens(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir := t.TempDir()
			dbURL := b.URL(t)
			if r := runCLI(ctx, dir, nil, "server", "db:migrate", "--database-url", dbURL); r.err != nil {
				t.Fatal(r.err)
			}
			srv := startServerOn(t, freePort(t), dir, dbURL, "--bind", "127.0.0.1")
			var outputs strings.Builder
			cli := func(args ...string) cliResult {
				t.Helper()
				r := runCLI(ctx, dir, map[string]string{"DATABASE_URL": dbURL, "USER": "tester"}, append([]string{"server", "operators"}, args...)...)
				outputs.WriteString(r.stdout + r.stderr)
				if r.err != nil {
					outputs.WriteString(r.err.Error())
				}
				return r
			}
			admin := func(method, path, token string) (int, string) {
				t.Helper()
				req, err := http.NewRequest(method, srv.base+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer "+token)
				return srv.send(t, req)
			}

			r := runCLI(ctx, dir, map[string]string{"DATABASE_URL": dbURL, "USER": "tester"},
				"server", "operators", "create", "ci-bot", "--scopes", "agents:read,audit:read", "--expires", "720h", "--json")
			var created struct {
				Token    string                  `json:"token"`
				Operator store.OperatorTokenInfo `json:"operator"`
			}
			if r.err != nil || json.Unmarshal([]byte(r.stdout), &created) != nil || !store.ValidOperatorTokenFormat(created.Token) ||
				created.Operator.Name != "ci-bot" || strings.Join(created.Operator.Scopes, " ") != "agents:read audit:read" {
				t.Fatalf("create --json: %v\n%s\n%s", r.err, r.stdout, r.stderr)
			}
			if strings.Contains(r.stderr, created.Token) || !strings.Contains(r.stderr, "operator token created") || !strings.Contains(r.stderr, "name=ci-bot") {
				t.Errorf("create's log line: %q", r.stderr)
			}
			token := created.Token

			text := cli("create", "reader", "--scopes", "agents:read")
			if text.err != nil || !strings.Contains(text.stdout, "✔ operator token reader created (agents:read; expires ") {
				t.Fatalf("create: %v\n%s", text.err, text.stdout)
			}
			lines := strings.Split(strings.TrimSpace(text.stdout), "\n")
			if len(lines) < 2 || !store.ValidOperatorTokenFormat(lines[1]) {
				t.Fatalf("create did not print the token on its own line:\n%s", text.stdout)
			}
			readerToken := lines[1]
			outputs.Reset() // the two creations: the only outputs allowed to hold a token

			if st, _ := admin(http.MethodGet, "/admin/v1/agents", token); st != http.StatusOK {
				t.Errorf("GET agents with ci-bot: %d, want 200", st)
			}
			if st, code := admin(http.MethodPost, "/admin/v1/agents/agent-0123456789abcdef01234567/disable", token); st != http.StatusForbidden || code != "insufficient_scope" {
				t.Errorf("disable with ci-bot: %d %s, want 403 insufficient_scope", st, code)
			}

			list := cli("list")
			if list.err != nil || !strings.Contains(list.stdout, "ci-bot") || !strings.Contains(list.stdout, created.Operator.Prefix+"…") ||
				!strings.Contains(list.stdout, "agents:read,audit:read") || strings.Count(list.stdout, " active ") != 2 {
				t.Errorf("list: %v\n%s", list.err, list.stdout)
			}
			for _, c := range []struct {
				args []string
				want string
			}{
				{[]string{"create", "ci-bot", "--scopes", "agents:read"}, "the operator token name is taken: ci-bot (names are never reused"},
				{[]string{"create", "x", "--scopes", "agents:raed"}, "did you mean agents:read?"},
				{[]string{"create", "x"}, "--scopes is required"},
				{[]string{"create", "x", "--scopes", "agents:read", "--expires", "0"}, "operator tokens always expire"},
				{[]string{"create", "x", "--scopes", "agents:read", "--expires", "9000h"}, "at most 8760h"},
				{[]string{"create", "X Y", "--scopes", "agents:read"}, `name "X Y"`},
				{[]string{"create", "--scopes", "agents:read"}, "usage: idcli server operators create NAME"},
				{[]string{"revoke", "nobody"}, "no operator token nobody in this database"},
			} {
				if r := cli(c.args...); r.err == nil || !strings.Contains(r.err.Error(), c.want) {
					t.Errorf("operators %s: %v, want an error saying %q", strings.Join(c.args, " "), r.err, c.want)
				}
			}

			rv := cli("revoke", "ci-bot", "--json")
			var revoked struct {
				Operator store.OperatorTokenInfo `json:"operator"`
				Changed  bool                    `json:"changed"`
			}
			if rv.err != nil || json.Unmarshal([]byte(rv.stdout), &revoked) != nil || !revoked.Changed || revoked.Operator.State != store.TokenRevoked {
				t.Fatalf("revoke: %v\n%s", rv.err, rv.stdout)
			}
			if r := cli("revoke", "ci-bot"); r.err != nil || !strings.Contains(r.stdout, "already revoked") {
				t.Errorf("revoke again: %v %s", r.err, r.stdout)
			}
			if st, code := admin(http.MethodGet, "/admin/v1/agents", token); st != http.StatusUnauthorized || code != "unauthorized" {
				t.Errorf("GET agents with the revoked ci-bot: %d %s, want 401 unauthorized", st, code)
			}
			if st, _ := admin(http.MethodGet, "/admin/v1/agents", readerToken); st != http.StatusOK {
				t.Errorf("GET agents with reader after revoking ci-bot: %d, want 200", st)
			}
			var listed struct {
				Operators []store.OperatorTokenInfo `json:"operators"`
			}
			if r := cli("list", "--json"); r.err != nil || json.Unmarshal([]byte(r.stdout), &listed) != nil || len(listed.Operators) != 2 ||
				listed.Operators[0].State != store.TokenRevoked || listed.Operators[0].LastUsedAt == nil {
				t.Errorf("list --json: %v %s", r.err, r.stdout)
			}
			for _, tok := range []string{token, readerToken} {
				if strings.Contains(outputs.String(), tok) || strings.Contains(srv.stdout.String()+srv.stderr.String(), tok) {
					t.Errorf("the token %s… is in an output other than its creation's, or in the server's log", tok[:10])
				}
			}
		})
	}
}
