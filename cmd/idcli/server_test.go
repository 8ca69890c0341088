package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

func readDotEnv(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ".env"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestServerInit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		dotenv      string
		environ     map[string]string
		args        []string
		wantEnv     string
		wantStdout  string
		wantStderr  string // substring; "" means empty
		wantErrPart string
	}{
		{
			name:       "defaults",
			wantEnv:    "PORT=3000\nHOSTNAME=http://localhost:3000\nDATABASE_URL=postgres://localhost/service_production\n",
			wantStdout: "✔ ready (.env/HOSTNAME=http://localhost:3000)\n",
		},
		{
			name:       "flags win over environment and .env",
			dotenv:     "PORT=1111\nHOSTNAME=http://dotenv.example\n",
			environ:    map[string]string{"PORT": "2222", "HOSTNAME": "http://env.example", "DATABASE_URL": "postgres://env/db"},
			args:       []string{"--port", "4000", "--hostname", "https://agentid.example", "--database-url", "postgres://u:p@db:5432/agentid"},
			wantEnv:    "PORT=4000\nHOSTNAME=https://agentid.example\nDATABASE_URL=postgres://u:p@db:5432/agentid\n",
			wantStdout: "✔ ready (.env/HOSTNAME=https://agentid.example)\n",
		},
		{
			name:       "environment wins over .env",
			dotenv:     "# server\nPORT=1111\nHOSTNAME=http://dotenv.example\nOTHER='kept'\n",
			environ:    map[string]string{"PORT": "2222", "HOSTNAME": "http://env.example:2222"},
			wantEnv:    "# server\nPORT=2222\nHOSTNAME=http://env.example:2222\nOTHER='kept'\nDATABASE_URL=postgres://localhost/service_production\n",
			wantStdout: "✔ ready (.env/HOSTNAME=http://env.example:2222)\n",
		},
		{
			name:       ".env is used when nothing else is set",
			dotenv:     "PORT=5000\nHOSTNAME=http://dotenv.example:5000\nDATABASE_URL=sqlite://agentid.db\n",
			wantEnv:    "PORT=5000\nHOSTNAME=http://dotenv.example:5000\nDATABASE_URL=sqlite://agentid.db\n",
			wantStdout: "✔ ready (.env/HOSTNAME=http://dotenv.example:5000)\n",
		},
		{
			name:       "shell HOSTNAME without scheme is ignored with a warning",
			environ:    map[string]string{"HOSTNAME": "3f2a9c1d0b7e", "PORT": "8080"},
			wantEnv:    "PORT=8080\nHOSTNAME=http://localhost:8080\nDATABASE_URL=postgres://localhost/service_production\n",
			wantStdout: "✔ ready (.env/HOSTNAME=http://localhost:8080)\n",
			wantStderr: `ignoring HOSTNAME="3f2a9c1d0b7e"`,
		},
		{
			name:       "a local --hostname names the port",
			environ:    map[string]string{"PORT": "2222"},
			args:       []string{"--hostname", "http://localhost:4000"},
			wantEnv:    "PORT=4000\nHOSTNAME=http://localhost:4000\nDATABASE_URL=postgres://localhost/service_production\n",
			wantStdout: "✔ ready (.env/HOSTNAME=http://localhost:4000)\n",
		},
		{
			name:       "a loopback --hostname names the port",
			args:       []string{"--hostname", "http://127.0.0.1:4001/"},
			wantEnv:    "PORT=4001\nHOSTNAME=http://127.0.0.1:4001\nDATABASE_URL=postgres://localhost/service_production\n",
			wantStdout: "✔ ready (.env/HOSTNAME=http://127.0.0.1:4001)\n",
		},
		{
			name:       "--port wins over the port of a local --hostname",
			args:       []string{"--hostname", "http://localhost:4000", "--port", "5000"},
			wantEnv:    "PORT=5000\nHOSTNAME=http://localhost:4000\nDATABASE_URL=postgres://localhost/service_production\n",
			wantStdout: "✔ ready (.env/HOSTNAME=http://localhost:4000)\n",
		},
		{
			name:       "a public --hostname leaves the port alone",
			args:       []string{"--hostname", "https://agentid.example:8443"},
			wantEnv:    "PORT=3000\nHOSTNAME=https://agentid.example:8443\nDATABASE_URL=postgres://localhost/service_production\n",
			wantStdout: "✔ ready (.env/HOSTNAME=https://agentid.example:8443)\n",
		},
		{
			name:       "a local HOSTNAME variable names the port when PORT is unset",
			environ:    map[string]string{"HOSTNAME": "http://localhost:4002"},
			wantEnv:    "PORT=4002\nHOSTNAME=http://localhost:4002\nDATABASE_URL=postgres://localhost/service_production\n",
			wantStdout: "✔ ready (.env/HOSTNAME=http://localhost:4002)\n",
		},
		{
			name:       "a local --hostname with the scheme's default port names that port",
			args:       []string{"--hostname", "http://localhost:80"},
			wantEnv:    "PORT=80\nHOSTNAME=http://localhost\nDATABASE_URL=postgres://localhost/service_production\n",
			wantStdout: "✔ ready (.env/HOSTNAME=http://localhost)\n",
		},
		{
			name:       "HOSTNAME is stored normalised",
			args:       []string{"--hostname", "HTTPS://AgentID.Example:443/"},
			wantEnv:    "PORT=3000\nHOSTNAME=https://agentid.example\nDATABASE_URL=postgres://localhost/service_production\n",
			wantStdout: "✔ ready (.env/HOSTNAME=https://agentid.example)\n",
		},
		{
			name:       "PORT wins over a local HOSTNAME variable",
			environ:    map[string]string{"HOSTNAME": "http://localhost:4002", "PORT": "4003"},
			wantEnv:    "PORT=4003\nHOSTNAME=http://localhost:4002\nDATABASE_URL=postgres://localhost/service_production\n",
			wantStdout: "✔ ready (.env/HOSTNAME=http://localhost:4002)\n",
		},
		{
			name:        "--hostname without scheme is an error",
			args:        []string{"--hostname", "agentid.example"},
			wantErrPart: "must include a scheme",
		},
		{
			name:        "bad port",
			args:        []string{"--port", "eighty"},
			wantErrPart: "not a port number",
		},
		{
			name:        "unsupported database url",
			args:        []string{"--database-url", "mysql://x/y"},
			wantErrPart: "not supported",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if tt.dotenv != "" {
				if err := os.WriteFile(filepath.Join(dir, ".env"), []byte(tt.dotenv), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			r := runCLI(context.Background(), dir, tt.environ, append([]string{"server", "init"}, tt.args...)...)
			if tt.wantErrPart != "" {
				if r.err == nil || !strings.Contains(r.err.Error(), tt.wantErrPart) {
					t.Fatalf("error = %v, want one containing %q", r.err, tt.wantErrPart)
				}
				return
			}
			if r.err != nil {
				t.Fatalf("error = %v (stderr %s)", r.err, r.stderr)
			}
			if r.stdout != tt.wantStdout {
				t.Errorf("stdout = %q, want %q", r.stdout, tt.wantStdout)
			}
			if tt.wantStderr == "" && r.stderr != "" || !strings.Contains(r.stderr, tt.wantStderr) {
				t.Errorf("stderr = %q, want %q", r.stderr, tt.wantStderr)
			}
			if got := readDotEnv(t, dir); got != tt.wantEnv {
				t.Errorf(".env =\n%s\nwant\n%s", got, tt.wantEnv)
			}
			st, _ := os.Stat(filepath.Join(dir, ".env"))
			if st.Mode().Perm() != 0o600 {
				t.Errorf(".env mode = %o, want 600", st.Mode().Perm())
			}
		})
	}
}

var migrationLineRE = regexp.MustCompile(`^== \d{14} \w+: (migrating|migrated \(\d+\.\d{4}s\)) =+$`)

// checkDBCommands runs create, create, migrate, migrate, drop, drop against
// databaseURL and checks each output line.
func checkDBCommands(t *testing.T, dir, databaseURL, name string) {
	t.Helper()
	ctx := context.Background()
	env := map[string]string{"DATABASE_URL": databaseURL}
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"server", "db:create"}, "Created database '" + name + "'\n"},
		{[]string{"server", "db:create"}, "Database '" + name + "' already exists\n"},
	}
	for _, s := range steps {
		r := runCLI(ctx, dir, env, s.args...)
		if r.err != nil || r.stdout != s.want {
			t.Fatalf("%v: stdout %q, error %v; want %q", s.args, r.stdout, r.err, s.want)
		}
	}
	r := runCLI(ctx, dir, env, "server", "db:migrate")
	if r.err != nil {
		t.Fatalf("db:migrate: %v", r.err)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if want := 2 * len(store.Migrations()); len(lines) != want {
		t.Fatalf("db:migrate printed %d lines, want %d:\n%s", len(lines), want, r.stdout)
	}
	for _, l := range lines {
		if !migrationLineRE.MatchString(l) {
			t.Errorf("db:migrate line %q does not match %s", l, migrationLineRE)
		}
	}
	if !strings.HasPrefix(lines[0], "== 20260223204000 CreateAgentsTable: migrating ") ||
		!strings.HasPrefix(lines[3], "== 20260223205500 CreatePublicJwksTable: migrated (") {
		t.Errorf("db:migrate order:\n%s", r.stdout)
	}
	if r = runCLI(ctx, dir, env, "server", "db:migrate"); r.err != nil || r.stdout != "" {
		t.Errorf("second db:migrate: stdout %q, error %v; want nothing", r.stdout, r.err)
	}
	for _, want := range []string{"Dropped database '" + name + "'\n", "Database '" + name + "' does not exist\n"} {
		r := runCLI(ctx, dir, env, "server", "db:drop")
		if r.err != nil || r.stdout != want {
			t.Fatalf("db:drop: stdout %q, error %v; want %q", r.stdout, r.err, want)
		}
	}
}

func TestServerDBCommandsSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	checkDBCommands(t, dir, "sqlite://agentid.db", filepath.Join(dir, "agentid.db"))
}

func TestServerDBCommandsPostgres(t *testing.T) {
	t.Parallel()
	base := dbtest.PostgresBaseURL(t)
	name := "agentid_cli_" + dbtest.RandomHex(6)
	baseName, err := store.DatabaseName(base)
	if err != nil {
		t.Fatal(err)
	}
	u := strings.Replace(base, "/"+baseName, "/"+name, 1)
	t.Cleanup(func() {
		runCLI(context.Background(), t.TempDir(), map[string]string{"DATABASE_URL": u}, "server", "db:drop")
	})
	checkDBCommands(t, t.TempDir(), u, name)

	// Starting against a database that does not exist names the fix.
	r := runCLI(context.Background(), t.TempDir(), nil, "server", "start", "--database-url", u, "--port", "0")
	if r.err == nil || !strings.Contains(r.err.Error(), "db:create") || strings.Contains(r.err.Error(), "\n") {
		t.Errorf("start on a missing database: error = %v, want one line naming db:create", r.err)
	}
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	return port
}

func TestServerStartFailures(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() }) // not defer: the subtests run in parallel after this function returns
	_, busyPort, _ := net.SplitHostPort(busy.Addr().String())

	dir := t.TempDir()
	unmigrated := "sqlite://" + filepath.Join(dir, "fresh.db")
	if r := runCLI(context.Background(), dir, nil, "server", "db:create", "--database-url", unmigrated); r.err != nil {
		t.Fatal(r.err)
	}
	tests := []struct {
		name      string
		args      []string
		wantParts []string
	}{
		{"busy port", []string{"--port", busyPort, "--database-url", "sqlite::memory:"}, []string{"port " + busyPort + " is already in use", "--port"}},
		{"unreachable database", []string{"--port", "0", "--database-url", "postgres://postgres@127.0.0.1:1/agentid?connect_timeout=2"}, []string{"cannot reach the database", "connection refused", "DATABASE_URL"}},
		{"unknown database host", []string{"--port", "0", "--database-url", "postgres://postgres@db.invalid/agentid?connect_timeout=2"}, []string{"cannot reach the database", "DATABASE_URL"}},
		{"not migrated", []string{"--port", "0", "--database-url", unmigrated}, []string{"not migrated", "idcli server db:migrate"}},
		{"bad replay store", []string{"--replay-store", "redis"}, []string{"--replay-store", "memory or postgres"}},
		{"bad rate limit", []string{"--rate-limit", "fast"}, []string{"--rate-limit", "off"}},
		{"bad rate unit", []string{"--rate-limit", "5/d"}, []string{"--rate-limit", "N/m"}},
		{"zero burst", []string{"--rate-limit-burst", "0"}, []string{"--rate-limit-burst"}},
		{"bad trusted proxy", []string{"--trusted-proxies", "10.0.0.0/8,not-an-ip"}, []string{"--trusted-proxies", "not-an-ip"}},
		{"bad trusted proxy with the limit off", []string{"--rate-limit", "off", "--trusted-proxies", "10.0.0.0/33"}, []string{"--trusted-proxies"}},
		{"bad log level", []string{"--log-level", "loud"}, []string{"--log-level", "warn"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(context.Background(), dir, nil, append([]string{"server", "start"}, tt.args...)...)
			if r.err == nil {
				t.Fatalf("start succeeded (stdout %q), want an error", r.stdout)
			}
			msg := r.err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error %q spans several lines, want one", msg)
			}
			for _, p := range tt.wantParts {
				if !strings.Contains(msg, p) {
					t.Errorf("error %q lacks %q", msg, p)
				}
			}
			if strings.Contains(r.stdout, "listening") {
				t.Errorf("stdout %q claims to listen", r.stdout)
			}
		})
	}
	// Several bad flags are named at once, one line each.
	r := runCLI(context.Background(), dir, nil, "server", "start", "--rate-limit", "fast", "--rate-limit-burst", "0", "--registration", "maybe", "--log-level", "loud")
	if r.err == nil || len(strings.Split(r.err.Error(), "\n")) != 4 {
		t.Fatalf("start with four bad flags: %v, want four lines", r.err)
	}
	for _, p := range []string{"--rate-limit \"fast\"", "--rate-limit-burst 0", "--registration \"maybe\"", "--log-level \"loud\""} {
		if !strings.Contains(r.err.Error(), p) {
			t.Errorf("error %q lacks %q", r.err, p)
		}
	}
}

// migratedSQLite returns the URL of a SQLite database in dir migrated by
// `idcli server db:migrate`.
func migratedSQLite(t *testing.T, dir string) string {
	t.Helper()
	databaseURL := "sqlite://" + filepath.Join(dir, "agentid.db")
	if r := runCLI(context.Background(), dir, nil, "server", "db:migrate", "--database-url", databaseURL); r.err != nil {
		t.Fatal(r.err)
	}
	return databaseURL
}

// serverBanner is what `idcli server start` prints once it listens.
var serverBanner = regexp.MustCompile(`idcli server listening on \S+ `)

// startServerCmd runs `idcli server start args…` in dir with environ in the
// background (stopped at the test's end) and waits until it listens.
func startServerCmd(t *testing.T, dir string, environ map[string]string, args ...string) *bgCLI {
	t.Helper()
	b := startCLI(t, dir, environ, append([]string{"server", "start"}, args...)...)
	b.waitFor(t, serverBanner)
	return b
}

func TestServerStartServesAndShutsDown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	port := freePort(t)
	srv := startServerCmd(t, dir, map[string]string{"HOSTNAME": "myhost"}, "--port", port, "--database-url", migratedSQLite(t, dir))

	a := clitest.MustDo(t, http.MethodGet, "http://localhost:"+port+"/", "", nil, nil)
	want := fmt.Sprintf(`{"service":"agentid","status":"ok","version":"%s"}`+"\n", signer.Version)
	if a.Body != want {
		t.Errorf("GET / = %s, want %s", a.Body, want)
	}
	if err := srv.stop(); err != nil {
		t.Fatalf("start after cancel: error = %v, want nil (stderr %s)", err, srv.stderr)
	}
	// The public URL (what the README walkthrough greps for), then the
	// address bound (all interfaces).
	banner := regexp.MustCompile(`^idcli server listening on http://localhost:` + port + ` \(bound to (\[::\]|0\.0\.0\.0):` + port + `\)\n$`)
	if stdout := srv.stdout.String(); !banner.MatchString(stdout) {
		t.Errorf("stdout = %q, want it to match %s", stdout, banner)
	}
	if stderr := srv.stderr.String(); !strings.Contains(stderr, `ignoring HOSTNAME="myhost"`) || !strings.Contains(stderr, "path=/ status=200") {
		t.Errorf("stderr lacks the HOSTNAME warning or the request log line:\n%s", stderr)
	}
}

// startedServer is `idcli server start` running in the background on a
// SQLite database.
type startedServer struct {
	*bgCLI
	base string // http://localhost:<port>
	// port, dir, databaseURL and flags are what it was started with.
	port, dir, databaseURL string
	flags                  []string
}

// startServer runs `idcli server start --port <free> flags…` on a SQLite
// database migrated in a new folder, and waits until it listens.
func startServer(t *testing.T, flags ...string) *startedServer {
	t.Helper()
	dir := t.TempDir()
	return startServerOn(t, freePort(t), dir, migratedSQLite(t, dir), flags...)
}

// startServerOn runs `idcli server start --port port --database-url
// databaseURL flags…` in dir and waits until it listens.
func startServerOn(t *testing.T, port, dir, databaseURL string, flags ...string) *startedServer {
	t.Helper()
	b := startServerCmd(t, dir, nil, append([]string{"--port", port, "--database-url", databaseURL}, flags...)...)
	return &startedServer{bgCLI: b, base: "http://localhost:" + port, port: port, dir: dir, databaseURL: databaseURL, flags: flags}
}

// restart starts the server again, as it was started (same port and
// database), once stopped.
func (s *startedServer) restart(t *testing.T) *startedServer {
	t.Helper()
	return startServerOn(t, s.port, s.dir, s.databaseURL, s.flags...)
}

// send sends req as is and returns the status and error code.
func (s *startedServer) send(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	a := clitest.MustSend(t, http.DefaultClient, req)
	return a.Status, a.Code
}

func (s *startedServer) registerReq(t *testing.T, key signer.PrivateKey) *http.Request {
	return clitest.RegisterRequest(t, s.base, key)
}

func TestServerStartFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		// wantStatuses are the statuses of three registrations from one address.
		wantStatuses  [3]int
		wantSharedLog bool // nonces are kept in the database (they survive a restart)
		wantReqLog    bool // one stderr line per request
	}{
		{"defaults", nil, [3]int{201, 201, 201}, false, true},
		{"burst 2", []string{"--rate-limit", "1/h", "--rate-limit-burst", "2"}, [3]int{201, 201, 429}, false, true},
		{"limit off", []string{"--rate-limit", "off", "--rate-limit-burst", "1"}, [3]int{201, 201, 201}, false, true},
		{"proxy trusted, no forwarded header", []string{"--rate-limit-burst", "1", "--trusted-proxies", "127.0.0.1/32, ::1"}, [3]int{201, 429, 429}, false, true},
		{"postgres replay store, warn", []string{"--replay-store", "postgres", "--log-level", "warn"}, [3]int{201, 201, 201}, true, false},
		{"database alias", []string{"--replay-store", "database"}, [3]int{201, 201, 201}, true, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, tt.args...)
			var uid string
			for j, want := range tt.wantStatuses {
				key := signertest.Key(byte(100 + 10*i + j))
				a, err := clitest.Send(http.DefaultClient, srv.registerReq(t, key))
				if err != nil {
					t.Fatal(err)
				}
				if a.Status != want {
					t.Errorf("registration %d: status = %d (%s), want %d", j+1, a.Status, a.Code, want)
				}
				if a.Status == http.StatusTooManyRequests && a.Code != "rate_limited" {
					t.Errorf("registration %d: code = %q, want rate_limited", j+1, a.Code)
				}
				if j == 0 {
					uid = a.UID
				}
			}
			// whoami, then the same request again: the replay is refused
			// whichever store holds the nonce.
			who, _ := http.NewRequest(http.MethodGet, srv.base+"/whoami", nil)
			clitest.Sign(t, who, signertest.Key(byte(100+10*i)), signer.Options{SignatureAgent: "http://" + uid + "." + strings.TrimPrefix(srv.base, "http://")})
			if status, code := srv.send(t, clitest.CopyRequest(who, nil)); status != http.StatusOK {
				t.Fatalf("whoami: status = %d (%s), want 200", status, code)
			}
			if status, code := srv.send(t, clitest.CopyRequest(who, nil)); status != http.StatusUnauthorized || code != "replayed_nonce" {
				t.Errorf("replayed whoami: status = %d code %q, want 401 replayed_nonce", status, code)
			}

			srv.stop() // an exit error fails the test at its end
			if got := strings.Contains(srv.stderr.String(), "path=/whoami"); got != tt.wantReqLog {
				t.Errorf("request lines logged = %v, want %v:\n%s", got, tt.wantReqLog, srv.stderr)
			}
			// Restart on the same port and database: the replay is refused
			// only when the nonce was kept in the database.
			again := srv.restart(t)
			status, code := again.send(t, clitest.CopyRequest(who, nil))
			if refused := status == http.StatusUnauthorized && code == "replayed_nonce"; refused != tt.wantSharedLog {
				t.Errorf("replay after a restart: status = %d code %q; refused = %v, want %v", status, code, refused, tt.wantSharedLog)
			}
		})
	}
}

// `idcli server start --vestauth-compat` serves vestauth's POST /register
// and POST /rotate; without the flag both are 404. Needs no peers.
func TestServerStartVestauthCompat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		args         []string
		wantRegister int
		wantRotate   int
		wantWarning  bool
	}{
		{"default off", nil, http.StatusNotFound, http.StatusNotFound, false},
		{"on", []string{"--vestauth-compat"}, http.StatusOK, http.StatusOK, true},
		{"explicitly off", []string{"--vestauth-compat=false"}, http.StatusNotFound, http.StatusNotFound, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, tt.args...)
			cur, next := signertest.Key(byte(160+2*i)), signertest.Key(byte(161+2*i))

			// vestauth's `agent init`: tag "null", no Signature-Agent, @authority only.
			reg, _ := http.NewRequest(http.MethodPost, srv.base+"/register", bytes.NewReader(clitest.JWKBody(cur)))
			reg.Header.Set("Content-Type", "application/json")
			a := clitest.MustSend(t, http.DefaultClient, clitest.Sign(t, reg, cur, signer.Options{Tag: refserver.NullTag}))
			if a.Status != tt.wantRegister {
				t.Fatalf("idcli server start %v: vestauth-style POST /register: status %d (%s), want %d", tt.args, a.Status, a.Code, tt.wantRegister)
			}
			uid := a.UID
			if uid == "" { // compat off: register natively to try /rotate
				uid = clitest.MustSend(t, http.DefaultClient, srv.registerReq(t, cur)).UID
			}

			// vestauth's `agent rotate`: the current key, Signature-Agent naming the agent.
			rot, _ := http.NewRequest(http.MethodPost, srv.base+"/rotate", bytes.NewReader(clitest.JWKBody(next)))
			rot.Header.Set("Content-Type", "application/json")
			origin := "http://" + uid + "." + strings.TrimPrefix(srv.base, "http://")
			if a := clitest.MustSend(t, http.DefaultClient, clitest.Sign(t, rot, cur, signer.Options{SignatureAgent: origin})); a.Status != tt.wantRotate {
				t.Errorf("idcli server start %v: vestauth-style POST /rotate: status %d (%s), want %d", tt.args, a.Status, a.Code, tt.wantRotate)
			}
			srv.stop() // an exit error fails the test at its end
			if got := strings.Contains(srv.stderr.String(), "vestauth compatibility on"); got != tt.wantWarning {
				t.Errorf("idcli server start %v: stderr has the compat warning = %v, want %v\n%s", tt.args, got, tt.wantWarning, srv.stderr)
			}
		})
	}
}

// TestServerStartListensOnLocalHostnamePort: `server start --hostname
// http://localhost:PORT --bind 127.0.0.1` listens on 127.0.0.1:PORT, and
// the banner names both the public URL and the address bound.
func TestServerStartListensOnLocalHostnamePort(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	srv := startServerCmd(t, t.TempDir(), nil, "--hostname", "http://localhost:"+port, "--database-url", "sqlite::memory:", "--bind", "127.0.0.1")
	if a := clitest.MustDo(t, http.MethodGet, "http://localhost:"+port+"/", "", nil, nil); a.Status != http.StatusOK {
		t.Errorf("GET http://localhost:%s/ = %d, want 200", port, a.Status)
	}
	if err := srv.stop(); err != nil {
		t.Fatalf("start: %v (stderr %s)", err, srv.stderr)
	}
	if want := "idcli server listening on http://localhost:" + port + " (bound to 127.0.0.1:" + port + ")\n"; srv.stdout.String() != want {
		t.Errorf("stdout = %q, want %q (the public URL and the --bind address)", srv.stdout, want)
	}
}
