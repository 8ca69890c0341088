//go:build unix

package benchtest

import (
	"syscall"
	"time"
)

// ProcessCPU returns the user and system CPU time used by this process
// (getrusage), for benchmarks that report CPU per operation.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
