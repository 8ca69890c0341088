package testenv_test

import (
	"fmt"
	"testing"

	"github.com/agentid/agentid/signer/signertest/testenv"
)

// TestSkipOrFail: without CI a missing need skips the test; under CI it
// fails it. The reason is given either way.
func TestSkipOrFail(t *testing.T) {
	for _, tt := range []struct {
		ci             string
		skipped, fails bool
		msg            string
	}{
		{"", true, false, "redis is missing: refused"},
		{"true", false, true, "redis is missing: refused (required under CI)"},
	} {
		t.Run("CI="+tt.ci, func(t *testing.T) {
			t.Setenv("CI", tt.ci)
			r := &recorder{TB: t}
			func() {
				defer func() { _ = recover().(stop) }()
				testenv.SkipOrFail(r, "redis is missing: %v", "refused")
			}()
			if r.skipped != tt.skipped || r.failed != tt.fails || r.msg != tt.msg {
				t.Errorf("skipped %v, failed %v, %q; want %v, %v, %q", r.skipped, r.failed, r.msg, tt.skipped, tt.fails, tt.msg)
			}
		})
	}
}

// recorder is a testing.TB whose Skipf and Fatalf record the outcome and
// stop the caller, as the real ones do.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

type stop struct{}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	panic(stop{})
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	panic(stop{})
}
