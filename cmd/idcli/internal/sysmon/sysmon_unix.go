//go:build unix

package sysmon

import (
	"os"
	"syscall"
)

// Quiet re-executes the program in place (same process, same arguments)
// with serverSchedtrace in GODEBUG, which the runtime reads only at
// startup. It returns when GODEBUG already sets schedtrace or the program
// cannot be re-executed; the server then runs as it is. Call it first
// thing in main, and only for a long-running server.
func Quiet() {
	environ, ok := schedtraceEnviron(os.Environ())
	if !ok {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	syscall.Exec(exe, os.Args, environ)
}
