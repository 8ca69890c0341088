package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
)

// TestServerAgentsReview: on a server started with --registration
// approval (PostgreSQL and SQLite), new agents are pending; the operator
// approves and rejects them with idcli server agents approve|reject, on
// the admin API and on the database alike: the agents list shows the
// states, a decision is made once (the other one is refused clearly, the
// same one changes nothing), a rejection needs a reason, a token without
// agents:write is refused, the audit trail names the operator and the
// reason, and the running server applies each decision within 1 s.
func TestServerAgentsReview(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			f := newAPIFixture(t, b.URL(t), "--registration", "approval")
			approved, rejected := f.uids[0], f.uids[1]
			whoami := func(uid string, seed byte) (int, string) {
				t.Helper()
				return f.srv.send(t, clitest.WhoamiRequest(t, f.srv.base, uid, signertest.Key(seed)))
			}
			if status, code := whoami(approved, 0xe0); status != http.StatusForbidden || code != "agent_pending" {
				t.Fatalf("a new agent on --registration approval: whoami %d %s, want 403 agent_pending", status, code)
			}
			if out := f.same("agents", "list"); strings.Count(out, "pending review") != 3 {
				t.Errorf("agents list shows no pending agents:\n%s", out)
			}

			if out := f.ok("agents", "approve", approved, "--reason", "identity checked").stdout; out != "✔ agent "+approved+" approved (every instance within 1 s)\n" {
				t.Errorf("approve: %q", out)
			}
			if out := f.onDB("agents", "approve", approved).stdout; out != "• agent "+approved+" already approved\n" {
				t.Errorf("approve again on the database: %q", out)
			}
			for _, onAPI := range []bool{true, false} {
				r := runCLIFor(f, onAPI, "agents", "reject", rejected)
				if r.err == nil || !strings.Contains(r.err.Error(), "needs --reason") {
					t.Errorf("reject without a reason (API %v): %v", onAPI, r.err)
				}
				r = runCLIFor(f, onAPI, "agents", "reject", approved, "--reason", "too late")
				if r.err == nil || !strings.Contains(r.err.Error(), "was approved at") || !strings.Contains(r.err.Error(), "final") {
					t.Errorf("reject an approved agent (API %v): %v", onAPI, r.err)
				}
			}
			var ans struct {
				Agent   store.AgentInfo
				Changed bool
			}
			out := f.onDB("agents", "reject", rejected, "--reason", "no contact address", "--json").stdout
			if json.Unmarshal([]byte(out), &ans) != nil || !ans.Changed || ans.Agent.State != store.StateRejected || ans.Agent.ReviewReason != "no contact address" {
				t.Errorf("reject --json on the database: %s", out)
			}
			if r := f.api(f.fullTok, "agents", "approve", rejected); r.err == nil || !strings.Contains(r.err.Error(), "was rejected at") || !strings.Contains(r.err.Error(), "409 agent_not_pending") {
				t.Errorf("approve a rejected agent on the admin API: %v", r.err)
			}
			if r := f.api(f.readTok, "agents", "approve", f.uids[2]); r.err == nil || !strings.Contains(r.err.Error(), "lacks the scope agents:write") {
				t.Errorf("approve with agents:read: %v", r.err)
			}
			if out := f.same("agents", "show", rejected); !strings.Contains(out, `state:      rejected: "no contact address"`) {
				t.Errorf("agents show of a rejected agent:\n%s", out)
			}
			f.same("agents", "list", "--json")

			deadline := time.Now().Add(time.Second)
			for {
				s1, _ := whoami(approved, 0xe0)
				s2, c2 := whoami(rejected, 0xe1)
				if s1 == http.StatusOK && s2 == http.StatusForbidden && c2 == "agent_rejected" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("1 s after the decisions: approved whoami %d, rejected %d %s", s1, s2, c2)
				}
				time.Sleep(20 * time.Millisecond)
			}

			var trail auditRows
			if err := json.Unmarshal([]byte(f.ok("audit", "--action", store.ActionApprove, "--json").stdout), &trail); err != nil ||
				len(trail.Events) != 1 || trail.Events[0].Actor != "operator:full" || trail.Events[0].Reason != "identity checked" || trail.Events[0].Agent != approved {
				t.Errorf("audit of the approval: %v %+v", err, trail)
			}
			f.noToken(t)
		})
	}
}

// runCLIFor runs idcli server args on the fixture's admin API (with the
// full token) or on its database, and returns the result as is.
func runCLIFor(f *apiFixture, onAPI bool, args ...string) cliResult {
	if onAPI {
		return f.api(f.fullTok, args...)
	}
	return runCLI(f.t.Context(), f.dir, map[string]string{"DATABASE_URL": f.db, "USER": "tester"}, append([]string{"server"}, args...)...)
}
