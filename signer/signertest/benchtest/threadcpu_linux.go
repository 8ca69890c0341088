package benchtest

import (
	"syscall"
	"time"
	"unsafe"
)

// ThreadCPU returns the CPU time of the calling OS thread
// (CLOCK_THREAD_CPUTIME_ID); a benchmark locks its goroutine to the
// thread (runtime.LockOSThread) around what it measures.
func ThreadCPU() time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}
