package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoDatabaseImports checks that no Go file under cmd/ (tests included)
// imports a database driver or ORM: the CLI reaches the database only
// through refserver (Open, CreateDatabase, MigrateDatabase, DropDatabase).
func TestNoDatabaseImports(t *testing.T) {
	t.Parallel()
	forbidden := []string{"gorm.io/", "github.com/jackc/", "github.com/glebarez/", "modernc.org/sqlite", "github.com/lib/pq", "github.com/mattn/go-sqlite3", "database/sql"}
	n := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		n++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if strings.HasPrefix(p, bad) {
					t.Errorf("%s imports %s: cmd/ must reach the database through refserver only", path, p)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("checked %d Go files under cmd/, want the whole tree", n)
	}
}
