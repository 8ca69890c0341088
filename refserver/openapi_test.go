package refserver

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/store"
	"github.com/gorilla/mux"
)

// openAPI is what the test needs from docs/openapi.yaml: each path with its
// operations, and the enum of error codes. The file is read line by line
// (paths at two spaces, methods at four, the code enum one item a line)
// rather than through a YAML library, which the project does not otherwise need.
type openAPI struct {
	paths map[string]map[string]bool
	codes map[string]bool
}

func readOpenAPI(t *testing.T) openAPI {
	t.Helper()
	b, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc := openAPI{paths: map[string]map[string]bool{}, codes: map[string]bool{}}
	pathRe := regexp.MustCompile(`^  (/[^:]*):\s*$`)
	methodRe := regexp.MustCompile(`^    (get|put|post|delete|patch|head|options):\s*$`)
	inPaths, cur := false, ""
	inCodeEnum, enumIndent := false, 0
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		switch {
		case l == "paths:":
			inPaths = true
			continue
		case len(l) > 0 && l[0] != ' ' && l[0] != '#':
			inPaths = false
		}
		if inPaths {
			if m := pathRe.FindStringSubmatch(l); m != nil {
				cur = m[1]
				doc.paths[cur] = map[string]bool{}
			} else if m := methodRe.FindStringSubmatch(l); m != nil && cur != "" {
				doc.paths[cur][strings.ToUpper(m[1])] = true
			}
		}
		// The error code enum: an "enum:" right under "code:" (within a few lines).
		trimmed := strings.TrimSpace(l)
		if trimmed == "enum:" && i > 0 {
			for j := i - 1; j >= 0 && j >= i-4; j-- {
				if strings.TrimSpace(lines[j]) == "code:" {
					inCodeEnum, enumIndent = true, len(l)-len(strings.TrimLeft(l, " "))
					break
				}
			}
			continue
		}
		if inCodeEnum {
			indent := len(l) - len(strings.TrimLeft(l, " "))
			if strings.HasPrefix(trimmed, "- ") && indent >= enumIndent {
				doc.codes[strings.Trim(strings.TrimPrefix(trimmed, "- "), `"'`)] = true
			} else if trimmed != "" {
				inCodeEnum = false
			}
		}
	}
	if len(doc.paths) == 0 || len(doc.codes) == 0 {
		t.Fatalf("docs/openapi.yaml: found %d paths and %d error codes; the layout changed?", len(doc.paths), len(doc.codes))
	}
	return doc
}

// TestOpenAPICoversRouter walks the router and asks every registered path
// which methods it allows (a 405's Allow header); each must be documented.
func TestOpenAPICoversRouter(t *testing.T) {
	doc := readOpenAPI(t)
	db, err := store.OpenGorm("sqlite::memory:")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(context.Background(), db, io.Discard); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{DB: store.New(db), Hostname: "http://agentid.test"})
	if err != nil {
		t.Fatal(err)
	}
	router, ok := s.routes().(*mux.Router)
	if !ok {
		t.Fatal("routes() is no longer a *mux.Router; update this test")
	}
	const uid = "agent-0123456789abcdef01234567"
	found := 0
	err = router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := route.GetPathTemplate()
		if err != nil {
			return nil // a subrouter's host matcher, not an endpoint
		}
		found++
		ops, ok := doc.paths[tpl]
		if !ok {
			t.Errorf("route %s is registered but missing from docs/openapi.yaml", tpl)
			return nil
		}
		host := "agentid.test"
		if strings.HasPrefix(tpl, "/.well-known/") {
			host = uid + ".agentid.test"
		}
		r := httptest.NewRequest("PROPFIND", "http://"+host+strings.ReplaceAll(tpl, "{uid}", uid), nil)
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, r)
		if w.Code != http.StatusMethodNotAllowed {
			t.Errorf("PROPFIND %s = %d, want 405 with Allow", tpl, w.Code)
			return nil
		}
		for _, m := range strings.Split(w.Header().Get("Allow"), ", ") {
			if !ops[m] {
				t.Errorf("%s %s is served but not documented in docs/openapi.yaml", m, tpl)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 6 {
		t.Fatalf("walked %d routes, want at least 6", found)
	}
}

// TestOpenAPIErrorCodes checks that every error code the module defines
// (middleware's Code constants and each DefineCode call, found in the
// non-test source, so a code no package here links is checked too) is in
// the documented enum, with the status middleware's one table gives it;
// and that every documented code is in that table.
func TestOpenAPIErrorCodes(t *testing.T) {
	doc := readOpenAPI(t)
	codes := definedCodes(t)
	if len(codes) < 15 {
		t.Fatalf("found only %d error codes defined in the source", len(codes))
	}
	for c, where := range codes {
		if c.Status() == http.StatusInternalServerError && c != middleware.CodeInternal {
			t.Errorf("%s: error code %q is not in middleware's table (Status() is the fallback 500; defined in a package this test does not import?)", where, c)
		}
		if !doc.codes[string(c)] {
			t.Errorf("%s: error code %q (status %d) is missing from docs/openapi.yaml", where, c, c.Status())
		}
	}
	for c := range doc.codes {
		if _, ok := codes[middleware.Code(c)]; !ok {
			t.Errorf("docs/openapi.yaml documents error code %q, which the source does not define", c)
		}
	}
}

// definedCodes returns every error code defined in the module's non-test
// source, with where: each constant of type Code (middleware.Code) and the
// code of each DefineCode call, which must be a string literal.
func definedCodes(t *testing.T) map[middleware.Code]string {
	t.Helper()
	isCode := func(e ast.Expr) bool {
		switch e := e.(type) {
		case *ast.Ident:
			return e.Name == "Code"
		case *ast.SelectorExpr:
			return e.Sel.Name == "Code"
		}
		return false
	}
	literal := func(e ast.Expr) (middleware.Code, bool) {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(lit.Value)
		return middleware.Code(s), err == nil
	}
	codes := map[middleware.Code]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != ".." && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				if n.Type == nil || !isCode(n.Type) {
					return true
				}
				for _, v := range n.Values {
					if c, ok := literal(v); ok {
						codes[c] = fset.Position(v.Pos()).String()
					}
				}
			case *ast.CallExpr:
				name := ""
				switch fn := n.Fun.(type) {
				case *ast.Ident:
					name = fn.Name
				case *ast.SelectorExpr:
					name = fn.Sel.Name
				}
				if name != "DefineCode" || len(n.Args) == 0 {
					return true
				}
				if c, ok := literal(n.Args[0]); ok {
					codes[c] = fset.Position(n.Pos()).String()
				} else {
					t.Errorf("%s: DefineCode's code is not a string literal, so this test cannot check it", fset.Position(n.Pos()))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return codes
}

// TestOpenAPIProblemTypes: the Problem schema's type enum is about:blank
// and the URN of each Signature-Error code that docs/signature-agent.md's
// table maps a code to (that table is checked against the code by
// package middleware's tests), no more, no less.
func TestOpenAPIProblemTypes(t *testing.T) {
	api, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, problem, ok := strings.Cut(string(api), "\n    Problem:\n")
	if !ok {
		t.Fatal("docs/openapi.yaml has no Problem schema")
	}
	got := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^ {12}- (about:blank|urn:\S+)$`).FindAllStringSubmatch(problem, -1) {
		got[m[1]] = true
	}
	table, err := os.ReadFile("../docs/signature-agent.md")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"about:blank": true}
	for _, m := range regexp.MustCompile("(?m)^\\| `[a-z_]+` \\| `([a-z_]+)` \\| [0-9]{3} \\|").FindAllStringSubmatch(string(table), -1) {
		want["urn:ietf:params:sig-error:"+m[1]] = true
	}
	if len(want) < 3 {
		t.Fatalf("docs/signature-agent.md: found %d Signature-Error codes; the table changed?", len(want)-1)
	}
	for typ := range want {
		if !got[typ] {
			t.Errorf("docs/openapi.yaml: the Problem type enum lacks %s", typ)
		}
	}
	for typ := range got {
		if !want[typ] {
			t.Errorf("docs/openapi.yaml: the Problem type enum has %s, which no code maps to", typ)
		}
	}
}
