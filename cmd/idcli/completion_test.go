package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentid/agentid/cmd/idcli/internal/completion"
	"github.com/agentid/agentid/signer/signertest/testenv"
)

// completionCases are command lines (the cursor at the end) and, for each,
// candidates that must be offered and some that must not.
var completionCases = []struct {
	line      string
	want, not []string
}{
	{"idcli ", []string{"agent", "server", "completion", "bench"}, []string{"init", "--version"}},
	{"idcli ag", []string{"agent"}, []string{"server"}},
	{"idcli agent ", []string{"init", "headers", "rotate", "curl"}, []string{"agent", "start"}},
	{"idcli server db:m", []string{"db:migrate"}, []string{"db:drop", "init"}},
	{"idcli agent curl --", []string{"--components", "--pp", "--json", "--help"}, []string{"--hostname"}},
	{"idcli agent curl -X POST http://x --p", []string{"--pp"}, []string{"--json"}},
	{"idcli bench --target whoami --", []string{"--keep-agents", "--database-url"}, []string{"--pp"}},
	{"idcli completion ", []string{"bash", "zsh", "fish"}, nil},
	// The word after a flag that takes a value is that value, not a
	// command: nothing is offered from the tree.
	{"idcli server start --port ", nil, []string{"init", "start", "--port"}},
}

// completionScript writes `idcli completion SHELL`, as the built binary
// prints it, to a file and returns its path.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	r := runBinary(t, t.TempDir(), nil, "completion", shell)
	if r.code != 0 || r.stdout == "" {
		t.Fatalf("idcli completion %s: %v", shell, r)
	}
	path := filepath.Join(t.TempDir(), "idcli."+shell)
	if err := os.WriteFile(path, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// needShell returns the path of shell, or skips the test when it is not
// installed (CI installs it, so there it fails instead).
func needShell(t *testing.T, shell string) string {
	t.Helper()
	p, err := exec.LookPath(shell)
	if err != nil {
		testenv.SkipOrFail(t, "%s is not installed (.ci/run installs it): its completion script is not checked", shell)
	}
	return p
}

// checkCandidates compares the candidates a shell offered (one a line)
// for each completionCases line.
func checkCandidates(t *testing.T, shell, out string, filter bool) {
	t.Helper()
	blocks := strings.Split(out, "\x1e\n")
	if len(blocks) < len(completionCases) {
		t.Fatalf("%s printed %d answers, want %d:\n%s", shell, len(blocks), len(completionCases), out)
	}
	for i, tt := range completionCases {
		got := strings.Fields(blocks[i])
		if filter { // zsh's compadd gets every word and filters itself
			cur := tt.line[strings.LastIndex(tt.line, " ")+1:]
			got = slices.DeleteFunc(got, func(c string) bool { return !strings.HasPrefix(c, cur) })
		}
		for _, w := range tt.want {
			if !slices.Contains(got, w) {
				t.Errorf("%s: %q offers %v, want %q among them", shell, tt.line, got, w)
			}
		}
		for _, n := range tt.not {
			if slices.Contains(got, n) {
				t.Errorf("%s: %q offers %v, want no %q", shell, tt.line, got, n)
			}
		}
	}
}

func TestCompletionBash(t *testing.T) {
	bash := needShell(t, "bash")
	script := completionScript(t, "bash")
	var sb strings.Builder
	sb.WriteString("set -e\nsource \"$1\"\ncomplete -p idcli\n")
	for _, tt := range completionCases {
		// Bash sets COMP_LINE and COMP_POINT; COMP_WORDS is split at ':'.
		sb.WriteString("COMP_LINE='" + tt.line + "'; COMP_POINT=${#COMP_LINE}; _idcli\n")
		sb.WriteString("printf '%s\\n' \"${COMPREPLY[@]}\"; printf '\\x1e\\n'\n")
	}
	out, err := exec.Command(bash, "--norc", "--noprofile", "-c", sb.String(), "bash", script).CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	first, rest, _ := strings.Cut(string(out), "\n")
	if first != "complete -o default -F _idcli idcli" {
		t.Errorf("complete -p idcli = %q, want the _idcli function registered", first)
	}
	// Bash replaces only the text after the last ':' of the word.
	rest = strings.Replace(rest, "\nmigrate\n", "\ndb:migrate\n", 1)
	checkCandidates(t, "bash", rest, false)
	if !strings.Contains(string(out), "\nmigrate\n") {
		t.Errorf("bash: db:m completes to %q, want migrate (the part after the colon)", out)
	}
}

func TestCompletionZsh(t *testing.T) {
	zsh := needShell(t, "zsh")
	script := completionScript(t, "zsh")
	if out, err := exec.Command(zsh, "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, out)
	}
	// Outside a completion widget, words and CURRENT are plain variables
	// and compadd and _files can be stand-ins that print what they get.
	var sb strings.Builder
	sb.WriteString("source \"$1\"\ncompadd() { [[ $1 == -- ]] && shift; print -l -- \"$@\"; }\n_files() { print FILES; }\n")
	for _, tt := range completionCases {
		sb.WriteString("l='" + tt.line + "'; words=(${=l})")
		if strings.HasSuffix(tt.line, " ") {
			sb.WriteString("; words+=('')")
		}
		sb.WriteString("; CURRENT=${#words}; _idcli; print $'\\x1e'\n")
	}
	out, err := exec.Command(zsh, "-f", "-c", sb.String(), "zsh", script).CombinedOutput()
	if err != nil {
		t.Fatalf("zsh: %v\n%s", err, out)
	}
	checkCandidates(t, "zsh", string(out), true)
}

func TestCompletionFish(t *testing.T) {
	fish := needShell(t, "fish")
	script := completionScript(t, "fish")
	if out, err := exec.Command(fish, "--no-execute", script).CombinedOutput(); err != nil {
		t.Fatalf("fish --no-execute: %v\n%s", err, out)
	}
	var sb strings.Builder
	sb.WriteString("source $argv[1]\n")
	for _, tt := range completionCases {
		sb.WriteString("complete -C '" + tt.line + "' | string replace -r '\\t.*' ''; printf '\\x1e\\n'\n")
	}
	cmd := exec.Command(fish, "--no-config", "-c", sb.String(), script)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fish: %v\n%s", err, out)
	}
	checkCandidates(t, "fish", string(out), false)
}

// TestCompletionCoversTheTree: the scripts name every command and flag of
// the tree, so a new command or flag is completed without editing them.
func TestCompletionCoversTheTree(t *testing.T) {
	entries := completionEntries(newRootCmd(&cliEnv{}), "")
	var b strings.Builder
	completion.Bash(&b, entries)
	script := b.String()
	n := 0
	for _, e := range entries {
		for _, f := range e.Flags {
			n++
			if !strings.Contains(script, "'"+e.Path+"|flags') echo '") || !strings.Contains(script, f) {
				t.Errorf("bash script lacks %s of %q", f, e.Path)
			}
		}
	}
	if n < 50 {
		t.Errorf("the tree has %d flags in all, want the whole tree", n)
	}
}
