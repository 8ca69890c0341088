//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package envfile

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// lockHelperEnv makes the test binary, run by TestLockAcrossProcesses,
// hold the lock of the file it names until its stdin closes.
const lockHelperEnv = "ENVFILE_TEST_HOLD_LOCK"

func TestMain(m *testing.M) {
	if path := os.Getenv(lockHelperEnv); path != "" {
		unlock, err := Lock(context.Background(), path)
		if err != nil {
			os.Stdout.WriteString("error " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("locked\n")
		os.Stdin.Read(make([]byte, 1)) // until the parent closes stdin
		unlock()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The lock excludes another process, and is released when that process
// exits.
func TestLockAcrossProcesses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), ".env")
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lockHelperEnv+"="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "locked\n" {
		t.Fatalf("helper said %q", line)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, path); !errors.Is(err, ErrLocked) {
		t.Errorf("Lock while another process holds it = %v, want ErrLocked", err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	unlock, err := Lock(context.Background(), path)
	if err != nil {
		t.Fatalf("Lock after the other process exited = %v", err)
	}
	unlock()
}

// A lock file that is a symbolic link is refused, never followed.
func TestLockRefusesSymlink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	path := filepath.Join(dir, ".env")
	if err := os.Symlink(target, path+LockSuffix); err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(context.Background(), path); err == nil || errors.Is(err, ErrLocked) {
		t.Errorf("Lock through a symlinked lock file = %v, want an error", err)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("the symlink's target was created: %v", err)
	}
}
