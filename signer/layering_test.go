package signer_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/agentid/agentid"

// layers lists, for each part of the module, the module packages its
// non-test files may import (a prefix covers subpackages). Imports point
// down only: signer (the protocol's vocabulary) ← signer/agent ← cmd, and
// signer ← keyfetch ← middleware ← refserver ← cmd.
var layers = []struct {
	dir     string
	allowed []string
}{
	{"signer/agent", []string{"signer"}},
	{"signer", []string{"signer"}},
	{"keyfetch", []string{"signer", "keyfetch"}},
	{"middleware", []string{"signer", "keyfetch", "middleware"}},
	{"refserver", []string{"signer", "keyfetch", "middleware", "refserver"}},
	{"cmd", []string{"signer", "keyfetch", "middleware", "refserver", "cmd"}},
}

// forbiddenInCmd are the database drivers and ORMs the CLI must reach only
// through refserver (its tests included).
var forbiddenInCmd = []string{"gorm.io/", "github.com/jackc/", "github.com/glebarez/", "modernc.org/sqlite",
	"github.com/go-gormigrate/", "github.com/lib/pq", "github.com/mattn/go-sqlite3", "database/sql"}

// TestLayering parses the import lines of every Go file of the module and
// checks them: non-test files against the layers, and every file under cmd/
// (tests too) against forbiddenInCmd.
func TestLayering(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if strings.HasPrefix(rel, "cmd/") {
				for _, bad := range forbiddenInCmd {
					if strings.HasPrefix(p, bad) {
						t.Errorf("%s imports %s: the CLI reaches the database only through refserver", rel, p)
					}
				}
			}
			inner, ok := strings.CutPrefix(p, module+"/")
			if !ok || strings.HasSuffix(rel, "_test.go") {
				continue
			}
			if !allowedImport(rel, inner) {
				t.Errorf("%s imports %s, which is above it", rel, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 40 {
		t.Fatalf("checked %d files; is the module root %s?", checked, root)
	}
}

func allowedImport(file, pkg string) bool {
	for _, l := range layers {
		if !strings.HasPrefix(file, l.dir+"/") {
			continue
		}
		for _, a := range l.allowed {
			if pkg == a || strings.HasPrefix(pkg, a+"/") {
				// signer may not import signer/agent.
				return !(l.dir == "signer" && strings.HasPrefix(pkg, "signer/agent"))
			}
		}
		return false
	}
	return true
}
