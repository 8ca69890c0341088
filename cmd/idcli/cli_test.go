package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// cliResult is what one run of the CLI printed and returned.
type cliResult struct {
	stdout, stderr string
	err            error
}

// runCLI runs idcli with args in dir as main would, with environ as the
// whole process environment (nil: empty) and an empty stdin.
func runCLI(ctx context.Context, dir string, environ map[string]string, args ...string) cliResult {
	var out, errb bytes.Buffer
	env := &cliEnv{
		Stdin:  strings.NewReader(""),
		Stdout: &out,
		Stderr: &errb,
		Getenv: func(k string) string { return environ[k] },
		Dir:    dir,
	}
	err := run(ctx, args, env)
	return cliResult{stdout: out.String(), stderr: errb.String(), err: err}
}

// exitOf maps run's error to the process exit status main would use.
func exitOf(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ec exitCode
	if errors.As(err, &ec) {
		return int(ec)
	}
	t.Fatalf("run error %v is not an exit status", err)
	return -1
}

// wantExit fails the test unless the run ended with exit status want.
func (r cliResult) wantExit(t *testing.T, want int) {
	t.Helper()
	if got := exitOf(t, r.err); got != want {
		t.Fatalf("exit = %d, want %d; stdout:\n%s\nstderr:\n%s", got, want, r.stdout, r.stderr)
	}
}

// usageCase is a command line idcli must refuse with an error containing
// wantErr, printing nothing on stdout.
type usageCase struct {
	name    string
	args    []string
	wantErr string
}

// checkUsage runs `idcli cmd… args…` in dir for each case, in parallel.
func checkUsage(t *testing.T, dir string, cmd []string, tests []usageCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := runCLI(t.Context(), dir, nil, append(slices.Clone(cmd), tt.args...)...)
			if res.err == nil || !strings.Contains(res.err.Error(), tt.wantErr) || res.stdout != "" {
				t.Errorf("error = %v, stdout %q; want an error containing %q and no output", res.err, res.stdout, tt.wantErr)
			}
		})
	}
}

// checkStdout reports each of want missing from stdout and each of bad present.
func checkStdout(t *testing.T, stdout string, want, bad []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(stdout, w) {
			t.Errorf("stdout:\n%s\nwant it to contain %q", stdout, w)
		}
	}
	for _, b := range bad {
		if strings.Contains(stdout, b) {
			t.Errorf("stdout:\n%s\nwant it not to contain %q", stdout, b)
		}
	}
}

// credsDir returns a folder with a .env holding uid and key, for hostname.
func credsDir(t *testing.T, uid string, k signer.PrivateKey, hostname string) string {
	t.Helper()
	dir := t.TempDir()
	content := "# test agent\nAGENT_UID=" + uid + "\nAGENT_PRIVATE_JWK='" + string(k.MarshalPrivateJWK()) + "'\n"
	if hostname != "" {
		content += "AGENT_HOSTNAME=" + hostname + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// syncBuffer is signertest.SyncBuffer.
type syncBuffer = signertest.SyncBuffer

// bgCLI is one run of idcli in the background (a server or a proxy), as
// main would run it until SIGTERM.
type bgCLI struct {
	args           []string
	stdout, stderr *syncBuffer
	cancel         context.CancelFunc
	done           chan struct{}
	err            error // valid once done is closed
}

// startCLI runs idcli with args in dir in the background; the test's end
// stops it (as SIGTERM would) and wants it to exit cleanly.
func startCLI(t *testing.T, dir string, environ map[string]string, args ...string) *bgCLI {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &bgCLI{args: args, stdout: &syncBuffer{}, stderr: &syncBuffer{}, cancel: cancel, done: make(chan struct{})}
	env := &cliEnv{
		Stdin:  strings.NewReader(""),
		Stdout: b.stdout,
		Stderr: b.stderr,
		Getenv: func(k string) string { return environ[k] },
		Dir:    dir,
	}
	go func() {
		defer close(b.done)
		b.err = run(ctx, args, env)
	}()
	t.Cleanup(func() {
		if err := b.stop(); err != nil {
			t.Errorf("idcli %s: exit: %v\nstderr:\n%s", strings.Join(args, " "), err, b.stderr)
		}
	})
	return b
}

// stop cancels the run (SIGTERM) and returns its error once it has exited.
func (b *bgCLI) stop() error {
	b.cancel()
	select {
	case <-b.done:
		return b.err
	case <-time.After(30 * time.Second):
		return errors.New("still running 30 s after SIGTERM")
	}
}

// waitFor waits until stdout matches re and returns the first submatch (or
// the whole match). It fails the test if the command exits first or takes
// more than 20 s.
func (b *bgCLI) waitFor(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	return b.waitIn(t, "stdout", b.stdout, re)
}

// waitIn is waitFor on out, the command's stream called name.
func (b *bgCLI) waitIn(t *testing.T, name string, out *syncBuffer, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[len(m)-1]
		}
		select {
		case <-b.done:
			t.Fatalf("idcli %s exited (%v) before printing %s\nstdout:\n%s\nstderr:\n%s", strings.Join(b.args, " "), b.err, re, b.stdout, b.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("idcli %s did not print %s on %s within 20 s\nstdout:\n%s\nstderr:\n%s", strings.Join(b.args, " "), re, name, b.stdout, b.stderr)
		}
	}
}
