package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer/agent"
)

// TestServerMetricsOffThePublicHost: `idcli server start` serves no
// /metrics on the public service host (nor on agent hosts), whatever its
// flags; with --metrics-listen (or METRICS_LISTEN) it serves them on that
// address of their own, and says where.
func TestServerMetricsOffThePublicHost(t *testing.T) {
	t.Parallel()
	flagAddr := "127.0.0.1:" + freePort(t)
	envAddr := "127.0.0.1:" + freePort(t)
	dotenvAddr := "127.0.0.1:" + freePort(t)
	for _, tc := range []struct {
		name    string
		flags   []string
		environ map[string]string
		dotenv  string // ./.env, if not ""
		metrics string // the metrics address, "" for none
	}{
		{"defaults", nil, nil, "", ""},
		{"--metrics-listen", []string{"--metrics-listen", flagAddr}, nil, "", flagAddr},
		{"METRICS_LISTEN", nil, map[string]string{"METRICS_LISTEN": envAddr}, "", envAddr},
		{"METRICS_LISTEN in .env", nil, nil, "METRICS_LISTEN=" + dotenvAddr + "\n", dotenvAddr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.dotenv != "" {
				if err := os.WriteFile(filepath.Join(dir, ".env"), []byte(tc.dotenv), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			port := freePort(t)
			srv := startServerCmd(t, dir, tc.environ, append([]string{"--port", port, "--database-url", migratedSQLite(t, dir)}, tc.flags...)...)
			base := "http://localhost:" + port
			agentDir := t.TempDir()
			if r := runCLI(t.Context(), agentDir, nil, "agent", "init", "--hostname", base); r.err != nil {
				t.Fatalf("agent init: %v\n%s", r.err, r.stderr)
			}
			uid := clitest.EnvValue(t, agentDir, agent.EnvUID)
			if r := runCLI(t.Context(), agentDir, nil, "agent", "curl", base+"/whoami"); r.err != nil {
				t.Fatalf("agent curl /whoami: %v\n%s", r.err, r.stderr)
			}
			agentHost := uid + "." + strings.TrimPrefix(base, "http://")
			for _, host := range []string{"", agentHost} {
				for _, path := range []string{"/metrics", "/metrics/", "/Metrics"} {
					if a := clitest.MustDo(t, http.MethodGet, base+path, host, nil, nil); a.Status != http.StatusNotFound || strings.Contains(a.Body, "agentid_") {
						t.Errorf("GET %s on %q (the public listener) = %d, want 404 without metrics:\n%.200s", path, host, a.Status, a.Body)
					}
				}
			}
			if tc.metrics == "" {
				if strings.Contains(srv.stdout.String(), "metrics") {
					t.Errorf("stdout names a metrics address without --metrics-listen: %q", srv.stdout)
				}
				return
			}
			want := regexp.MustCompile(`(?m)^idcli server metrics on http://` + regexp.QuoteMeta(tc.metrics) + `/metrics$`)
			if !want.MatchString(srv.stdout.String()) {
				t.Errorf("stdout = %q, want a line matching %s", srv.stdout, want)
			}
			m := clitest.MustDo(t, http.MethodGet, "http://"+tc.metrics+"/metrics", "", nil, nil)
			if m.Status != http.StatusOK || !strings.Contains(m.Body, `agentid_http_requests_total{route="/whoami",method="GET",status="200"} 1`) || strings.Contains(m.Body, uid) {
				t.Errorf("GET /metrics on %s = %d (names the agent: %v), want 200 counting the whoami, without identities:\n%.300s", tc.metrics, m.Status, strings.Contains(m.Body, uid), m.Body)
			}
			// The metrics address serves nothing else.
			for _, path := range []string{"/", "/whoami", "/status"} {
				if a := clitest.MustDo(t, http.MethodGet, "http://"+tc.metrics+path, "", nil, nil); a.Status != http.StatusNotFound {
					t.Errorf("GET %s on the metrics address = %d, want 404", path, a.Status)
				}
			}
		})
	}

	// A value that is not host:port is refused before anything listens.
	for _, bad := range []string{"9090", "localhost", "http://127.0.0.1:9090"} {
		r := runCLI(t.Context(), t.TempDir(), nil, "server", "start", "--database-url", "sqlite::memory:", "--port", "0", "--metrics-listen", bad)
		if r.err == nil || !strings.Contains(r.err.Error(), "--metrics-listen") {
			t.Errorf("--metrics-listen %q: %v, want an error naming the flag", bad, r.err)
		}
	}
	// A busy address is named with its flag.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	r := runCLI(t.Context(), t.TempDir(), nil, "server", "start", "--database-url", "sqlite::memory:", "--port", "0", "--bind", "127.0.0.1", "--metrics-listen", busy.Addr().String())
	if r.err == nil || !strings.Contains(r.err.Error(), "--metrics-listen") || !strings.Contains(r.err.Error(), "already in use") {
		t.Errorf("--metrics-listen on a busy address: %v, want an error naming the flag and the address in use", r.err)
	}
}
