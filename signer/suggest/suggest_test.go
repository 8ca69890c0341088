package suggest

import (
	"strings"
	"testing"
)

func TestClose(t *testing.T) {
	t.Parallel()
	cands := []string{"init", "start", "db:create", "db:migrate", "db:drop"}
	tests := []struct {
		typed string
		want  []string
	}{
		{"db:migrat", []string{"db:migrate"}},
		{"strat", []string{"start"}},
		{"INIT", []string{"init"}},
		{"db:", []string{"db:create", "db:migrate", "db:drop"}},
		{"zzz", nil},
		{"x", nil},
	}
	for _, tt := range tests {
		if got := Close(tt.typed, cands); strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("Close(%q) = %v, want %v", tt.typed, got, tt.want)
		}
	}
	// - and _ are one letter; an exact match ignoring case wins alone.
	if got := Close("upstream-max-idle", []string{"upstream_max_idle", "upstream_max_idl"}); strings.Join(got, ",") != "upstream_max_idle" {
		t.Errorf("Close(upstream-max-idle) = %v", got)
	}
}

func TestDistance(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		a, b string
		want int
	}{{"agnet", "agent", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"same", "same", 0}, {"ſa", "as", 2}} {
		if got := distance(tt.a, tt.b); got != tt.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
