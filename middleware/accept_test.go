package middleware_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentid/agentid/middleware"
)

func acceptReq(vals ...string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "http://api.example.com/", nil)
	for _, v := range vals {
		r.Header.Add("Accept", v)
	}
	return r
}

// TestWantsProblem: Problem Details only when the client's Accept weighs
// application/problem+json above application/json (RFC 9110 §12.5.1).
func TestWantsProblem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		accept []string
		want   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{"*/*"}, false},
		{[]string{"application/json"}, false},
		{[]string{"application/problem+json"}, true},
		{[]string{"Application/Problem+JSON"}, true},
		{[]string{"application/problem+json;q=0.9, application/json;q=0.8"}, true},
		{[]string{"application/problem+json;q=0.8, application/json;q=0.9"}, false},
		{[]string{"application/problem+json, application/json"}, false}, // a tie: the default
		{[]string{"application/problem+json, */*;q=0.1"}, true},
		{[]string{"application/*;q=0.5, application/problem+json"}, true},
		{[]string{"application/*, application/json;q=0"}, true}, // json refused, problem by application/*
		{[]string{"application/problem+json;q=0"}, false},
		{[]string{"text/html, application/xhtml+xml"}, false},
		{[]string{"text/html", "application/problem+json"}, true}, // two field lines are one list
		{[]string{"application/problem+json ; charset=utf-8 ; q=1"}, true},
		{[]string{"application/problem+json;Q=0.5, application/json;q=0.4"}, true},
		{[]string{"application/problem+json;q=0.5;q=0"}, true}, // the first weight ends the parameters
		// Weights that are not qvalues: the element is skipped.
		{[]string{"application/problem+json;q=1.0001"}, false},
		{[]string{"application/problem+json;q=-1"}, false},
		{[]string{"application/problem+json;q=2"}, false},
		{[]string{"application/problem+json;q=1.5"}, false},
		{[]string{"application/problem+json;q="}, false},
		{[]string{"application/problem+json;q=0.1e3"}, false},
		{[]string{"application/problem+json;q=0x1"}, false},
		{[]string{"application/problem+json;q=1.", "application/json;q=0.5"}, true},
		{[]string{"application/problem+json;q=0.", "application/json;q=0.5"}, false},
		// Not media ranges.
		{[]string{"problem+json"}, false},
		{[]string{"*/problem+json"}, false},
		{[]string{"application/problem+json\x00"}, false},
		{[]string{"application/problém+json"}, false},
		{[]string{`application/json;x="a,application/problem+json"`}, false},
		{[]string{",,,, ,application/problem+json,,"}, true},
	}
	for _, tt := range tests {
		if got := middleware.WantsProblem(acceptReq(tt.accept...)); got != tt.want {
			t.Errorf("Accept %q: wantsProblem = %v, want %v", tt.accept, got, tt.want)
		}
	}
	if middleware.WantsProblem(nil) {
		t.Error("a nil request wants Problem Details")
	}
}

// TestWantsProblemHostile: an Accept the client made huge, with many
// elements or parameters, costs at most the bounded prefix, allocates
// nothing, and never panics; what lies beyond the bound is not read. Not
// parallel: AllocsPerRun.
func TestWantsProblemHostile(t *testing.T) {
	huge := []*http.Request{
		acceptReq(strings.Repeat("a/b;q=0.5,", 1<<17) + "application/problem+json"),
		acceptReq("application/problem+json" + strings.Repeat(";p=v", 1<<17)),
		acceptReq(strings.Repeat(";", 1<<20)),
		acceptReq(strings.Repeat(",", 1<<20)),
		acceptReq(strings.Repeat("*/*;q=0.", 1<<17)),
		acceptReq(strings.Repeat("application/problem+json;q=0.5", 1000)), // no comma: one bad element
		acceptReq(strings.Split(strings.Repeat("x/y,", 10000), ",")...),   // many field lines
	}
	for i, r := range huge {
		if allocs := testing.AllocsPerRun(5, func() { middleware.WantsProblem(r) }); allocs != 0 {
			t.Errorf("hostile Accept %d: %v allocations per call, want 0", i, allocs)
		}
	}
	if middleware.WantsProblem(huge[0]) {
		t.Error("a media range beyond the first 4096 bytes was read")
	}
	// Past the 64th media range nothing is read either.
	if middleware.WantsProblem(acceptReq(strings.Repeat("a/b,", 64) + "application/problem+json")) {
		t.Error("a media range beyond the 64th was read")
	}
	if !middleware.WantsProblem(acceptReq(strings.Repeat("a/b,", 63) + "application/problem+json")) {
		t.Error("the 64th media range was not read")
	}
}

// FuzzWantsProblem: any Accept, never a panic.
func FuzzWantsProblem(f *testing.F) {
	for _, s := range []string{"", "*/*", "application/problem+json;q=0.5", "a/b;q=1.000,;;,", "application/*;q=0.001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		middleware.WantsProblem(acceptReq(s))
	})
}
