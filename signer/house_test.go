package signer_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The house rules: sizes a reader can hold in mind, and no process-wide
// setting a library user could trip over. Each limit is a review point:
// code that needs more is split along its seams, not granted an exception.
const (
	maxFileLines     = 500  // a non-test Go file
	maxPackageDoc    = 25   // lines of a package's doc comment; detail goes to docs/
	maxMainLines     = 5000 // non-test lines of cmd/idcli's package main
	maxReadmeLines   = 300  // README.md: what it is, first steps, links
	maxExportedNames = "refserver=45 middleware=115 signer=140"
)

// goFiles returns the non-test Go files under root by directory (slash
// paths relative to root), skipping testdata and hidden directories
// except .ci.
func goFiles(t *testing.T, root string) map[string][]string {
	t.Helper()
	byDir := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "testdata" || d.Name() == "node_modules" ||
				(strings.HasPrefix(d.Name(), ".") && d.Name() != ".ci")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dir, _ := filepath.Rel(root, filepath.Dir(path))
			byDir[filepath.ToSlash(dir)] = append(byDir[filepath.ToSlash(dir)], path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(byDir) < 10 {
		t.Fatalf("found Go files in %d directories under %s; the walk is broken", len(byDir), root)
	}
	return byDir
}

func TestHouseRules(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]int{}
	for _, kv := range strings.Fields(maxExportedNames) {
		name, n, _ := strings.Cut(kv, "=")
		targets[name] = atoi(t, n)
	}
	for dir, paths := range goFiles(t, root) {
		fset := token.NewFileSet()
		docLines, exported, lines := 0, 0, 0
		for _, path := range paths {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			n := bytes.Count(src, []byte("\n"))
			lines += n
			rel, _ := filepath.Rel(root, path)
			if n > maxFileLines {
				t.Errorf("%s has %d lines, over %d: split it along its seams", rel, n, maxFileLines)
			}
			f, err := parser.ParseFile(fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			if f.Doc != nil {
				docLines += len(strings.Split(strings.TrimRight(f.Doc.Text(), "\n"), "\n"))
			}
			exported += exportedNames(f)
			for _, knob := range knobs(f) {
				t.Errorf("%s: %s sets a package-level variable; make it a field of a value so two users in one process stay independent", rel, knob)
			}
		}
		if docLines > maxPackageDoc {
			t.Errorf("%s: package doc is %d lines, over %d: move the detail to docs/", dir, docLines, maxPackageDoc)
		}
		if dir == "cmd/idcli" && lines > maxMainLines {
			t.Errorf("cmd/idcli: package main is %d lines, over %d: move a cohesive part to cmd/idcli/internal", lines, maxMainLines)
		}
		if limit, ok := targets[dir]; ok && exported > limit {
			t.Errorf("%s exports %d names (top-level and methods of exported types), over %d", dir, exported, limit)
		}
		delete(targets, dir)
	}
	for dir := range targets {
		t.Errorf("%s: no such package; update maxExportedNames", dir)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(readme, []byte("\n")); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, over %d: reference material belongs in docs/", n, maxReadmeLines)
	}
	if _, err := os.Stat(filepath.Join(root, "docs", "README.md")); err != nil {
		t.Errorf("docs/README.md, the index by reader: %v", err)
	}
}

// exportedNames counts f's exported top-level names and exported methods
// of exported types.
func exportedNames(f *ast.File) int {
	n := 0
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() && (d.Recv == nil || ast.IsExported(recvName(d.Recv.List[0].Type))) {
				n++
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n++
					}
				case *ast.ValueSpec:
					for _, name := range s.Names {
						if name.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n
}

// knobs returns f's exported functions named Set… (no receiver) that
// assign to, or Store into, a package-level variable of f's package as
// declared in f. A setter of a value (a method) is not a knob.
func knobs(f *ast.File) []string {
	vars := map[string]bool{}
	for _, decl := range f.Decls {
		if d, ok := decl.(*ast.GenDecl); ok && d.Tok == token.VAR {
			for _, spec := range d.Specs {
				for _, name := range spec.(*ast.ValueSpec).Names {
					vars[name.Name] = true
				}
			}
		}
	}
	var out []string
	for _, decl := range f.Decls {
		d, ok := decl.(*ast.FuncDecl)
		if !ok || d.Recv != nil || d.Body == nil || !d.Name.IsExported() || !strings.HasPrefix(d.Name.Name, "Set") {
			continue
		}
		if setsPackageVar(d.Body, vars) {
			out = append(out, d.Name.Name)
		}
	}
	return out
}

func setsPackageVar(body *ast.BlockStmt, vars map[string]bool) bool {
	root := func(e ast.Expr) string {
		for {
			switch x := e.(type) {
			case *ast.SelectorExpr:
				e = x.X
			case *ast.IndexExpr:
				e = x.X
			case *ast.StarExpr:
				e = x.X
			case *ast.Ident:
				return x.Name
			default:
				return ""
			}
		}
	}
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.AssignStmt:
			for _, lhs := range x.Lhs {
				if vars[root(lhs)] {
					found = true
				}
			}
		case *ast.CallExpr:
			if sel, ok := x.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Store" || sel.Sel.Name == "Swap") && vars[root(sel.X)] {
				found = true
			}
		}
		return !found
	})
	return found
}

func atoi(t *testing.T, s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("bad number %q", s)
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// TestHouseRulesFindKnobs shows that knobs catches a package-level setter
// and lets a method and a header-writing function through.
func TestHouseRulesFindKnobs(t *testing.T) {
	t.Parallel()
	src := `package p
var size int
var hot struct{ n int }
var cap atomicInt
func SetSize(n int) { size = n }
func SetHot(n int) { hot.n = n }
func SetCap(n int) { cap.Store(n) }
func SetHeaders(h map[string]string) { h["x"] = "y" }
type T struct{ n int }
func (t *T) SetN(n int) { t.n = n }
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(knobs(f), ",")
	if got != "SetSize,SetHot,SetCap" {
		t.Errorf("knobs = %q, want SetSize,SetHot,SetCap", got)
	}
}
