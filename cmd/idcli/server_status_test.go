package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer/agent"
)

// TestServerStatusNotPublic: `idcli server start` with its default flags
// does not serve the status page, which lists agents' uids with their
// request counts, on the public service host (nor on agent hosts);
// --status-page turns it on. (/metrics is never there:
// TestServerMetricsOffThePublicHost.)
func TestServerStatusNotPublic(t *testing.T) {
	t.Parallel()
	for _, flags := range [][]string{nil, {"--status-page"}} {
		srv := startServer(t, flags...)
		agentDir := t.TempDir()
		if r := runCLI(t.Context(), agentDir, nil, "agent", "init", "--hostname", srv.base); r.err != nil {
			t.Fatalf("agent init: %v\n%s", r.err, r.stderr)
		}
		uid := clitest.EnvValue(t, agentDir, agent.EnvUID)
		if r := runCLI(t.Context(), agentDir, nil, "agent", "curl", srv.base+"/whoami"); r.err != nil {
			t.Fatalf("agent curl /whoami: %v\n%s", r.err, r.stderr)
		}
		public := len(flags) > 0
		page := clitest.MustDo(t, http.MethodGet, srv.base+"/status", "", nil, nil)
		if shown := page.Status == 200 && strings.Contains(page.Body, uid); shown != public {
			t.Errorf("flags %v: GET /status on the service host = %d (names the agent: %v), want it served: %v\n%s", flags, page.Status, shown, public, page.Body)
		}
		if !public && page.Status != 404 {
			t.Errorf("flags %v: GET /status = %d, want 404", flags, page.Status)
		}
		agentHost := uid + "." + strings.TrimPrefix(srv.base, "http://")
		if a := clitest.MustDo(t, http.MethodGet, srv.base+"/status", agentHost, nil, nil); a.Status != 404 || strings.Contains(a.Body, "agentid server status") {
			t.Errorf("flags %v: GET /status on the agent host = %d, want 404", flags, a.Status)
		}
	}
}
