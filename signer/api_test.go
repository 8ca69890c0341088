package signer_test

import (
	"bytes"
	"flag"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var updateAPI = flag.Bool("update-api", false, "rewrite each package's testdata/api.txt from its source")

// TestAPI compares the exported API of every public package of the
// repository (the Caddy module included; cmd and internal packages have
// none) with the golden file testdata/api.txt beside it, so that a change
// of the API is a reviewed diff: run
//
//	go test ./signer -run TestAPI -update-api
//
// and commit the files it rewrites.
func TestAPI(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pkgs := publicPackages(t, root)
	if len(pkgs) < 10 {
		t.Fatalf("found %d public packages under %s; the walk is broken", len(pkgs), root)
	}
	for dir, api := range pkgs {
		golden := filepath.Join(root, dir, "testdata", "api.txt")
		if *updateAPI {
			if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(golden, []byte(api), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Errorf("%s: no golden API file (%v); review the API and run go test ./signer -run TestAPI -update-api", dir, err)
			continue
		}
		if got := api; got != string(want) {
			t.Errorf("%s: exported API differs from %s/testdata/api.txt:\n%s\nreview it, then run go test ./signer -run TestAPI -update-api",
				dir, dir, lineDiff(string(want), got))
		}
	}
	// A golden file whose package is gone or no longer public is stale.
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if d.Name() != "api.txt" || filepath.Base(filepath.Dir(path)) != "testdata" {
			return nil
		}
		dir, _ := filepath.Rel(root, filepath.Dir(filepath.Dir(path)))
		if _, ok := pkgs[filepath.ToSlash(dir)]; !ok {
			t.Errorf("%s is stale: %s is no longer a public package; delete it", path, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// publicPackages renders the exported API of each public package under
// root, by directory relative to root.
func publicPackages(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || name == "internal" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dir, _ := filepath.Rel(root, filepath.Dir(path))
			files[filepath.ToSlash(dir)] = append(files[filepath.ToSlash(dir)], path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for dir, paths := range files {
		fset := token.NewFileSet()
		var lines []string
		main := false
		for _, path := range paths {
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			if f.Name.Name == "main" {
				main = true
				break
			}
			lines = append(lines, apiLines(fset, f)...)
		}
		if main || len(lines) == 0 {
			continue
		}
		slices.Sort(lines)
		out[dir] = strings.Join(slices.Compact(lines), "\n") + "\n"
	}
	return out
}

// apiLines renders one line per exported name of f: functions and methods
// on exported types with their signatures, types with their exported
// fields or methods, constants and variables with their types.
func apiLines(fset *token.FileSet, f *ast.File) []string {
	var lines []string
	render := func(n any) string {
		var b bytes.Buffer
		cfg := printer.Config{Mode: printer.RawFormat}
		if err := cfg.Fprint(&b, fset, n); err != nil {
			return "?"
		}
		return strings.Join(strings.Fields(b.String()), " ")
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv != nil {
				if name := recvName(d.Recv.List[0].Type); name == "" || !ast.IsExported(name) {
					continue
				}
			}
			fn := *d
			fn.Body, fn.Doc = nil, nil
			lines = append(lines, render(&fn))
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					lines = append(lines, typeLines(s, render)...)
				case *ast.ValueSpec:
					for _, name := range s.Names {
						if !name.IsExported() {
							continue
						}
						line := d.Tok.String() + " " + name.Name
						if s.Type != nil {
							line += " " + render(s.Type)
						}
						lines = append(lines, line)
					}
				}
			}
		}
	}
	return lines
}

func typeLines(s *ast.TypeSpec, render func(any) string) []string {
	head := "type " + s.Name.Name
	if s.TypeParams != nil {
		head += render(s.TypeParams)
	}
	if s.Assign.IsValid() {
		return []string{head + " = " + render(s.Type)}
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		lines := []string{head + " struct"}
		for _, field := range t.Fields.List {
			if len(field.Names) == 0 {
				if name := recvName(field.Type); ast.IsExported(name) {
					lines = append(lines, head+" struct, embeds "+render(field.Type))
				}
				continue
			}
			for _, name := range field.Names {
				if name.IsExported() {
					lines = append(lines, head+"."+name.Name+" "+render(field.Type))
				}
			}
		}
		return lines
	case *ast.InterfaceType:
		lines := []string{head + " interface"}
		for _, m := range t.Methods.List {
			if len(m.Names) == 0 {
				lines = append(lines, head+" interface, embeds "+render(m.Type))
				continue
			}
			for _, name := range m.Names {
				if name.IsExported() {
					lines = append(lines, head+"."+name.Name+strings.TrimPrefix(render(m.Type), "func"))
				}
			}
		}
		return lines
	default:
		return []string{head + " " + render(s.Type)}
	}
}

// recvName is the name of a receiver or embedded type: T, *T, T[P], pkg.T.
func recvName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.SelectorExpr:
			return x.Sel.Name
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if l != "" && !slices.Contains(g, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if l != "" && !slices.Contains(w, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
