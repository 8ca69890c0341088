package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentid/agentid/cmd/idcli/internal/bench"
	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// The tests of this file run the idcli binary itself, built once per test
// process, as a user runs it: its exit status and what main prints. They
// (and the other tests that run the binary) are not parallel at the top
// level, so the build and the child processes finish before the parallel
// tests, some of which measure latencies, start.

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// idcliBinary returns the path of the idcli binary built from this package.
func idcliBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the idcli binary: skipped with -short")
	}
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "idcli-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "idcli")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// binResult is what one run of the binary printed and its exit status.
type binResult struct {
	stdout, stderr string
	code           int
}

// runBinary runs idcli args… in dir with an environment holding only PATH,
// HOME and the extra NAME=value entries, and an empty stdin.
func runBinary(t *testing.T, dir string, extra []string, args ...string) binResult {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), idcliBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}, extra...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := binResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("idcli %s: %v", strings.Join(args, " "), err)
	}
	return r
}

func (r binResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// testUID is a well-formed agent uid for credentials that are never
// registered.
const testUID = "agent-0123456789abcdef01234567"

func TestBinaryBadFlagIsOneLine(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // the whole of stderr
	}{
		{"long flag typed --", []string{"agent", "init", "--host", "x"},
			"idcli: agent init: unknown flag --host (did you mean --hostname?): run idcli agent init --help for its flags\n"},
		{"long flag typed -", []string{"agent", "init", "-host=x"},
			"idcli: agent init: unknown flag -host (did you mean --hostname?): run idcli agent init --help for its flags\n"},
		{"after the arguments", []string{"agent", "headers", "GET", "http://localhost:3000/", "--nonc", "1"},
			"idcli: agent headers: unknown flag --nonc (did you mean --nonce?): run idcli agent headers --help for its flags\n"},
		{"root flag", []string{"--versoin"},
			"idcli: unknown flag --versoin (did you mean --version?): run idcli --help for its flags\n"},
		{"flag of other commands", []string{"agent", "init", "--pp"},
			"idcli: agent init: unknown flag --pp (a flag of idcli agent headers, idcli agent curl): run idcli agent init --help for its flags\n"},
		{"flag before its command", []string{"--json", "version"},
			"idcli: unknown flag --json (a flag of idcli agent init, idcli agent rotate, idcli agent curl, …): run idcli --help for its flags\n"},
		{"no suggestion", []string{"server", "start", "--frobnicate"},
			"idcli: server start: unknown flag --frobnicate: run idcli server start --help for its flags\n"},
		{"missing value", []string{"agent", "curl", "http://localhost:3000/", "-X"},
			"idcli: agent curl: flag -X needs a value: run idcli agent curl --help for its flags\n"},
		{"invalid value", []string{"bench", "--concurrency", "many"},
			"idcli: bench: flag --concurrency: invalid value \"many\" (parse error)\n"},
		{"proxy flag", []string{"proxy", "--upstream-url", "x"}, ""}, // checked below: one line
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runBinary(t, t.TempDir(), nil, tt.args...)
			if r.code != 1 || r.stdout != "" {
				t.Fatalf("want exit 1 and nothing on stdout; got %v", r)
			}
			if tt.want == "" {
				if strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "unknown flag --upstream-url") {
					t.Errorf("stderr = %q, want one line naming --upstream-url", r.stderr)
				}
				return
			}
			if r.stderr != tt.want {
				t.Errorf("stderr = %q, want %q", r.stderr, tt.want)
			}
		})
	}
}

func TestBinaryUnknownCommandSuggests(t *testing.T) {
	tests := []struct {
		args []string
		want string // "" means no suggestion
	}{
		{[]string{"agnet"}, "idcli agent"},
		{[]string{"agent", "crul", "http://x"}, "idcli agent curl"},
		{[]string{"server", "migrate"}, "idcli server db:migrate"},
		{[]string{"server", "db", "migrate"}, "idcli server db:migrate"},
		{[]string{"server", "db:migrat"}, "idcli server db:migrate"},
		{[]string{"server", "serve"}, "idcli server start"},
		{[]string{"verify"}, "idcli tool verify"},
		{[]string{"completions", "bash"}, "idcli completion"},
		{[]string{"frobnicate"}, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			r := runBinary(t, t.TempDir(), nil, tt.args...)
			if r.code != 1 || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "unknown command") {
				t.Fatalf("want exit 1 and one line naming the unknown command; got %v", r)
			}
			if tt.want == "" {
				if strings.Contains(r.stderr, "did you mean") {
					t.Errorf("stderr = %q, want no suggestion", r.stderr)
				}
			} else if !strings.Contains(r.stderr, "(did you mean "+tt.want+"?)") {
				t.Errorf("stderr = %q, want it to suggest %s", r.stderr, tt.want)
			}
		})
	}
}

// TestBinaryMethodUpperCased: agent headers get signs GET (a verifier of
// the real GET accepts it), agent curl -X get sends GET, and a method that
// is not a token is refused.
func TestBinaryMethodUpperCased(t *testing.T) {
	key := signertest.Key(41)
	dir := credsDir(t, testUID, key, "http://localhost:3000")
	const target = "http://localhost:3000/things?x=1"
	r := runBinary(t, dir, nil, "agent", "headers", "get", target, "--components", "@method,@authority,@path")
	if r.code != 0 {
		t.Fatalf("agent headers get: %v", r)
	}
	var h signer.SignatureHeaders
	if err := json.Unmarshal([]byte(r.stdout), &h); err != nil {
		t.Fatalf("agent headers output %q: %v", r.stdout, err)
	}
	pub := string(key.Public.JWK.MarshalPublic())
	for _, method := range []string{"GET", "get"} {
		v := runBinary(t, dir, nil, "tool", "verify", method, target, "--signature", h.Signature,
			"--signature-input", h.SignatureInput, "--signature-agent", h.SignatureAgent, "--jwk", pub, "--json")
		if v.code != 0 || !strings.Contains(v.stdout, `"verified": true`) {
			t.Errorf("tool verify %s of the headers of `agent headers get`: %v", method, v)
		}
	}
	// Another method is signed as typed: verifying it as GET fails.
	r = runBinary(t, dir, nil, "agent", "headers", "purge", target, "--components", "@method,@authority")
	if err := json.Unmarshal([]byte(r.stdout), &h); r.code != 0 || err != nil {
		t.Fatalf("agent headers purge: %v", r)
	}
	v := runBinary(t, dir, nil, "tool", "verify", "GET", target, "--signature", h.Signature,
		"--signature-input", h.SignatureInput, "--signature-agent", h.SignatureAgent, "--jwk", pub)
	if v.code != 1 {
		t.Errorf("a purge signature verified as GET: %v", v)
	}
	if r := runBinary(t, dir, nil, "agent", "headers", "GE T", target); r.code != 1 || !strings.Contains(r.stderr, `invalid method "GE T"`) {
		t.Errorf("agent headers 'GE T': %v; want a refusal naming the method", r)
	}

	// agent curl -X get sends GET.
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method)
		mu.Unlock()
		io.WriteString(w, r.Method)
	}))
	t.Cleanup(srv.Close)
	for _, m := range []string{"get", "Delete"} {
		r := runBinary(t, dir, nil, "agent", "curl", "-X", m, srv.URL+"/x")
		if want := strings.ToUpper(m); r.code != 0 || r.stdout != want {
			t.Errorf("agent curl -X %s: %v; want the server to see %s", m, r, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, ",") != "GET,DELETE" {
		t.Errorf("the server saw %v, want [GET DELETE]", seen)
	}
}

func TestBinaryHints(t *testing.T) {
	port := freePort(t) // nothing listens there
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"localhost without a scheme", []string{"agent", "init", "--hostname", "localhost:" + port},
			[]string{"hint: localhost:" + port + " has no scheme", "use --hostname http://localhost:" + port}},
		{"loopback address without a scheme", []string{"agent", "init", "--hostname", "127.0.0.1:" + port},
			[]string{"hint: 127.0.0.1:" + port + " has no scheme", "use --hostname http://127.0.0.1:" + port}},
		{"*.localhost without a scheme", []string{"agent", "init", "--hostname", "agents.localhost:" + port},
			[]string{"hint: agents.localhost:" + port + " has no scheme", "use --hostname http://agents.localhost:" + port}},
		{"dead port at init", []string{"agent", "init", "--hostname", "http://127.0.0.1:" + port},
			[]string{"hint: nothing is listening at 127.0.0.1:" + port, "idcli server start"}},
		{"dead port at curl", []string{"agent", "curl", "http://127.0.0.1:" + port + "/whoami"},
			[]string{"hint: nothing is listening at 127.0.0.1:" + port, "idcli server start"}},
		{"dead port at rotate", []string{"agent", "rotate", "--hostname", "http://localhost:" + port},
			[]string{"hint: nothing is listening at localhost:" + port, "idcli server start"}},
		{"dead default port at bench", []string{"bench", "--url", "http://127.0.0.1:" + port, "--keep-agents", "--requests", "1"},
			[]string{"hint: nothing is listening at 127.0.0.1:" + port, "idcli server start"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := credsDir(t, testUID, signertest.Key(42), "")
			r := runBinary(t, dir, nil, tt.args...)
			if r.code != 1 || strings.Count(r.stderr, "hint:") != 1 {
				t.Fatalf("want exit 1 and one hint; got %v", r)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
		})
	}
	// bench and directory check name the http:// URL too.
	if r := runBinary(t, t.TempDir(), nil, "bench", "--url", "localhost:"+port); r.code != 1 || !strings.Contains(r.stderr, "(did you mean http://localhost:"+port+"?)") {
		t.Errorf("bench --url localhost:%s: %v; want the http:// URL suggested", port, r)
	}
	r := runBinary(t, t.TempDir(), nil, "directory", "check", "localhost:"+port)
	if r.code != 1 || !strings.Contains(r.stdout, "hint: localhost:"+port+" has no scheme") || !strings.Contains(r.stdout, "check http://localhost:"+port+" with --allow-http --allow-private") {
		t.Errorf("directory check localhost:%s: %v; want a hint naming the http:// URL", port, r)
	}

	// A remote host without a scheme is https://, as documented: no hint
	// about the scheme.
	r = runBinary(t, t.TempDir(), nil, "agent", "init", "--hostname", "agentid.invalid")
	if r.code != 1 || strings.Contains(r.stderr, "has no scheme") {
		t.Errorf("agent init --hostname agentid.invalid: %v; want a failure without a scheme hint", r)
	}
}

func TestBinaryJSONOutputs(t *testing.T) {
	decode := func(t *testing.T, r binResult, v any) {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("want exit 0; got %v", r)
		}
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Fatalf("stdout %q is not the JSON shape: %v", r.stdout, err)
		}
	}

	t.Run("version", func(t *testing.T) {
		t.Parallel()
		var v versionJSON
		decode(t, runBinary(t, t.TempDir(), nil, "version", "--json"), &v)
		if v.Name != "idcli" || v.Version != signer.Version || !strings.HasPrefix(v.Go, "go") {
			t.Errorf("version --json = %+v", v)
		}
	})

	t.Run("server init and db", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		var si serverInitJSON
		decode(t, runBinary(t, dir, nil, "server", "init", "--json", "--port", "4321", "--database-url", "postgres://u:secret@db.example/agentid"), &si)
		if si.Path != ".env" || si.Port != "4321" || si.Hostname != "http://localhost:4321" || si.DatabaseURL != "postgres://xxxxx@db.example/agentid" {
			t.Errorf("server init --json = %+v", si)
		}
		if b, err := os.ReadFile(filepath.Join(dir, ".env")); err != nil || !strings.Contains(string(b), "PORT=4321") {
			t.Errorf(".env = %q, %v; want PORT=4321 written", b, err)
		}
		db := "sqlite://" + filepath.Join(dir, "agentid.db")
		var c, d dbJSON
		decode(t, runBinary(t, dir, nil, "server", "db:create", "--json", "--database-url", db), &c)
		if c.Command != "db:create" || !strings.HasSuffix(c.Database, "agentid.db") {
			t.Errorf("db:create --json = %+v", c)
		}
		var m1, m2 dbMigrateJSON
		decode(t, runBinary(t, dir, nil, "server", "db:migrate", "--json", "--database-url", db), &m1)
		if m1.Command != "db:migrate" || !m1.Changed || len(m1.Applied) != len(store.Migrations()) {
			t.Errorf("first db:migrate --json = %+v, want the %d migrations applied", m1, len(store.Migrations()))
		}
		for i, m := range m1.Applied {
			if i < len(store.Migrations()) && m.ID != store.Migrations()[i].ID {
				t.Errorf("applied[%d] = %s, want %s", i, m.ID, store.Migrations()[i].ID)
			}
		}
		r := runBinary(t, dir, nil, "server", "db:migrate", "--json", "--database-url", db)
		decode(t, r, &m2)
		if m2.Changed || m2.Applied == nil || len(m2.Applied) != 0 || !strings.Contains(r.stdout, `"applied":[]`) {
			t.Errorf("second db:migrate --json = %s, want nothing applied", r.stdout)
		}
		decode(t, runBinary(t, dir, nil, "server", "db:drop", "--json", "--database-url", db), &d)
		if d.Command != "db:drop" || !d.Changed {
			t.Errorf("db:drop --json = %+v", d)
		}
	})

	t.Run("agent init, rotate and curl", func(t *testing.T) {
		t.Parallel()
		srv := clitest.StartServer(t, clitest.ServerOptions{})
		dir := t.TempDir()
		var in, rot agentJSON
		decode(t, runBinary(t, dir, nil, "agent", "init", "--hostname", srv.URL, "--json"), &in)
		if !signer.ValidUID(in.UID) || in.IsNew == nil || !*in.IsNew || in.Path != ".env" || in.Hostname != srv.URL ||
			in.Kid == "" || in.PublicJWK.Kid != in.Kid || in.WellKnownURL == "" {
			t.Errorf("agent init --json = %+v", in)
		}
		decode(t, runBinary(t, dir, nil, "agent", "rotate", "--json"), &rot)
		if rot.UID != in.UID || rot.Kid == in.Kid || rot.Path != ".env" || rot.IsNew != nil {
			t.Errorf("agent rotate --json = %+v after init %+v", rot, in)
		}
		for _, out := range []string{runBinary(t, dir, nil, "agent", "init", "--json").stdout, runBinary(t, dir, nil, "agent", "rotate", "--json").stdout} {
			if strings.Contains(out, `"d"`) {
				t.Errorf("--json output holds a private key member: %s", out)
			}
		}
		var c curlJSON
		decode(t, runBinary(t, dir, nil, "agent", "curl", srv.URL+"/whoami", "--json"), &c)
		body, _ := c.Body.(map[string]any)
		if c.Status != 200 || body["uid"] != in.UID || c.URL != srv.URL+"/whoami" || c.Headers.Get("Content-Type") == "" {
			t.Errorf("agent curl --json = %+v", c)
		}
		r := runBinary(t, dir, nil, "agent", "curl", srv.URL+"/nowhere", "--json")
		var nf curlJSON
		if err := json.Unmarshal([]byte(r.stdout), &nf); r.code != 22 || err != nil || nf.Status != 404 {
			t.Errorf("agent curl --json of a 404: %v; want exit 22 and status 404 in JSON", r)
		}
	})
}

// TestBinaryBenchProgressAndCleanup: bench reports progress every second on
// stderr and removes the agents it registered from the server's database,
// unless --keep-agents; a database that is not the server's is refused
// before the run.
func TestBinaryBenchProgressAndCleanup(t *testing.T) {
	dbURL := dbtest.SQLiteURL(t)
	srv := clitest.StartServer(t, clitest.ServerOptions{DatabaseURL: dbURL, Host: "agentid.test"})
	count := func() int64 {
		db := dbtest.Open(t, dbURL)
		var n int64
		if err := db.Model(&store.Agent{}).Count(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}
	r := runBinary(t, t.TempDir(), nil, "bench", "--url", srv.URL, "--connect", srv.Addr, "--database-url", dbURL,
		"--duration", "2500ms", "--concurrency", "2", "--target", "register", "--json")
	if r.code != 0 {
		t.Fatalf("bench: %v", r)
	}
	if n := strings.Count(r.stderr, "bench register: "); n < 2 {
		t.Errorf("%d progress lines in a 2.5 s run, want at least 2:\n%s", n, r.stderr)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("report %q: %v", r.stdout, err)
	}
	if rep.AgentsRegistered < 2 || rep.AgentsRemoved != rep.AgentsRegistered {
		t.Errorf("agents registered %d, removed %d; want all removed", rep.AgentsRegistered, rep.AgentsRemoved)
	}
	if n := count(); n != 0 {
		t.Errorf("%d agents left in the database, want 0", n)
	}

	r = runBinary(t, t.TempDir(), nil, "bench", "--url", srv.URL, "--connect", srv.Addr, "--keep-agents", "--requests", "3", "--target", "register", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != 0 || err != nil || rep.AgentsRemoved != 0 {
		t.Fatalf("bench --keep-agents: %v", r)
	}
	if n := count(); n != 4 {
		t.Errorf("%d agents in the database after bench --keep-agents, want 4 (the bench agent and 3)", n)
	}

	// Another database: the bench agent is not in it.
	other := dbtest.SQLiteURL(t)
	dbtest.Open(t, other) // created empty…
	if r := runBinary(t, t.TempDir(), nil, "server", "db:migrate", "--database-url", other); r.code != 0 {
		t.Fatalf("migrate: %v", r)
	}
	r = runBinary(t, t.TempDir(), nil, "bench", "--url", srv.URL, "--connect", srv.Addr, "--database-url", other, "--requests", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "does not hold the bench agent") {
		t.Errorf("bench with another database: %v; want a refusal before the run", r)
	}
	// No database at all.
	r = runBinary(t, t.TempDir(), nil, "bench", "--url", srv.URL, "--connect", srv.Addr, "--database-url", "postgres://nobody@127.0.0.1:1/none", "--requests", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "--keep-agents") {
		t.Errorf("bench without a reachable database: %v; want a refusal naming --keep-agents", r)
	}
}
