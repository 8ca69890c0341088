// Package testenv decides what a test does when its environment lacks what
// it needs (PostgreSQL, Redis, a tool on PATH); the tests of every tree
// share it, so the rule is written once. CI provides everything, so there
// a missing need fails the test; elsewhere the test is skipped with the
// reason printed.
//
//	if _, err := exec.LookPath("caddy"); err != nil {
//		testenv.SkipOrFail(t, "caddy is not installed (apt-get install caddy): %v", err)
//	}
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// SkipOrFail stops t because something it needs is missing, described by
// format and args: it fails t when the CI environment variable is set and
// skips t otherwise.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if CI() {
		t.Fatalf("%s (required under CI)", fmt.Sprintf(format, args...))
	}
	t.Skipf(format, args...)
}

// CI reports whether the tests run under CI (the CI environment variable
// is set), where every need of a test is installed.
func CI() bool { return os.Getenv("CI") != "" }
