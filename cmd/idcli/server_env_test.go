package main

import (
	"context"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/cmd/idcli/internal/envflag"
	"github.com/agentid/agentid/signer/signertest"
)

// flagEnvValue returns a value for f that its Set accepts and that differs
// from its default: the other boolean for a switch, else the first of a
// few candidates. A flag added later whose type takes none of them fails
// TestServerStartEveryFlagFromEnv until a candidate is added here.
func flagEnvValue(t *testing.T, f *flag.Flag) string {
	t.Helper()
	if isBoolFlag(f) {
		if f.DefValue == "true" {
			return "false"
		}
		return "true"
	}
	for _, v := range []string{"7", "7s", "7/m", "https://example.test/hook", "127.0.0.1:7"} {
		probe := flag.NewFlagSet("probe", flag.ContinueOnError)
		probe.Var(cloneValue(f), f.Name, "")
		if err := probe.Set(f.Name, v); err == nil && probe.Lookup(f.Name).Value.String() != f.DefValue {
			return v
		}
	}
	t.Fatalf("--%s: no candidate value is accepted; add one to flagEnvValue", f.Name)
	return ""
}

// cloneValue returns a fresh value of f's type: the flag of a new
// `server start` command with f's name.
func cloneValue(f *flag.Flag) flag.Value {
	return newServerStartCmd(newEnvFor(nil, "")).FlagSet.Lookup(f.Name).Value
}

func newEnvFor(environ map[string]string, dir string) *cliEnv {
	return &cliEnv{Stdin: strings.NewReader(""), Stdout: &syncBuffer{}, Stderr: &syncBuffer{},
		Getenv: func(k string) string { return environ[k] }, Dir: dir}
}

// startFlagValue parses args as `server start` would, applies the
// environment environ and ./.env of dir, and returns the value of flag name.
func startFlagValue(t *testing.T, environ map[string]string, dir, name string, args ...string) (string, error) {
	t.Helper()
	env := newEnvFor(environ, dir)
	c := newServerStartCmd(env)
	if err := c.Parse(args); err != nil {
		t.Fatal(err)
	}
	_, err := applyServerEnv(env, c.FlagSet)
	return c.FlagSet.Lookup(name).Value.String(), err
}

// Every flag of `server start`, including any added later, is read from
// AGENTID_<NAME> (the process environment, then .env) exactly as from the
// command line, the command line wins, and its help names the variable.
func TestServerStartEveryFlagFromEnv(t *testing.T) {
	t.Parallel()
	help := runCLI(context.Background(), t.TempDir(), nil, "server", "start", "--help")
	var flags []*flag.Flag
	newServerStartCmd(newEnvFor(nil, "")).FlagSet.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
	if len(flags) < 13 {
		t.Fatalf("server start has %d flags, want at least the 13 it had when this test was written", len(flags))
	}
	for _, f := range flags {
		name := envflag.Var("AGENTID", f.Name)
		v := flagEnvValue(t, f)
		want, _ := startFlagValue(t, nil, "", f.Name, "--"+f.Name+"="+v)
		if got, err := startFlagValue(t, map[string]string{name: v}, "", f.Name); err != nil || got != want {
			t.Errorf("%s=%s: --%s = %q (%v), want %q as from the command line", name, v, f.Name, got, err, want)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ".env"), []byte(name+"="+v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := startFlagValue(t, nil, dir, f.Name); err != nil || got != want {
			t.Errorf("%s=%s in .env: --%s = %q (%v), want %q", name, v, f.Name, got, err, want)
		}
		if got, _ := startFlagValue(t, map[string]string{name: v}, dir, f.Name, "--"+f.Name+"="+f.DefValue); got != f.DefValue {
			t.Errorf("--%s=%s with %s=%s: got %q, want the command line's", f.Name, f.DefValue, name, v, got)
		}
		if line := helpLine(help.stdout, f.Name); !strings.Contains(line, name) {
			t.Errorf("server start --help: the line of --%s does not name %s: %q", f.Name, name, line)
		}
	}
}

// helpLine returns the line of help describing --name.
func helpLine(help, name string) string {
	for _, l := range strings.Split(help, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "--"+name+" ") {
			return l
		}
	}
	return ""
}

// A server started from variables alone: AGENTID_ ones win over the older
// PORT and DATABASE_URL, and --registration comes from AGENTID_REGISTRATION.
func TestServerStartFromEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	port := freePort(t)
	environ := map[string]string{
		"AGENTID_PORT": port, "PORT": freePort(t),
		"AGENTID_DATABASE_URL": migratedSQLite(t, dir), "DATABASE_URL": "mysql://not/used",
		"AGENTID_REGISTRATION": "closed", "AGENTID_STATUS_PAGE": "true", "AGENTID_BIND": "127.0.0.1",
	}
	startServerCmd(t, dir, environ)
	base := "http://localhost:" + port
	a := clitest.MustSend(t, http.DefaultClient, clitest.RegisterRequest(t, base, signertest.Key(40)))
	if a.Status != http.StatusForbidden {
		t.Errorf("POST /agents with AGENTID_REGISTRATION=closed: %d %s, want 403", a.Status, a.Code)
	}
	if a := clitest.MustDo(t, http.MethodGet, base+"/status", "", nil, nil); a.Status != http.StatusOK {
		t.Errorf("GET /status with AGENTID_STATUS_PAGE=true: %d, want 200", a.Status)
	}
}

// A bad value from a variable is an error naming the variable, not the flag.
func TestServerStartEnvBadValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		environ map[string]string
		dotenv  string
		args    []string
		want    []string
	}{
		{"rate", map[string]string{"AGENTID_RATE_LIMIT": "fast"}, "", nil, []string{`AGENTID_RATE_LIMIT "fast"`}},
		{"burst", map[string]string{"AGENTID_RATE_LIMIT_BURST": "many"}, "", nil, []string{`AGENTID_RATE_LIMIT_BURST: not a valid value (--rate-limit-burst)`}},
		{"switch", map[string]string{"AGENTID_STATUS_PAGE": "maybe"}, "", nil, []string{`AGENTID_STATUS_PAGE: not a valid value`}},
		{"port", map[string]string{"AGENTID_PORT": "eighty"}, "", []string{"--database-url", "sqlite::memory:"}, []string{`AGENTID_PORT "eighty" is not a port number`}},
		{"database", map[string]string{"AGENTID_DATABASE_URL": "mysql://x/y"}, "", []string{"--port", "0"}, []string{"AGENTID_DATABASE_URL mysql://x/y is not supported"}},
		{"hostname", map[string]string{"AGENTID_HOSTNAME": "agentid.example"}, "", nil, []string{"AGENTID_HOSTNAME: ", "scheme"}},
		{"metrics", map[string]string{"AGENTID_METRICS_LISTEN": "nowhere"}, "", nil, []string{`AGENTID_METRICS_LISTEN "nowhere"`}},
		{"in .env", nil, "AGENTID_REGISTRATION=maybe\n", nil, []string{`AGENTID_REGISTRATION in .env "maybe"`}},
		{"flag and variable", map[string]string{"AGENTID_LOG_LEVEL": "loud"}, "", []string{"--port", "0", "--rate-limit", "fast"},
			[]string{`--rate-limit "fast"`, `AGENTID_LOG_LEVEL "loud"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if tt.dotenv != "" {
				if err := os.WriteFile(filepath.Join(dir, ".env"), []byte(tt.dotenv), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			args := tt.args
			if args == nil { // never the default port or database, should the variable be ignored
				args = []string{"--port", "0", "--database-url", "sqlite::memory:"}
			}
			r := runCLI(context.Background(), dir, tt.environ, append([]string{"server", "start"}, args...)...)
			if r.err == nil {
				t.Fatalf("start succeeded (stdout %q), want an error", r.stdout)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.err.Error(), w) {
					t.Errorf("error %q lacks %q", r.err, w)
				}
			}
		})
	}
	// A refused value is not repeated: it may be a secret.
	r := runCLI(context.Background(), t.TempDir(), map[string]string{"AGENTID_AUDIT_RETENTION": "hunter2"}, "server", "start", "--port", "0", "--database-url", "sqlite::memory:")
	if r.err == nil || !strings.Contains(r.err.Error(), "AGENTID_AUDIT_RETENTION") || strings.Contains(r.err.Error()+r.stderr+r.stdout, "hunter2") {
		t.Errorf("AGENTID_AUDIT_RETENTION=hunter2: %v (stderr %q), want an error naming the variable, not the value", r.err, r.stderr)
	}
	// The other server commands read AGENTID_DATABASE_URL too.
	r = runCLI(context.Background(), t.TempDir(), map[string]string{"AGENTID_DATABASE_URL": "mysql://x/y", "DATABASE_URL": "sqlite::memory:"}, "server", "db:migrate")
	if r.err == nil || !strings.Contains(r.err.Error(), "AGENTID_DATABASE_URL mysql://x/y is not supported") {
		t.Errorf("db:migrate with AGENTID_DATABASE_URL=mysql://x/y: %v, want an error naming it", r.err)
	}
}
