package envfile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// LockSuffix names the lock file of a dotenv file: Lock locks path +
// LockSuffix, beside it. The lock file is empty; it is created with mode
// 0600 and never removed (removing it would let two holders lock two
// different files).
const LockSuffix = ".lock"

// ErrLocked is wrapped by Lock's error when ctx ended before the lock was
// free.
var ErrLocked = errors.New("envfile: locked")

// Lock takes the exclusive lock of the dotenv file at path and returns the
// function that releases it. On Linux, macOS and the BSDs the lock is an
// advisory flock(2) on the lock file (path + LockSuffix), which every
// process editing the file through this package takes, and which the
// system releases when its holder exits, however it exits. Elsewhere it
// excludes the holders of one process only.
//
// Lock waits for the lock until ctx is done, then fails with an error
// wrapping ErrLocked and ctx's error. A lock file that is a symbolic link
// is refused. Edits made under the lock should read the file after taking
// it: Update does so.
func Lock(ctx context.Context, path string) (unlock func(), err error) {
	wait := time.Millisecond
	for {
		unlock, busy, err := tryLock(path + LockSuffix)
		if err != nil {
			return nil, fmt.Errorf("envfile: lock %s: %w", path, err)
		}
		if !busy {
			var once sync.Once
			return func() { once.Do(unlock) }, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: %s is being written by another process (lock %s): %w", ErrLocked, path, path+LockSuffix, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// Update edits the dotenv file at path under its lock: it takes the lock
// (waiting as Lock does), reads the file, lets edit change it and writes it
// back (atomically, mode 0600) when edit reports a change, then releases
// the lock. An error of edit is returned as is, nothing written. Every
// edit thus works on the file as the last writer left it, never on a copy
// read earlier.
func Update(ctx context.Context, path string, edit func(*File) (changed bool, err error)) error {
	unlock, err := Lock(ctx, path)
	if err != nil {
		return err
	}
	defer unlock()
	f, err := Read(path)
	if err != nil {
		return err
	}
	changed, err := edit(f)
	if err != nil || !changed {
		return err
	}
	return f.Write()
}
