package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentid/agentid/signer/signertest"
)

// cancelWriter is a buffer that cancels a context once its content
// contains trigger.
type cancelWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	trigger string
	cancel  context.CancelFunc
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if w.trigger != "" && strings.Contains(w.buf.String(), w.trigger) {
		w.cancel()
	}
	return n, err
}

func (w *cancelWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

const (
	uidRx = `(agent-[0-9a-f]{24})`
	kidRx = `([A-Za-z0-9_-]{43})`
)

// demoLines are the lines of a successful demo, in order; the groups
// capture the uid (u), the first kid (k1) and the rotated kid (k2).
var demoLines = []struct {
	re     *regexp.Regexp
	groups []string
}{
	{regexp.MustCompile(`^✔ server started on http://localhost:\d+ \(embedded database\)$`), nil},
	{regexp.MustCompile(`^✔ agent created ` + uidRx + ` \(kid ` + kidRx + `, credentials in .+/agent/\.env\)$`), []string{"u", "k1"}},
	{regexp.MustCompile(`^✔ /whoami 200 ` + uidRx + ` \(kid ` + kidRx + `\)$`), []string{"u", "k1"}},
	{regexp.MustCompile(`^✔ third-party API on http://localhost:\d+ verified ` + uidRx + ` via its key directory \(200, kid ` + kidRx + `\)$`), []string{"u", "k1"}},
	{regexp.MustCompile(`^✔ keys rotated \(new kid ` + kidRx + `\)$`), []string{"k2"}},
	{regexp.MustCompile(`^✔ old key rejected by the server \(401 revoked_key\)$`), nil},
	{regexp.MustCompile(`^✔ new key accepted by the server \(200, kid ` + kidRx + `\)$`), []string{"k2"}},
	{regexp.MustCompile(`^✔ third-party API refreshed: new key 200, old key 401 unknown_key$`), nil},
	{regexp.MustCompile(`^✔ replayed request rejected by the server and the third-party API \(401 replayed_nonce\)$`), nil},
	{regexp.MustCompile(`^✔ servers stopped, temporary folder removed$`), nil},
	{regexp.MustCompile(`^demo complete in \d+\.\ds$`), nil},
}

// TestDemo runs `idcli demo` for real (loopback servers, embedded database)
// and checks its report, that it leaves nothing behind, never prints key
// material, ignores the caller's agent credentials and stops when its
// context is cancelled.
func TestDemo(t *testing.T) {
	t.Parallel()
	// A hostile environment: the demo must neither use nor print these.
	foreignKey := signertest.Key(7)
	hostile := map[string]string{
		"AGENT_UID":         "agent-000000000000000000000000",
		"AGENT_PRIVATE_JWK": string(foreignKey.MarshalPrivateJWK()),
		"AGENT_HOSTNAME":    "http://localhost:1",
	}
	tests := []struct {
		name        string
		args        []string
		environ     map[string]string
		cancelAfter string // cancel the context once stdout contains this
		wantErr     error  // nil: success; else errors.Is target
		wantStdout  []string
		wantStderr  []string // substrings
	}{
		{name: "default", args: []string{"demo"}},
		{name: "caller's agent credentials ignored", args: []string{"demo"}, environ: hostile},
		{name: "verbose", args: []string{"demo", "--verbose"},
			wantStderr: []string{"CreateAgentsTable: migrated", "msg=request", "path=/whoami", "keyfetch: key set fetched", "keyfetch: unknown keyid forces a refresh"}},
		{name: "cancelled after rotation", args: []string{"demo"}, cancelAfter: "✔ keys rotated", wantErr: exitCode(130),
			wantStdout: []string{"✘ old key at the server: interrupted (context canceled)", "✔ servers stopped, temporary folder removed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			environ := map[string]string{"TMPDIR": root}
			for k, v := range tt.environ {
				environ[k] = v
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stdout := &cancelWriter{trigger: tt.cancelAfter, cancel: cancel}
			var stderr bytes.Buffer
			env := &cliEnv{
				Stdin:  strings.NewReader(""),
				Stdout: stdout,
				Stderr: &stderr,
				Getenv: func(k string) string { return environ[k] },
				Dir:    t.TempDir(),
			}
			err := run(ctx, tt.args, env)
			out, errOut := stdout.String(), stderr.String()
			t.Logf("stdout:\n%s", out)

			if tt.wantErr == nil && err != nil {
				t.Fatalf("run = %v, want nil\nstderr:\n%s", err, errOut)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("run = %v, want %v", err, tt.wantErr)
			}
			for _, s := range []string{out, errOut} {
				for _, secret := range []string{`"d":`, "AGENT_PRIVATE_JWK", foreignKey.JWK().D} {
					if strings.Contains(s, secret) {
						t.Errorf("output contains %q (private key material)", secret)
					}
				}
			}
			if entries, err := os.ReadDir(root); err != nil || len(entries) != 0 {
				t.Errorf("TMPDIR holds %v (err %v) after the demo, want it empty", entries, err)
			}
			for _, want := range tt.wantStdout {
				if !strings.Contains(out, want) {
					t.Errorf("stdout lacks %q", want)
				}
			}
			for _, want := range tt.wantStderr {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr lacks %q", want)
				}
			}
			if tt.wantErr != nil {
				return
			}
			if strings.Contains(out, "✘") {
				t.Errorf("stdout contains a ✘ line")
			}
			if !slices.Contains(tt.args, "--verbose") && errOut != "" {
				t.Errorf("stderr = %q, want nothing without --verbose", errOut)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != len(demoLines) {
				t.Fatalf("got %d lines, want %d", len(lines), len(demoLines))
			}
			facts := map[string]string{}
			for i, dl := range demoLines {
				m := dl.re.FindStringSubmatch(lines[i])
				if m == nil {
					t.Errorf("line %d = %q, want a match for %s", i+1, lines[i], dl.re)
					continue
				}
				for j, g := range dl.groups {
					if prev, ok := facts[g]; ok && prev != m[j+1] {
						t.Errorf("line %d names %s %s, earlier lines %s", i+1, g, m[j+1], prev)
					}
					facts[g] = m[j+1]
				}
			}
			if facts["k1"] == facts["k2"] {
				t.Errorf("kid after rotation = %s, want a new kid", facts["k2"])
			}
			if facts["u"] == hostile["AGENT_UID"] || facts["k1"] == foreignKey.KeyID() {
				t.Errorf("the demo agent is %s (kid %s): it took the caller's credentials", facts["u"], facts["k1"])
			}
		})
	}
}

func TestDemoArguments(t *testing.T) {
	t.Parallel()
	res := runCLI(t.Context(), t.TempDir(), map[string]string{"TMPDIR": t.TempDir()}, "demo", "extra")
	if res.err == nil || !strings.Contains(res.err.Error(), "demo takes no arguments") {
		t.Errorf("demo extra: err = %v, want \"demo takes no arguments\"", res.err)
	}
	if res.stdout != "" {
		t.Errorf("demo extra printed %q, want nothing", res.stdout)
	}
}
