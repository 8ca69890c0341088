package middleware

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReasonsDoc: docs/outcomes.md's reason table lists exactly the
// reasons of the code, each with exactly the codes the reasons table maps
// to it.
func TestReasonsDoc(t *testing.T) {
	b, err := os.ReadFile("../docs/outcomes.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Reasons\n")
	if start < 0 {
		t.Fatal("docs/outcomes.md has no ## Reasons section")
	}
	section := doc[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ([a-z-]+) \\| (.*) \\|$")
	code := regexp.MustCompile("`([a-z_]+)`")
	docCodes := map[string][]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		if _, dup := docCodes[m[1]]; dup {
			t.Errorf("reason %s is listed twice", m[1])
		}
		codes := []string{}
		for _, c := range code.FindAllStringSubmatch(m[3], -1) {
			codes = append(codes, c[1])
		}
		slices.Sort(codes)
		docCodes[m[1]] = codes
	}
	want := map[string][]string{}
	for r := range allReasons() {
		want[r] = []string{}
	}
	for c, r := range reasons {
		want[r] = append(want[r], string(c))
	}
	for r, codes := range want {
		slices.Sort(codes)
		got, ok := docCodes[r]
		switch {
		case !ok:
			t.Errorf("reason %s is not in docs/outcomes.md", r)
		case !slices.Equal(got, codes):
			t.Errorf("reason %s: the doc lists codes %v, the code maps %v", r, got, codes)
		}
	}
	for r := range docCodes {
		if _, ok := want[r]; !ok {
			t.Errorf("docs/outcomes.md lists reason %s, which the code never gives", r)
		}
	}
	// Each row's outcome is the one Error.Outcome gives its codes.
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		for _, c := range docCodes[m[1]] {
			if got := (&Error{Code: Code(c)}).Outcome(); m[2] != "any" && string(got) != m[2] {
				t.Errorf("reason %s: the doc says %s, code %s's outcome is %s", m[1], m[2], c, got)
			}
		}
	}
}
