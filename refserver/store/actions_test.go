package store_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentid/agentid/refserver/store"
)

// TestActionsComplete: Actions lists every Action… constant of the
// package, so that the admin API's action filter, which refuses what it
// does not list, knows each action the trail records.
func TestActionsComplete(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Action") || name.Name == "ActorDatabase" || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok {
						continue
					}
					v, _ := strconv.Unquote(lit.Value)
					found++
					if !slices.Contains(store.Actions(), v) {
						t.Errorf("%s: %s = %q is missing from Actions()", f, name.Name, v)
					}
				}
			}
		}
	}
	if found != len(store.Actions()) {
		t.Errorf("found %d Action constants, Actions() lists %d", found, len(store.Actions()))
	}
}
