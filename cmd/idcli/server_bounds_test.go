package main

import (
	"context"
	"strings"
	"testing"

	"github.com/agentid/agentid/refserver/dbtest"
)

// TestServerIDsAboveInt64: ids above the largest signed 64-bit integer
// (which no row has, and the database drivers refuse to send) given to
// agents list --invitation, audit --before and tokens revoke are refused
// with a message naming the id, on the database and on the admin API
// (PostgreSQL and SQLite), never as a database failure.
func TestServerIDsAboveInt64(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			f := newAPIFixture(t, b.URL(t))
			for _, args := range [][]string{
				{"agents", "list", "--invitation", "9223372036854775808"},
				{"audit", "--before", "18446744073709551615"},
				{"tokens", "revoke", "9223372036854775808"},
			} {
				for where, r := range map[string]cliResult{
					"database":  runCLI(context.Background(), f.dir, map[string]string{"DATABASE_URL": f.db, "USER": "tester"}, append([]string{"server"}, args...)...),
					"admin API": f.api(f.fullTok, args...),
				} {
					msg := ""
					if r.err != nil {
						msg = r.err.Error()
					}
					if r.err == nil || !strings.Contains(msg, args[len(args)-1]) && !strings.Contains(msg, "9223372036854775807") ||
						strings.Contains(msg, "unavailable") || strings.Contains(msg, "encode") || strings.Contains(msg, "high bit") {
						t.Errorf("idcli server %s on the %s: %v\n%s%s, want a refusal naming the id", strings.Join(args, " "), where, r.err, r.stdout, r.stderr)
					}
				}
			}
		})
	}
}
