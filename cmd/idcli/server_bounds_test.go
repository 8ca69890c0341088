package main

import (
	"context"
	"strings"
	"testing"

	"github.com/agentid/agentid/refserver/dbtest"
)

// TestServerIDsAboveInt64: ids above the largest signed 64-bit integer
// (which no row has, and the database drivers refuse to send), or 0, given
// to agents list --invitation, audit --invitation and --before and tokens
// revoke, and the other numbers of the operator commands out of their
// range, are refused with a message naming the flag or the id, on the
// database and on the admin API (PostgreSQL and SQLite), never as a
// database failure nor with the store's prefix, and before any call:
// with no database or server to answer, the message is the same.
func TestServerIDsAboveInt64(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			f := newAPIFixture(t, b.URL(t))
			for _, c := range []struct {
				args []string
				want string
			}{
				{[]string{"agents", "list", "--invitation", "9223372036854775808"}, "9223372036854775807"},
				{[]string{"agents", "list", "--invitation", "0"}, "--invitation"},
				{[]string{"audit", "--before", "18446744073709551615"}, "9223372036854775807"},
				{[]string{"audit", "--before", "0"}, "--before"},
				{[]string{"audit", "--invitation", "9223372036854775808"}, "9223372036854775807"},
				{[]string{"audit", "--invitation", "-1"}, "--invitation"},
				{[]string{"audit", "--limit", "1001"}, "--limit 1001"},
				{[]string{"agents", "list", "--limit", "0"}, "--limit 0"},
				{[]string{"tokens", "revoke", "9223372036854775808"}, "9223372036854775807"},
				{[]string{"tokens", "revoke", "0"}, `"0" is not a token id`},
				{[]string{"tokens", "create", "--uses", "1000001"}, "--uses 1000001"},
				{[]string{"tokens", "create", "--expires", "1500ms"}, "--expires 1.5s"},
				{[]string{"tokens", "create", "--expires", "87601h"}, "--expires 87601h"},
			} {
				var want string
				for where, r := range map[string]cliResult{
					"database":  runCLI(context.Background(), f.dir, map[string]string{"DATABASE_URL": f.db, "USER": "tester"}, append([]string{"server"}, c.args...)...),
					"admin API": f.api(f.fullTok, c.args...),
					"no database": runCLI(context.Background(), f.dir, map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none"},
						append([]string{"server"}, c.args...)...),
					"no server": f.api(f.fullTok, append(c.args, "--server", "http://127.0.0.1:1")...),
				} {
					msg := ""
					if r.err != nil {
						msg = r.err.Error()
					}
					if r.err == nil || !strings.Contains(msg, c.want) || strings.Contains(msg, "store:") ||
						strings.Contains(msg, "unavailable") || strings.Contains(msg, "encode") || strings.Contains(msg, "high bit") {
						t.Errorf("idcli server %s on the %s: %v\n%s%s, want a refusal naming %s", strings.Join(c.args, " "), where, r.err, r.stdout, r.stderr, c.want)
					}
					if want == "" {
						want = msg
					} else if msg != want {
						t.Errorf("idcli server %s on the %s: %q, want what the others say, %q", strings.Join(c.args, " "), where, msg, want)
					}
				}
			}
		})
	}
}
