package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// decision is one row of architecture.md's table "Decisions, each made in
// one place".
type decision struct {
	what, pkg, name string
	elsewhere       *regexp.Regexp // nil: no pattern
}

// TestDecisionTable checks architecture.md's table of decisions against
// the code: each decision's package exists and declares the name that
// makes it, and no non-test Go file outside that package (test-support
// packages aside) matches the row's "Nowhere else" pattern.
func TestDecisionTable(t *testing.T) {
	rows := decisionRows(t)
	if len(rows) < 10 {
		t.Fatalf("read %d decisions from docs/architecture.md; is the table still there?", len(rows))
	}
	files := productionFiles(t)
	for _, d := range rows {
		if !declares(t, d.pkg, d.name) {
			t.Errorf("%s: package %s does not declare %s", d.what, d.pkg, d.name)
		}
		if d.elsewhere == nil {
			continue
		}
		for path, src := range files {
			if filepath.Dir(path) == d.pkg {
				continue
			}
			if loc := d.elsewhere.FindIndex(src); loc != nil {
				line := 1 + strings.Count(string(src[:loc[0]]), "\n")
				t.Errorf("%s is decided in %s only, but %s:%d matches %q", d.what, d.pkg, path, line, d.elsewhere)
			}
		}
	}
}

// TestDecisionTableCatches shows that the check finds a second
// implementation: a file outside the package that matches a pattern.
func TestDecisionTableCatches(t *testing.T) {
	for _, d := range decisionRows(t) {
		if d.pkg == "middleware/clientaddr" {
			if !d.elsewhere.MatchString(`host, _, err := net.SplitHostPort(r.RemoteAddr)`) {
				t.Errorf("the client-address pattern %q misses a hand-rolled reading of RemoteAddr", d.elsewhere)
			}
			return
		}
	}
	t.Fatal("no client-address row in the table")
}

var cell = regexp.MustCompile("^`(.*)`$")

// splitRow splits a Markdown table row on the | not escaped as \|, and
// trims each cell; the first and last cells are the empty ones outside
// the outer bars.
func splitRow(line string) []string {
	var cells []string
	start := 0
	for i := 0; i < len(line); i++ {
		if line[i] == '\\' {
			i++
			continue
		}
		if line[i] == '|' {
			cells = append(cells, strings.TrimSpace(line[start:i]))
			start = i + 1
		}
	}
	return append(cells, strings.TrimSpace(line[start:]))
}

func decisionRows(t *testing.T) []decision {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(src), "\n## Decisions, each made in one place\n")
	if !ok {
		t.Fatal(`docs/architecture.md has no section "Decisions, each made in one place"`)
	}
	var rows []decision
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, "## ") {
			break
		}
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| Decision |") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := splitRow(line)
		if len(cells) != 6 {
			t.Errorf("architecture.md: a decision row needs 4 cells: %q", line)
			continue
		}
		d := decision{what: cells[1]}
		for i, dst := range []*string{&d.pkg, &d.name} {
			m := cell.FindStringSubmatch(cells[2+i])
			if m == nil {
				t.Errorf("architecture.md: %q: cell %q is not one code span", d.what, cells[2+i])
			}
			if m != nil {
				*dst = m[1]
			}
		}
		if c := cells[4]; c != "" {
			m := cell.FindStringSubmatch(c)
			if m == nil {
				t.Errorf("architecture.md: %q: pattern cell %q is not one code span", d.what, c)
				continue
			}
			re, err := regexp.Compile(strings.ReplaceAll(m[1], `\|`, `|`))
			if err != nil {
				t.Errorf("architecture.md: %q: %v", d.what, err)
				continue
			}
			d.elsewhere = re
		}
		rows = append(rows, d)
	}
	return rows
}

// productionFiles returns every non-test Go file of the repository outside
// testdata and test-support packages (a directory whose name ends in
// "test"), by slash path from the root.
func productionFiles(t *testing.T) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "node_modules" || strings.HasSuffix(name, "test") ||
				(strings.HasPrefix(name, ".") && name != ".ci")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			files[filepath.ToSlash(rel)] = src
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("found %d Go files; is the root %s?", len(files), root)
	}
	return files
}

// declares reports whether the non-test files of package dir declare name
// at top level (a function, type, variable or constant) or as a method.
func declares(t *testing.T, dir, name string) bool {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(dir), "*.go"))
	if err != nil || len(paths) == 0 {
		t.Errorf("package %s: no Go files (%v)", dir, err)
		return false
	}
	fset := token.NewFileSet()
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Name.Name == name {
					return true
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.Name == name {
							return true
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.Name == name {
								return true
							}
						}
					}
				}
			}
		}
	}
	return false
}
