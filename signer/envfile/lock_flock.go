//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package envfile

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes an exclusive flock(2) on the lock file at name without
// waiting; busy reports that another holder has it.
func tryLock(name string) (unlock func(), busy bool, err error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, false, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		f.Close()
		return nil, true, nil
	}
	if err != nil {
		f.Close()
		return nil, false, err
	}
	return func() { f.Close() }, false, nil // closing the file releases the lock
}
