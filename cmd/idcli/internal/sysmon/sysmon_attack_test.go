package sysmon

import (
	"strings"
	"testing"
)

// TestSchedtraceEnvironOdd: GODEBUG holding odd values (an empty
// schedtrace, spaces, duplicated settings or GODEBUG lines, other case)
// never makes server start re-execute twice: after at most one change,
// schedtraceEnviron leaves the environment alone, and the result holds
// one GODEBUG line.
func TestSchedtraceEnvironOdd(t *testing.T) {
	t.Parallel()
	for _, env := range [][]string{
		{"GODEBUG=schedtrace="},
		{"GODEBUG= schedtrace=1"},
		{"GODEBUG=schedtrace=1,schedtrace=2"},
		{"GODEBUG=,,,"},
		{"GODEBUG= , ,"},
		{"GODEBUG=SCHEDTRACE=1"},
		{"GODEBUG=schedtrace"},
		{"GODEBUG=xschedtrace=1"},
		{"GODEBUG=a=1", "GODEBUG=b=2"},
		{"GODEBUG=schedtrace=0", "GODEBUG=b=2"},
		{"GODEBUG=b=2", "GODEBUG=schedtrace=0"},
		{"GODEBUG"},
		{"GODEBUG==="},
		{"GODEBUG=" + strings.Repeat("x=1,", 1000)},
		{"godebug=schedtrace=1"},
		{},
	} {
		cur := env
		changes := 0
		for range 3 {
			next, ok := schedtraceEnviron(cur)
			if !ok {
				break
			}
			changes++
			cur = next
		}
		if changes > 1 {
			t.Errorf("%q: changed %d times, last %q", env, changes, cur)
		}
		if changes == 1 {
			n := 0
			for _, kv := range cur {
				if strings.HasPrefix(kv, "GODEBUG=") {
					n++
					if !strings.HasSuffix(kv, serverSchedtrace) {
						t.Errorf("%q: %q", env, kv)
					}
				}
			}
			if n != 1 {
				t.Errorf("%q: %d GODEBUG lines in %q", env, n, cur)
			}
		}
	}
}
