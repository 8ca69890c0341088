package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/agentstatus"
	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/store"
)

// TestAgentStatusApproval drives idcli against a server in registration
// mode approval over loopback: agent init registers the agent pending
// (and signs no directory yet), agent status shows it pending, then active
// once an operator approves it on the database, rejected with the
// operator's reason, or disabled; --json says the same.
func TestAgentStatusApproval(t *testing.T) {
	clitest.EachDatabase(t, func(t *testing.T, databaseURL string) {
		srv := clitest.StartServer(t, clitest.ServerOptions{DatabaseURL: databaseURL, Host: "127.0.0.1",
			Configure: func(c *refserver.Config) { c.Registration = refserver.RegistrationApproval }})
		ctx := context.Background()
		db, err := store.Open(ctx, databaseURL)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		octx := store.WithActor(ctx, "operator:alice")

		initAgent := func() (dir, uid string) {
			t.Helper()
			dir = t.TempDir()
			res := runCLI(t.Context(), dir, nil, "agent", "init", "--hostname", srv.URL)
			m := regexp.MustCompile(`^✔ agent created \(\.env/AGENT_UID=(agent-[0-9a-f]{24})\)\n• pending review: .*\n⮕ next run: \[idcli agent status\]\n$`).FindStringSubmatch(res.stdout)
			if res.err != nil || m == nil || res.stderr != "" {
				t.Fatalf("agent init in approval mode: %v\nstdout %q\nstderr %q", res.err, res.stdout, res.stderr)
			}
			if env, _ := os.ReadFile(filepath.Join(dir, ".env")); strings.Contains(string(env), "AGENT_DIRECTORY_SIGNED") {
				t.Errorf("a pending agent's init recorded a directory signature:\n%s", env)
			}
			return dir, m[1]
		}
		status := func(dir string) agentstatus.Status {
			t.Helper()
			res := runCLI(t.Context(), dir, nil, "agent", "status", "--json")
			var st agentstatus.Status
			if res.err != nil || json.Unmarshal([]byte(res.stdout), &st) != nil {
				t.Fatalf("agent status --json: %v\nstdout %q\nstderr %q", res.err, res.stdout, res.stderr)
			}
			return st
		}
		// waitState polls agent status until it shows want (the server
		// applies an operator's change within 1 s).
		waitState := func(dir, want string) agentstatus.Status {
			t.Helper()
			deadline := time.Now().Add(3 * time.Second)
			for {
				st := status(dir)
				if st.State == want {
					return st
				}
				if time.Now().After(deadline) {
					t.Fatalf("agent status: %+v, want state %s", st, want)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}

		dir, uid := initAgent()
		res := runCLI(t.Context(), dir, nil, "agent", "status")
		if res.err != nil || !strings.HasPrefix(res.stdout, "• agent "+uid+" is pending review at "+srv.URL+": its operator has not approved it yet\n") {
			t.Errorf("agent status, pending: %v\n%s%s", res.err, res.stdout, res.stderr)
		}
		if st := status(dir); st.State != agentstatus.StatePending || st.UID != uid || st.Hostname != srv.URL {
			t.Errorf("agent status --json, pending: %+v", st)
		}
		if res := runCLI(t.Context(), dir, nil, "agent", "init", "--hostname", srv.URL); res.err != nil || !strings.HasPrefix(res.stdout, "• agent exists") || !strings.Contains(res.stdout, "pending review") {
			t.Errorf("agent init again while pending: %v\n%s%s", res.err, res.stdout, res.stderr)
		}

		if _, _, err := db.ApproveAgent(octx, uid, "identity checked"); err != nil {
			t.Fatal(err)
		}
		waitState(dir, agentstatus.StateActive)
		res = runCLI(t.Context(), dir, nil, "agent", "status")
		if res.err != nil || !strings.HasPrefix(res.stdout, "✔ agent "+uid+" is active at "+srv.URL) {
			t.Errorf("agent status, active: %v\n%s%s", res.err, res.stdout, res.stderr)
		}
		if res := runCLI(t.Context(), dir, nil, "agent", "directory", "refresh"); res.err != nil {
			t.Errorf("agent directory refresh once approved: %v\n%s%s", res.err, res.stdout, res.stderr)
		}

		if _, _, err := db.SetAgentDisabled(octx, uid, true, "abuse"); err != nil {
			t.Fatal(err)
		}
		waitState(dir, agentstatus.StateDisabled)

		dir2, uid2 := initAgent()
		const reason = "no contact address; write to ops@example.com"
		if _, _, err := db.RejectAgent(octx, uid2, reason); err != nil {
			t.Fatal(err)
		}
		if st := waitState(dir2, agentstatus.StateRejected); st.Reason != reason {
			t.Errorf("agent status --json, rejected: %+v, want the reason %q", st, reason)
		}
		res = runCLI(t.Context(), dir2, nil, "agent", "status")
		if res.err != nil || res.stdout != "✘ agent "+uid2+" was rejected by the operator of "+srv.URL+": "+reason+"\n" {
			t.Errorf("agent status, rejected: %v\n%q%s", res.err, res.stdout, res.stderr)
		}
		if res := runCLI(t.Context(), dir2, nil, "agent", "status", "extra"); res.err == nil {
			t.Errorf("agent status with an argument: accepted\n%s", res.stdout)
		}
	})
}
