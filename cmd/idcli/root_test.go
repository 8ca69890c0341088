package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/pkcs11"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// commandPaths lists every command of the tree as its arguments, root first.
func commandPaths(c *ffcli.Command, prefix []string) [][]string {
	paths := [][]string{prefix}
	for _, sub := range c.Subcommands {
		paths = append(paths, commandPaths(sub, append(append([]string(nil), prefix...), sub.Name))...)
	}
	return paths
}

func TestHelpOnStdoutForEveryCommand(t *testing.T) {
	t.Parallel()
	paths := commandPaths(newRootCmd(&cliEnv{}), nil)
	if len(paths) < 15 {
		t.Fatalf("found %d commands, want the whole tree", len(paths))
	}
	for _, p := range paths {
		for _, h := range []string{"--help", "-h", "-help"} {
			args := append(append([]string(nil), p...), h)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				r := runCLI(t.Context(), t.TempDir(), nil, args...)
				if !errors.Is(r.err, flag.ErrHelp) {
					t.Fatalf("error = %v, want flag.ErrHelp (exit 0)", r.err)
				}
				want := "idcli"
				if len(p) > 0 {
					want = "idcli " + strings.Join(p, " ")
				}
				if !strings.Contains(r.stdout, "USAGE\n  "+want) {
					t.Errorf("stdout = %q, want the usage of %s", r.stdout, want)
				}
				if r.stderr != "" {
					t.Errorf("stderr = %q, want nothing", r.stderr)
				}
			})
		}
	}
}

func TestHelpWithoutACommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"help"}, {"agent"}, {"server"}, {"tool"}, {"directory"}, {"agent", "help"}} {
		r := runCLI(t.Context(), t.TempDir(), nil, args...)
		if !errors.Is(r.err, flag.ErrHelp) || !strings.Contains(r.stdout, "SUBCOMMANDS") || r.stderr != "" {
			t.Errorf("idcli %v: error %v, stdout %q, stderr %q; want the group's help on stdout", args, r.err, r.stdout, r.stderr)
		}
	}
	// Help after the arguments of a command that takes them.
	r := runCLI(t.Context(), t.TempDir(), nil, "agent", "curl", "http://localhost:3000/whoami", "--help")
	if !errors.Is(r.err, flag.ErrHelp) || strings.Count(r.stdout, "USAGE") != 1 {
		t.Errorf("agent curl URL --help: error %v, stdout %q; want the usage once", r.err, r.stdout)
	}
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate": run idcli --help`},
		{[]string{"agent", "crul", "http://x"}, `unknown command "agent crul" (did you mean idcli agent curl?): run idcli agent --help`},
		{[]string{"server", "db:create-all"}, `unknown command "server db:create-all"`},
		{[]string{"tool", "sign"}, `unknown command "tool sign"`},
		{[]string{"directory", "list"}, `unknown command "directory list"`},
	}
	for _, tt := range tests {
		r := runCLI(t.Context(), t.TempDir(), nil, tt.args...)
		if r.err == nil || errors.Is(r.err, flag.ErrHelp) || !strings.Contains(r.err.Error(), tt.want) {
			t.Errorf("idcli %v: error %v, want a failure containing %q", tt.args, r.err, tt.want)
		}
		if r.stdout != "" {
			t.Errorf("idcli %v: stdout %q, want nothing", tt.args, r.stdout)
		}
	}
	// An unknown flag is an error too, naming the flag as typed, and
	// nothing else is printed (main prints the error once).
	r := runCLI(t.Context(), t.TempDir(), nil, "agent", "curl", "--bogus", "http://x")
	if r.err == nil || errors.Is(r.err, flag.ErrHelp) || r.stdout != "" || r.stderr != "" || !strings.Contains(r.err.Error(), "unknown flag --bogus") {
		t.Errorf("agent curl --bogus: error %v, stdout %q, stderr %q; want only an error naming --bogus", r.err, r.stdout, r.stderr)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	v := currentVersion()
	want := fmt.Sprintf("idcli %s (commit %s, %s %s)\n", signer.Version, v.Commit, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
	if v.Built != "" || v.Modified {
		want = "" // a test binary stamped from VCS: the stamped test below covers the shape
	}
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		r := runCLI(t.Context(), t.TempDir(), nil, args...)
		if r.err != nil || !strings.HasPrefix(r.stdout, "idcli "+signer.Version+" (commit ") || (want != "" && r.stdout != want) || r.stderr != "" {
			t.Errorf("idcli %v: error %v, stdout %q, stderr %q; want %q", args, r.err, r.stdout, r.stderr, want)
		}
	}
	if r := runCLI(t.Context(), t.TempDir(), nil, "version", "extra"); r.err == nil {
		t.Error("idcli version extra succeeded, want an error")
	}
}

// TestVersionStamped checks what the release build stamps
// (-X main.buildCommit, -X main.buildTime) in both of version's outputs.
// It sets the stamped variables, so it does not run in parallel.
func TestVersionStamped(t *testing.T) {
	defer func(c, b string) { buildCommit, buildTime = c, b }(buildCommit, buildTime)
	buildCommit, buildTime = "0123456789abcdef0123456789abcdef01234567", "2026-11-27T15:04:05+01:00"

	r := runCLI(t.Context(), t.TempDir(), nil, "version")
	want := fmt.Sprintf("idcli %s (commit 0123456789ab, built 2026-11-27T14:04:05Z, %s %s/%s)\n",
		signer.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if r.err != nil || r.stdout != want {
		t.Errorf("idcli version: error %v, stdout %q; want %q", r.err, r.stdout, want)
	}

	r = runCLI(t.Context(), t.TempDir(), nil, "version", "--json")
	var got versionJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); r.err != nil || err != nil {
		t.Fatalf("idcli version --json: error %v, stdout %q (%v)", r.err, r.stdout, err)
	}
	wantJSON := versionJSON{Name: "idcli", Version: signer.Version, Commit: buildCommit, Built: "2026-11-27T14:04:05Z",
		Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, PKCS11: pkcs11.Supported}
	if got != wantJSON {
		t.Errorf("idcli version --json = %+v, want %+v", got, wantJSON)
	}

	buildTime = "yesterday"
	if got := currentVersion(); got.Built != "" || got.Commit != buildCommit {
		t.Errorf("with an unparsable build time: %+v, want no built time and the commit", got)
	}
}
