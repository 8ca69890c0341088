package main

import (
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeBlocks returns the fenced code blocks of README.md with the given
// info string.
func readmeBlocks(t *testing.T, lang string) []string {
	t.Helper()
	return docBlocks(t, "README.md", lang)
}

// docBlocks returns the fenced code blocks with the given info string of
// a Markdown file named by its path from the repository's root.
func docBlocks(t *testing.T, file, lang string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../..", file))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```")
	var out []string
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestReadmeGoExamplesCompile builds every Go block of README.md and
// docs/middleware.md as its own program in a scratch module that points at
// this repository, so documentation that drifts from the API fails the
// tests.
func TestReadmeGoExamplesCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs; skipped with -short")
	}
	blocks := readmeBlocks(t, "go")
	if len(blocks) < 3 {
		t.Fatalf("README has %d Go blocks, want at least 3 (mux, ServeMux, Transport)", len(blocks))
	}
	blocks = append(blocks, docBlocks(t, "docs/middleware.md", "go")...)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module readmeexamples\n\ngo 1.26\n\nrequire github.com/agentid/agentid v0.0.0\n\nreplace github.com/agentid/agentid => " + root + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, src := range blocks {
		if !strings.HasPrefix(src, "package main") {
			t.Fatalf("Go block %d is not a complete program:\n%s", i+1, src)
		}
		sub := filepath.Join(dir, "ex"+string(rune('a'+i)))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sub, "main.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "vet", "./...")
	cmd.Dir = dir
	// The scratch module takes its requirements from this repository's
	// go.mod through the replace directive; -mod=mod lets go resolve them.
	// Loading the module graph may need go.mod files of versions no build
	// here uses (a fresh module cache lacks them): they come through the
	// configured module proxy, each checked against the go.sum copied above.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README Go examples do not build: %v\n%s", err, out)
	}
}

// TestReadmeShellCommandsExist checks that every idcli command line in the
// README's shell blocks parses: the command exists and its flags are known.
// .ci/readme.sh runs the same lines for real against PostgreSQL.
func TestReadmeShellCommandsExist(t *testing.T) {
	var lines []string
	for _, b := range readmeBlocks(t, "sh") {
		for _, l := range strings.Split(b, "\n") {
			if strings.HasPrefix(l, "idcli ") {
				lines = append(lines, l)
			}
		}
	}
	if len(lines) < 8 {
		t.Fatalf("found %d idcli lines in README, want the agent and server walkthroughs", len(lines))
	}
	for _, l := range lines {
		args := strings.Fields(l)[1:]
		// --help after the subcommand's own flags: the command must exist and
		// accept every flag given, then stop before doing anything.
		var stdout, stderr strings.Builder
		env := &cliEnv{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
			Getenv: func(string) string { return "" }, Dir: t.TempDir()}
		err := run(t.Context(), append(args, "-h"), env)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s: want a help exit after parsing, got %v\n%s", l, err, stderr.String())
		}
		if strings.Contains(stderr.String(), "flag provided but not defined") {
			t.Errorf("%s: unknown flag:\n%s", l, stderr.String())
		}
	}
}
