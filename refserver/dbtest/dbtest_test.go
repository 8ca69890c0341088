package dbtest_test

import (
	"testing"

	"github.com/agentid/agentid/refserver/dbtest"
)

// TestWithDatabase: only the database name changes, also when the user
// name is the same as the database's (a string replacement of "/test"
// would rewrite the user's "//test@" instead).
func TestWithDatabase(t *testing.T) {
	t.Parallel()
	tests := []struct{ base, name, want string }{
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "other",
			"postgres://postgres@127.0.0.1:5432/other?sslmode=disable"},
		{"postgres://test@127.0.0.1:5432/test?sslmode=disable", "other",
			"postgres://test@127.0.0.1:5432/other?sslmode=disable"},
		{"postgres://test:test@localhost/test", "agentid_admin_1",
			"postgres://test:test@localhost/agentid_admin_1"},
		{"postgres://u@h:1/db?search_path=test&sslmode=disable", "x",
			"postgres://u@h:1/x?search_path=test&sslmode=disable"},
	}
	for _, tt := range tests {
		got, err := dbtest.WithDatabase(tt.base, tt.name)
		if err != nil || got != tt.want {
			t.Errorf("WithDatabase(%q, %q) = %q, %v; want %q", tt.base, tt.name, got, err, tt.want)
		}
	}
}
