//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package envfile

import (
	"os"
	"path/filepath"
	"sync"
)

// held are the lock files locked by this process: without flock(2), Lock
// excludes the holders of one process only.
var held sync.Map // absolute lock file name → struct{}

// tryLock takes the lock file at name for this process without waiting;
// busy reports that another holder has it. It creates the file, as the
// flock(2) version does, so that both leave the same files behind.
func tryLock(name string) (unlock func(), busy bool, err error) {
	abs, err := filepath.Abs(name)
	if err != nil {
		return nil, false, err
	}
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, err
	}
	f.Close()
	if _, loaded := held.LoadOrStore(abs, struct{}{}); loaded {
		return nil, true, nil
	}
	return func() { held.Delete(abs) }, false, nil
}
