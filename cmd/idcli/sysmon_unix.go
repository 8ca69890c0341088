//go:build unix

package main

import (
	"os"
	"syscall"
)

// quietSysmon re-executes `idcli server start` and `idcli proxy` in place (same process,
// same arguments) with serverSchedtrace in GODEBUG, which the runtime reads
// only at startup. It returns when GODEBUG already sets schedtrace or the
// program cannot be re-executed; the server then runs as it is.
func quietSysmon(args []string) {
	if !isServing(args) {
		return
	}
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
