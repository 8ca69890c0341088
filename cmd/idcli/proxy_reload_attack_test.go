package main

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestProxyReloadTruncatedFileAttack runs the idcli binary with an allow
// list in its --config file and sends it SIGHUP while the file is in the
// states an editor's truncate-then-write (or a deploy's cp) leaves it in
// for a moment: empty, cut after a line (its last keys, the allow list,
// missing, the rest still valid), cut inside a line. Each is refused, the
// log says so and why, and the agent the allow list blocks stays at 403;
// a change of a key that needs a restart is refused as a whole. Then the
// legitimate edits apply: adding the agent to the list, and clearing the
// list with an explicit empty value. `--check` refuses the file cut inside
// a line too. It does so twice: with every key in
// the file, and with the keys a start needs given as flags (so that an
// emptied file alone still makes a configuration that would start).
func TestProxyReloadTruncatedFileAttack(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the idcli binary")
	}
	t.Parallel()
	bin := idcliBinary(t)
	srv := clitest.StartServer(t, clitest.ServerOptions{})
	allowedKey, blockedKey := signertest.Key(0x81), signertest.Key(0x82)
	allowed := srv.AgentOrigin(clitest.Register(t, nil, srv.URL, allowedKey))
	blocked := srv.AgentOrigin(clitest.Register(t, nil, srv.URL, blockedKey))
	up := newEchoUpstream(t)

	for _, flags := range []bool{false, true} {
		name := "keys in the file"
		if flags {
			name = "keys a start needs as flags"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			dir := t.TempDir()
			file := filepath.Join(dir, "proxy.yaml")
			args := []string{"proxy", "--config", "proxy.yaml", "--listen", addr}
			head := "upstream: " + up.URL + "\nauthorities: [\"" + addr + "\"]\ntrust:\n  hosts: [\"*.localhost:*\"]\n  allow_http: true\n  allow_private: true\naccess_log: \"off\"\n"
			if flags {
				args = append(args, "--upstream", up.URL, "--authority", addr, "--access-log", "off")
				args = append(args, localTrust...)
				head = ""
			}
			rules := "mode: required\nlimits:\n  agent: 1000/1m\nallow:\n  identities:\n    - " + allowed + "\n"
			full := head + rules
			// In place, as an editor that truncates and rewrites the file
			// leaves it (not written aside and renamed).
			write := func(body string) {
				t.Helper()
				if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			write(full)

			var stderr syncBuffer
			cmd := exec.Command(bin, args...)
			cmd.Dir, cmd.Stderr = dir, &stderr
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(30 * time.Second):
					cmd.Process.Kill()
				}
			})
			reloads := regexp.MustCompile(`(?m)^.*msg="reload: (?:the file was refused|rules, lists and limits applied).*$`)
			waitLines := func(re *regexp.Regexp, n int) []string {
				t.Helper()
				deadline := time.Now().Add(30 * time.Second)
				for {
					if got := re.FindAllString(stderr.String(), -1); len(got) >= n {
						return got
					}
					select {
					case err := <-exited:
						t.Fatalf("the proxy exited (%v):\n%s", err, stderr.String())
					default:
					}
					if time.Now().After(deadline) {
						t.Fatalf("fewer than %d %s in the log:\n%s", n, re, stderr.String())
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			waitLines(regexp.MustCompile(`listening on http://`), 1)
			base := "http://" + addr
			status := func(key signer.PrivateKey, origin string) int {
				t.Helper()
				return clitest.MustSend(t, http.DefaultClient, signedGet(t, base+"/x", key, origin, signer.Options{})).Status
			}
			if a, b := status(allowedKey, allowed), status(blockedKey, blocked); a != 200 || b != 403 {
				t.Fatalf("before any reload: allowed agent %d, blocked agent %d; want 200 and 403", a, b)
			}
			n := 0
			// reload writes body, sends SIGHUP and returns the reload's log
			// line.
			reload := func(body string) string {
				t.Helper()
				write(body)
				cmd.Process.Signal(syscall.SIGHUP)
				n++
				return waitLines(reloads, n)[n-1]
			}

			cut := strings.Index(full, "allow:")
			lineCut := strings.Index(full, allowed) + len(allowed)/2
			for _, tc := range []struct {
				name, body string
				why        []string // what the log line says, beyond "refused"
			}{
				{"emptied", "", []string{"is empty", "allow.identities"}},
				{"cut after a line: the allow list missing", full[:cut], []string{"allow.identities", "proxy.yaml:", "explicit"}},
				{"cut after a line: the list's name left", full[:cut] + "allow:\n  identities:\n", []string{"allow.identities"}},
				{"cut inside a line", full[:lineCut], []string{"newline"}},
			} {
				line := reload(tc.body)
				if !strings.Contains(line, "reload: the file was refused") {
					t.Errorf("%s: the reload was not refused: %s", tc.name, line)
				}
				for _, w := range tc.why {
					if !strings.Contains(line, w) {
						t.Errorf("%s: the log line does not say %q: %s", tc.name, w, line)
					}
				}
				if s := status(blockedKey, blocked); s != 403 {
					t.Errorf("%s: the blocked agent got %d, want 403 (the allow list in force)", tc.name, s)
				}
				if tc.body == full[:lineCut] { // --check, run before a reload, says it too
					r := runCLI(t.Context(), dir, nil, append(slices.Clone(args), "--check")...)
					if r.err == nil || !strings.Contains(r.err.Error(), "does not end with a newline") {
						t.Errorf("--check of a file cut inside a line: %v, want it refused for the missing newline", r.err)
					}
				}
				if s := status(allowedKey, allowed); s != 200 {
					t.Errorf("%s: the allowed agent got %d, want 200", tc.name, s)
				}
			}
			if !flags {
				line := reload(strings.Replace(full, "access_log: \"off\"\n", "access_log: \"off\"\nrefusal_status: 403\n", 1) +
					"    - " + blocked + "\n")
				if !strings.Contains(line, "reload: the file was refused") || !strings.Contains(line, "refusal_status") || !strings.Contains(line, "restart") {
					t.Errorf("a change of refusal_status (a restart-only key): %s, want refused, naming it and a restart", line)
				}
				if s := status(blockedKey, blocked); s != 403 {
					t.Errorf("after a refused restart-only change, the blocked agent got %d, want 403", s)
				}
			}

			// The legitimate edits: the agent added to the list, then the list
			// cleared with an explicit empty value.
			if line := reload(full + "    - " + blocked + "\n"); !strings.Contains(line, "applied") {
				t.Fatalf("adding the agent to the allow list: %s, want applied", line)
			}
			if s := status(blockedKey, blocked); s != 200 {
				t.Errorf("after the agent was added to the allow list: %d, want 200", s)
			}
			if line := reload(full[:cut] + "allow:\n  identities: []\n"); !strings.Contains(line, "applied") {
				t.Fatalf("clearing the allow list with []: %s, want applied", line)
			}
			if s := status(blockedKey, blocked); s != 200 {
				t.Errorf("after the allow list was cleared: %d, want 200", s)
			}
		})
	}
}
