package main

import (
	"bytes"
	"context"
	"strings"
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
