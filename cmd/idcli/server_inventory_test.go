package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer/signertest"
)

// TestServerMetricsCountAgentsAndKeys: `idcli server start
// --metrics-listen` exposes the agents by state and the keys by state as
// the database holds them after registrations, a rotation, a disable and
// a revocation (by the operators' commands), on SQLite and PostgreSQL;
// without an identity in them; counted once per interval, however often
// scraped.
func TestServerMetricsCountAgentsAndKeys(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir, dbURL := t.TempDir(), b.URL(t)
			if r := runCLI(ctx, dir, nil, "server", "db:migrate", "--database-url", dbURL); r.err != nil {
				t.Fatal(r.err)
			}
			maddr := "127.0.0.1:" + freePort(t)
			s := startServerOn(t, freePort(t), dir, dbURL, "--bind", "127.0.0.1", "--metrics-listen", maddr)
			ops := func(args ...string) {
				t.Helper()
				if r := runCLI(ctx, dir, map[string]string{"DATABASE_URL": dbURL}, append([]string{"server"}, args...)...); r.err != nil {
					t.Fatalf("idcli server %s: %v", strings.Join(args, " "), r.err)
				}
			}
			var uids []string
			for i := range 4 {
				uids = append(uids, clitest.Register(t, nil, s.base, signertest.Key(byte(0xd0+i))))
			}
			// uids[0] rotates (one key active, one revoked), uids[1] is
			// disabled, uids[2]'s only key is revoked, uids[3] stays.
			if st, code := s.send(t, clitest.RotateRequest(t, s.base, uids[0], signertest.Key(0xd0), signertest.Key(0xdf))); st != http.StatusOK {
				t.Fatalf("rotate: %d %s", st, code)
			}
			ops("agents", "disable", uids[1])
			ops("keys", "revoke", "--", uids[2], signertest.Key(0xd2).KeyID())

			metricsURL := "http://" + maddr + "/metrics"
			m := clitest.MustDo(t, http.MethodGet, metricsURL, "", nil, nil)
			for _, want := range []string{
				`agentid_agents{state="active"} 2`, `agentid_agents{state="disabled"} 1`, `agentid_agents{state="no_keys"} 1`,
				`agentid_agents{state="pending"} 0`, `agentid_agents{state="rejected"} 0`,
				`agentid_keys{state="active"} 3`, `agentid_keys{state="revoked"} 2`,
			} {
				if !strings.Contains(m.Body, want+"\n") {
					t.Errorf("GET /metrics lacks %q:\n%s", want, grepLines(m.Body, "agentid_agents", "agentid_keys"))
				}
			}
			for _, uid := range uids {
				if strings.Contains(m.Body, uid) {
					t.Errorf("GET /metrics names agent %s", uid)
				}
			}
			// A registration right after a count shows at the next count
			// (15 s on), not at the next scrape.
			clitest.Register(t, nil, s.base, signertest.Key(0xd9))
			again := clitest.MustDo(t, http.MethodGet, metricsURL, "", nil, nil)
			if got, want := grepLines(again.Body, "agentid_agents", "agentid_keys", "agentid_inventory"), grepLines(m.Body, "agentid_agents", "agentid_keys", "agentid_inventory"); got != want {
				t.Errorf("a second scrape within 15 s counted again:\n%s\nwant the first count:\n%s", got, want)
			}
		})
	}
}

// grepLines returns the lines of text beginning with one of prefixes.
func grepLines(text string, prefixes ...string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
