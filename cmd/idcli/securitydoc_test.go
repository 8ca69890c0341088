package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSecurityDocNamesTests keeps docs/security.md honest: every test or
// benchmark it names exists in the module, and every row of its table of
// what an attacker who captured a request can and cannot do names one.
func TestSecurityDocNamesTests(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark)\w+)\(`)
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllSubmatch(b, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`((?:Test|Benchmark)\\w+)`").FindAllStringSubmatch(string(doc), -1)
	if len(named) < 20 {
		t.Fatalf("docs/security.md names %d tests, want the tests behind its promises", len(named))
	}
	for _, m := range named {
		if !defined[m[1]] {
			t.Errorf("docs/security.md names %s, which no _test.go file defines", m[1])
		}
	}

	_, table, ok := strings.Cut(string(doc), "| The attacker tries | Outcome | Test |")
	if !ok {
		t.Fatal("docs/security.md has no table of what an attacker who captured a request can do")
	}
	rows := 0
	for _, line := range strings.Split(table, "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		rows++
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 3 || !strings.Contains(cells[2], "`Test") && !strings.Contains(cells[2], "`Benchmark") {
			t.Errorf("a row of the capture table names no test: %s", line)
		}
	}
	if rows < 10 {
		t.Errorf("the capture table has %d rows, want at least 10", rows)
	}
}
