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

// The layering rules of the module's non-test files. Imports point down
// only:
//
//	signer (the protocol's vocabulary) ← signer/agent ← cmd
//	signer ← keyfetch ← middleware ← refserver ← cmd
//
// and besides:
//   - leaf packages (the one bounded cache, the .env parser, the URL
//     redaction, the log writer off the request path, the one "did you
//     mean", the reader of the client address behind trusted proxies,
//     the tests' rule for a missing need, the check whether an
//     OpenTelemetry tracer records) import nothing of the module,
//     so that every layer may use them;
//   - signer does not import signer/agent (the agent client is above it);
//   - middleware/policy (the allow and deny lists) imports of the
//     middleware tree only the verifier itself (an entry ending in "$"
//     names one package, not its subpackages), so that the verifier's
//     users above it (rules, the proxy, its configuration) share it;
//   - only refserver/store (the server's database), refserver/replaypg
//     (the replay store on it) and refserver/dbtest (test databases)
//     import an ORM, a database driver or database/sql: the HTTP service
//     (refserver) reaches the database through store, cmd (its tests too)
//     through store or refserver, and below them they have no business.
//     middleware/metrics in particular links none, so idcli proxy, which
//     counts with it, links none;
//   - refserver/store sits below the server: it imports signer (and the
//     leaves) only, and refserver/dbtest only store.

// leaves are the packages that import nothing of the module.
var leaves = []string{"signer/lru", "signer/envfile", "signer/redact", "signer/asynclog", "signer/suggest", "signer/signertest/testenv", "middleware/clientaddr", "middleware/internal/otelon"}

// layers lists, for each part of the module, the module packages its
// non-test files may import (a prefix covers subpackages); leaves may be
// imported from anywhere. The first matching dir applies.
var layers = []struct {
	dir     string
	allowed []string
}{
	{"signer/agent", []string{"signer"}},
	{"signer", []string{"signer"}},
	{"keyfetch", []string{"signer", "keyfetch"}},
	{"middleware/policy", []string{"signer", "middleware$"}},
	// The token bucket and the per-address limiter: the verifier's error
	// and the client address, nothing else of the middleware tree.
	{"middleware/ratelimit", []string{"signer", "middleware$", "middleware/clientaddr"}},
	// The Redis stores: the verifier's replay interface, nothing else of
	// the middleware tree (agentlimit's Store is met by its method set).
	{"middleware/redisstore", []string{"signer", "middleware$"}},
	{"middleware", []string{"signer", "keyfetch", "middleware"}},
	{"refserver/store", []string{"signer"}},
	{"refserver/dbtest", []string{"refserver/store"}},
	{"refserver", []string{"signer", "keyfetch", "middleware", "refserver"}},
	{"cmd", []string{"signer", "keyfetch", "middleware", "refserver", "cmd"}},
}

// databasePackages are the ORMs, database drivers and database/sql, which
// only the databasePackagesIn may import.
var databasePackages = []string{"gorm.io/", "github.com/jackc/", "github.com/glebarez/", "modernc.org/sqlite",
	"github.com/go-gormigrate/", "github.com/lib/pq", "github.com/mattn/go-sqlite3", "database/sql"}

// databasePackagesIn are the packages whose non-test files may import
// databasePackages.
var databasePackagesIn = []string{"refserver/store", "refserver/replaypg", "refserver/dbtest"}

// TestLayering parses the import lines of every Go file of the module and
// checks them with violations.
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
		imports := make([]string, 0, len(f.Imports))
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			imports = append(imports, p)
		}
		for _, v := range violations(rel, imports) {
			t.Error(v)
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

// TestLayeringRefuses shows that violations catches a wrong import of
// each rule, and lets the right ones through.
func TestLayeringRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file, imports string
		want          string // a substring of the violation; "" for none
	}{
		{"keyfetch/fetch.go", module + "/middleware", "above it"},
		{"signer/base.go", module + "/signer/agent", "above it"},
		{"signer/agent/agent.go", module + "/keyfetch", "above it"},
		{"middleware/verifier.go", module + "/refserver", "above it"},
		{"refserver/server.go", module + "/cmd/idcli", "above it"},
		{"signer/lru/lru.go", module + "/signer", "leaf package"},
		{"signer/envfile/envfile.go", module + "/signer/lru", "leaf package"},
		{"signer/asynclog/asynclog.go", module + "/signer", "leaf package"},
		{"refserver/dbtest/dbtest.go", module + "/signer/signertest/testenv", ""},
		{"signer/suggest/suggest.go", module + "/signer", "leaf package"},
		{"middleware/clientaddr/clientaddr.go", module + "/middleware", "leaf package"},
		{"middleware/internal/otelon/otelon.go", module + "/signer", "leaf package"},
		{"middleware/ratelimit/limiter.go", module + "/keyfetch", "above it"},
		{"middleware/ratelimit/limiter.go", module + "/middleware/clientaddr", ""},
		{"middleware/ratelimit/limiter.go", module + "/middleware/proxy", "above it"},
		{"middleware/redisstore/replay.go", module + "/keyfetch", "above it"},
		{"middleware/redisstore/limits.go", module + "/middleware/agentlimit", "above it"},
		{"middleware/metrics/metrics.go", "gorm.io/gorm", "database"},
		{"keyfetch/fetch.go", "database/sql", "database"},
		{"cmd/idcli/server.go", "gorm.io/gorm", "database"},
		{"cmd/idcli/server_test.go", "github.com/glebarez/sqlite", "database"},

		{"middleware/policy/matcher.go", module + "/middleware/rules", "above it"},
		{"middleware/policy/matcher.go", module + "/keyfetch", "above it"},

		{"middleware/policy/matcher.go", module + "/middleware", ""},
		{"keyfetch/fetch.go", module + "/signer/lru", ""},
		{"refserver/server.go", module + "/signer/lru", ""},
		{"refserver/server.go", module + "/middleware/clientaddr", ""},
		{"cmd/idcli/server.go", module + "/signer/envfile", ""},
		{"middleware/proxy/proxyconfig/build.go", module + "/signer/asynclog", ""},
		{"cmd/idcli/proxy.go", module + "/middleware/metrics", ""},
		{"refserver/server.go", "gorm.io/gorm", "database"},
		{"refserver/open.go", "github.com/jackc/pgx/v5/stdlib", "database"},
		{"refserver/store/db.go", module + "/refserver", "above it"},
		{"refserver/store/db.go", module + "/middleware", "above it"},
		{"refserver/dbtest/dbtest.go", module + "/refserver", "above it"},
		{"refserver/store/db.go", "gorm.io/gorm", ""},
		{"refserver/store/open.go", "github.com/glebarez/sqlite", ""},
		{"refserver/replaypg/replaypg.go", "github.com/jackc/pgx/v5/stdlib", ""},
		{"refserver/server_test.go", "gorm.io/gorm", ""}, // tests may use the database directly
		{"refserver/server.go", module + "/refserver/store", ""},
		{"refserver/dbtest/dbtest.go", "github.com/glebarez/sqlite", ""},
		{"signer/signertest/signertest.go", module + "/signer", ""},
		{"keyfetch/fetch_test.go", module + "/middleware", ""}, // tests may import upward
	}
	for _, tt := range tests {
		got := violations(tt.file, []string{tt.imports})
		switch {
		case tt.want == "" && len(got) > 0:
			t.Errorf("%s importing %s: %q, want no violation", tt.file, tt.imports, got)
		case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want)):
			t.Errorf("%s importing %s: %q, want one violation mentioning %q", tt.file, tt.imports, got, tt.want)
		}
	}
}

// violations returns what is wrong with file (a slash path from the module
// root) importing imports.
func violations(file string, imports []string) []string {
	var out []string
	test := strings.HasSuffix(file, "_test.go")
	for _, p := range imports {
		if isDatabase(p) && (test && !strings.HasPrefix(file, "cmd/") || !test && under(file, databasePackagesIn)) {
			continue
		}
		if isDatabase(p) {
			out = append(out, file+" imports "+p+": only refserver/store, refserver/replaypg and refserver/dbtest link a database package (refserver and cmd reach the database through store)")
			continue
		}
		inner, ok := strings.CutPrefix(p, module+"/")
		if !ok || test {
			continue
		}
		if under(file, leaves) {
			out = append(out, file+" imports "+p+": a leaf package imports nothing of the module")
			continue
		}
		if !allowedImport(file, inner) {
			out = append(out, file+" imports "+p+", which is above it")
		}
	}
	return out
}

func isDatabase(pkg string) bool {
	for _, bad := range databasePackages {
		if strings.HasPrefix(pkg, bad) {
			return true
		}
	}
	return false
}

// under reports whether file is in one of the packages dirs (or below).
func under(file string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(file, d+"/") {
			return true
		}
	}
	return false
}

func allowedImport(file, pkg string) bool {
	if under(pkg+"/", leaves) {
		return true
	}
	for _, l := range layers {
		if !strings.HasPrefix(file, l.dir+"/") {
			continue
		}
		for _, a := range l.allowed {
			one, exact := strings.CutSuffix(a, "$")
			if pkg == one || (!exact && strings.HasPrefix(pkg, a+"/")) {
				// signer may not import signer/agent.
				return !(l.dir == "signer" && strings.HasPrefix(pkg, "signer/agent"))
			}
		}
		return false
	}
	return true
}
