// Package sysmon keeps the Go runtime's system monitor out of its deep
// sleep in idcli's long-running servers (`idcli server start`, `idcli
// proxy`): Quiet runs the process again with schedtrace in GODEBUG.
//
//	if serving {
//		sysmon.Quiet() // returns only if the process is not re-executed
//	}
package sysmon

import "strings"

// serverSchedtrace is the GODEBUG schedtrace value idcli's servers run
// with when GODEBUG does not set schedtrace: the longest period the
// runtime accepts (2^31-1 ms, about 24.8 days). A positive schedtrace keeps
// the runtime's monitor thread out of its deep sleep, which it otherwise
// enters whenever every processor is idle and leaves at the next system
// call, polling at its shortest interval for a while after each such
// wake-up. Under moderate load the server goes idle and busy again
// thousands of times a second, and those polls were the largest single
// source of context switches (docs/benchmarks.md has the measurement);
// without deep sleep the monitor backs off to its longest interval
// however the load comes. The cost: one line of scheduler state on stderr
// every 24.8 days of host uptime, one when a fatal error crashes the
// process, and the monitor's polls at its longest interval while the
// server is fully idle.
const serverSchedtrace = "schedtrace=2147483647"

// schedtraceEnviron returns environ with serverSchedtrace added to
// GODEBUG, and true, unless GODEBUG already sets schedtrace (the operator's
// choice, schedtrace=0 to opt out, or a process already re-executed).
func schedtraceEnviron(environ []string) ([]string, bool) {
	out := make([]string, 0, len(environ)+1)
	godebug, found := "", false
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			// The first GODEBUG is the one the runtime reads.
			if !found {
				godebug, found = v, true
			}
			continue
		}
		out = append(out, kv)
	}
	for _, setting := range strings.Split(godebug, ",") {
		if strings.HasPrefix(strings.TrimSpace(setting), "schedtrace=") {
			return environ, false
		}
	}
	if godebug != "" {
		godebug += ","
	}
	return append(out, "GODEBUG="+godebug+serverSchedtrace), true
}
