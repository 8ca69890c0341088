package main

import (
	"encoding/json"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer/agent"
)

// TestLocalLoop is the README's local loop, end to end, as a new user runs
// it, with nothing but idcli and real loopback networking (no test
// dialer): a reference server started with `idcli server start` on
// http://localhost:PORT, an agent registered against it with `idcli agent
// init`, `idcli proxy --trust '*.localhost:*' --allow-http --allow-private`
// in front of an echo service, and `idcli agent curl` through the proxy.
// The proxy fetches the agent's key directory at
// http://<uid>.localhost:PORT, a name keyfetch resolves to loopback itself;
// the echo service sees X-Agent-Uid. `idcli tool verify` and `idcli
// directory check` then work on the same agent with --allow-private.
func TestLocalLoop(t *testing.T) {
	t.Parallel()
	clitest.EachDatabase(t, func(t *testing.T, databaseURL string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
		hostname := "http://localhost:" + port
		serverDir, agentDir := t.TempDir(), t.TempDir()

		must := func(dir string, args ...string) cliResult {
			t.Helper()
			r := runCLI(t.Context(), dir, nil, args...)
			if r.err != nil {
				t.Fatalf("idcli %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.err, r.stdout, r.stderr)
			}
			return r
		}
		must(serverDir, "server", "init", "--hostname", hostname, "--database-url", databaseURL)
		must(serverDir, "server", "db:migrate")
		server := startCLI(t, serverDir, nil, "server", "start", "--bind", "127.0.0.1")
		server.waitFor(t, regexp.MustCompile(`idcli server listening on `+regexp.QuoteMeta(hostname)+` `))

		must(agentDir, "agent", "init", "--hostname", hostname)
		uid := clitest.EnvValue(t, agentDir, agent.EnvUID)
		origin := "http://" + uid + ".localhost:" + port

		up := newEchoUpstream(t)
		proxyURL, _ := startProxy(t, "--upstream", up.URL, "--trust", "*.localhost:*", "--agentid-service", hostname, "--allow-http", "--allow-private")

		r := must(agentDir, "agent", "curl", proxyURL+"/hello")
		var got echoBody
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("idcli agent curl %s/hello printed %q, want the echo service's JSON: %v", proxyURL, r.stdout, err)
		}
		if got.Headers.Get("X-Agent-Verdict") != "verified" || got.Headers.Get("X-Agent-Uid") != uid || got.Headers.Get("X-Agent-Id") != origin {
			t.Errorf("the echo service behind the proxy saw X-Agent-Verdict %q, X-Agent-Uid %q, X-Agent-Id %q; want verified, %s, %s",
				got.Headers.Get("X-Agent-Verdict"), got.Headers.Get("X-Agent-Uid"), got.Headers.Get("X-Agent-Id"), uid, origin)
		}
		if unsigned := clitest.MustDo(t, "GET", proxyURL+"/hello", "", nil, nil); unsigned.Status != 401 {
			t.Errorf("unsigned GET %s/hello: %d, want 401", proxyURL, unsigned.Status)
		}

		// The same agent, checked by the operator's tools.
		h := must(agentDir, "agent", "headers", "GET", proxyURL+"/hello")
		var headers map[string]string
		if err := json.Unmarshal([]byte(h.stdout), &headers); err != nil {
			t.Fatalf("idcli agent headers printed %q: %v", h.stdout, err)
		}
		v := must(t.TempDir(), "tool", "verify", "GET", proxyURL+"/hello", "--allow-http", "--allow-private",
			"--signature", headers["Signature"], "--signature-input", headers["Signature-Input"], "--signature-agent", headers["Signature-Agent"])
		checkStdout(t, v.stdout, []string{"✔ verified uid              " + uid, "✔ verified identity         " + origin}, nil)
		d := must(t.TempDir(), "directory", "check", origin, "--allow-http", "--allow-private")
		checkStdout(t, d.stdout, []string{"• status 200", "✔ directory OK: 1 key"}, nil)
	})
}
