package sysmon

import (
	"slices"
	"testing"
)

// TestSchedtraceEnviron: server start adds schedtrace to GODEBUG, keeping
// the other settings, unless GODEBUG sets schedtrace already (the
// operator's choice, or the re-executed process: no second re-exec).
func TestSchedtraceEnviron(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   []string
		want []string // nil: unchanged, no re-exec
	}{
		{[]string{"PATH=/bin"}, []string{"PATH=/bin", "GODEBUG=" + serverSchedtrace}},
		{[]string{"GODEBUG=http2debug=1", "HOME=/h"}, []string{"HOME=/h", "GODEBUG=http2debug=1," + serverSchedtrace}},
		{[]string{"GODEBUG="}, []string{"GODEBUG=" + serverSchedtrace}},
		{[]string{"GODEBUG=schedtrace=0"}, nil},
		// Two GODEBUG lines: the runtime reads the first, so does this.
		{[]string{"GODEBUG=schedtrace=0", "GODEBUG=b=2"}, nil},
		{[]string{"GODEBUG=b=2", "GODEBUG=schedtrace=0"}, []string{"GODEBUG=b=2," + serverSchedtrace}},
		{[]string{"GODEBUG=madvdontneed=1, schedtrace=1000"}, nil},
		{[]string{"PATH=/bin", "GODEBUG=" + serverSchedtrace}, nil},
		{[]string{"XGODEBUG=schedtrace=0"}, []string{"XGODEBUG=schedtrace=0", "GODEBUG=" + serverSchedtrace}},
	}
	for _, tt := range tests {
		got, ok := schedtraceEnviron(tt.in)
		if tt.want == nil {
			if ok || !slices.Equal(got, tt.in) {
				t.Errorf("%q: got %q, %v; want it unchanged, false", tt.in, got, ok)
			}
			continue
		}
		if !ok || !slices.Equal(got, tt.want) {
			t.Errorf("%q: got %q, %v; want %q, true", tt.in, got, ok, tt.want)
		}
		if again, ok := schedtraceEnviron(got); ok {
			t.Errorf("%q: added again: %q", got, again)
		}
	}
}
