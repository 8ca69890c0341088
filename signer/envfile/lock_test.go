package envfile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Concurrent read-modify-write edits through Update lose none of each
// other's changes, keep the lines they do not touch and leave mode 0600.
func TestUpdateUnderLockLosesNoEdit(t *testing.T) {
	t.Parallel()
	path := writeTemp(t, "# keep me\nOTHER='x y'\nN=0\n")
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- Update(context.Background(), path, func(f *File) (bool, error) {
				v, _ := f.Get("N")
				c, err := strconv.Atoi(v)
				if err != nil {
					return false, err
				}
				runtime.Gosched() // let another edit run between the read and the write
				f.Set("N", strconv.Itoa(c+1))
				return true, nil
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(path)
	if want := fmt.Sprintf("# keep me\nOTHER='x y'\nN=%d\n", n); string(b) != want {
		t.Errorf("file = %q, want %q", b, want)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", st.Mode().Perm())
	}
	if st, err := os.Stat(path + LockSuffix); err != nil || st.Mode().Perm() != 0o600 || st.Size() != 0 {
		t.Errorf("lock file: %v, %v; want an empty file with mode 0600", st, err)
	}
}

// An edit that reports no change or an error writes nothing.
func TestUpdateWritesOnlyChanges(t *testing.T) {
	t.Parallel()
	const content = "A=1\nB=2\n"
	path := writeTemp(t, content)
	boom := errors.New("boom")
	if err := Update(context.Background(), path, func(f *File) (bool, error) { f.Set("A", "9"); return true, boom }); !errors.Is(err, boom) {
		t.Errorf("Update = %v, want the edit's error", err)
	}
	if err := Update(context.Background(), path, func(f *File) (bool, error) { f.Set("A", "9"); return false, nil }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != content {
		t.Errorf("file = %q, want it untouched", b)
	}
}

// Lock waits while another holder has the lock and gives up when its
// context ends, with ErrLocked.
func TestLockWaitsThenGivesUp(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), ".env")
	unlock, err := Lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, path); !errors.Is(err, ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock while held = %v, want ErrLocked and the deadline", err)
	}
	got := make(chan error, 1)
	go func() {
		u, err := Lock(context.Background(), path)
		if err == nil {
			u()
		}
		got <- err
	}()
	unlock()
	unlock() // a second call does nothing
	if err := <-got; err != nil {
		t.Errorf("Lock after the release = %v", err)
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	f, err := Read(writeTemp(t, "A=1\n# c\nB=2\nA=3\n"))
	if err != nil {
		t.Fatal(err)
	}
	f.Delete("A")
	f.Delete("MISSING")
	if got := string(f.Bytes()); got != "# c\nB=2\n" {
		t.Errorf("after Delete = %q", got)
	}
}
