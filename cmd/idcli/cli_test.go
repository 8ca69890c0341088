package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer"
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
