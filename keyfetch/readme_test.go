package keyfetch_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/agent"
)

// readmeLocalExample is the body of main in the README's local-development
// example, up to the line that starts listening: the same lines, so the
// test runs the example as written (TestReadmeLocalExample checks that
// every line of the README's block is here).
func readmeLocalExample() http.Handler {
	// Agents of http://localhost:3000 sign with Signature-Agent http://<uid>.localhost:3000.
	keys := keyfetch.New(keyfetch.LocalDevelopment())
	// Authorities: the host and port clients call this API at.
	v, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{"127.0.0.1:8080", "localhost:8080"}})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		agent, _ := middleware.AgentFrom(r.Context())
		fmt.Fprintf(w, "hello %s (key %s)\n", agent.UID, agent.KeyID)
	})
	return v.Middleware(mux)
}

// readmeGoBlock returns the lines of the README's ```go block that
// contains marker.
func readmeGoBlock(t *testing.T, marker string) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(b), "```go\n")[1:] {
		code, _, _ := strings.Cut(block, "```")
		if strings.Contains(code, marker) {
			return strings.Split(code, "\n")
		}
	}
	t.Fatalf("README.md has no Go example using %s", marker)
	return nil
}

// TestReadmeLocalExample runs the README's local-development example, as
// written, against an agent registered on a real reference server on
// loopback (http://localhost:PORT, its embedded database): the agent's
// signed request verifies, its keys fetched from
// http://<uid>.localhost:PORT.
func TestReadmeLocalExample(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	inMain := false
	for _, line := range readmeGoBlock(t, "keyfetch.LocalDevelopment()") {
		switch l := strings.TrimSpace(line); {
		case l == "func main() {":
			inMain = true
		case !inMain || l == "" || l == "}" || strings.HasPrefix(l, "log.Fatal(http.ListenAndServe("):
		case !strings.Contains(string(src), "\t"+l+"\n"):
			t.Errorf("README line %q is not in readmeLocalExample: keep the two the same", l)
		}
	}
	if !inMain {
		t.Fatal("the README example has no func main")
	}

	// The reference server, as `idcli server start` runs it on this machine.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	service := fmt.Sprintf("http://localhost:%d", l.Addr().(*net.TCPAddr).Port)
	ref, err := refserver.New(refserver.Config{DB: store.New(dbtest.Migrated(t, dbtest.SQLiteURL(t))), Hostname: service})
	if err != nil {
		t.Fatal(err)
	}
	refSrv := httptest.NewUnstartedServer(ref.Handler())
	refSrv.Listener.Close()
	refSrv.Listener = l
	refSrv.Start()
	t.Cleanup(refSrv.Close)

	// An agent registered there (`idcli agent init --hostname http://localhost:PORT`).
	ctx := context.Background()
	dir, noEnv := t.TempDir(), func(string) string { return "" }
	reg, err := agent.Init(ctx, agent.InitOptions{Dir: dir, Hostname: service, Getenv: noEnv})
	if err != nil {
		t.Fatalf("agent.Init: %v", err)
	}
	creds, err := agent.Load(agent.LoadOptions{Dir: dir, Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}

	api := httptest.NewServer(readmeLocalExample())
	t.Cleanup(api.Close)
	// The README calls the API at http://127.0.0.1:8080, the authority it
	// serves: the request is signed for that address and dialled to the
	// test server's.
	apiAddr := strings.TrimPrefix(api.URL, "http://")
	dial := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, apiAddr)
	}}
	t.Cleanup(dial.CloseIdleConnections)
	client := &http.Client{Transport: creds.Transport(dial)}
	resp, err := client.Get("http://127.0.0.1:8080/hello")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	want := fmt.Sprintf("hello %s (key %s)\n", reg.UID, reg.PublicJWK.Kid)
	if resp.StatusCode != http.StatusOK || string(body) != want {
		t.Errorf("GET /hello = %d %q, want 200 %q", resp.StatusCode, body, want)
	}
}
