package store_test

import (
	"strings"
	"testing"

	"github.com/agentid/agentid/signer/redact"
)

// TestRedactURL: the forms of a database URL (PostgreSQL, SQLite with its
// pragmas) come out of redact.URL with nothing secret left.
func TestRedactURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
		secrets        []string
	}{
		{"password in user info", "postgres://agentid:hunter2@db.internal:5432/prod",
			"postgres://xxxxx@db.internal:5432/prod", []string{"hunter2", "agentid"}},
		{"password parameter", "postgres://db.internal/prod?user=agentid&password=hunter2",
			"postgres://db.internal/prod?user=xxxxx&password=xxxxx", []string{"hunter2"}},
		{"every parameter, whatever its name", "postgresql://u:p@h/d?sslmode=verify-full&sslpassword=s3cret&application_name=svc&x-token=abc123",
			"postgresql://xxxxx@h/d?sslmode=xxxxx&sslpassword=xxxxx&application_name=xxxxx&x-token=xxxxx", []string{"s3cret", "abc123", "verify-full", ":p@"}},
		{"repeated and empty parameters", "postgres://h/d?options=-c%20a%3Db&options=&flag",
			"postgres://h/d?options=xxxxx&options=&xxxxx", []string{"-c", "a%3Db", "flag"}},
		{"fragment", "postgres://h/d#hunter2", "postgres://h/d#xxxxx", []string{"hunter2"}},
		{"no secrets", "postgres://db.internal:5432/prod", "postgres://db.internal:5432/prod", nil},
		{"sqlite file with pragmas", "sqlite:///var/lib/agentid.db?_pragma=key(hunter2)",
			"sqlite:///var/lib/agentid.db?_pragma=xxxxx", []string{"hunter2"}},
		{"sqlite in memory", "sqlite::memory:", "sqlite::memory:", nil},
		{"unparsable", "postgres://u:hunter2@h/%zz?password=hunter3", "postgres://xxxxx@h/%zz?password=xxxxx", []string{"hunter2", "hunter3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := redact.URL(tt.in)
			if got != tt.want {
				t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
			}
			for _, s := range tt.secrets {
				if strings.Contains(got, s) {
					t.Errorf("RedactURL(%q) = %q still contains %q", tt.in, got, s)
				}
			}
		})
	}
}
