package main

import (
	"go/parser"
	"go/token"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestProxyLinksNoORM checks that the packages `idcli proxy` is built from
// (the imports of proxy.go and proxy_config.go) link no ORM or database
// driver: the metrics registry it counts with must not drag gorm along.
// The idcli binary as a whole links gorm (idcli server), so `go list -deps
// ./cmd/idcli` would not tell.
func TestProxyLinksNoORM(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	var pkgs []string
	for _, file := range []string{"proxy.go", "proxy_config.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			pkgs = append(pkgs, p)
		}
	}
	if !slices.Contains(pkgs, "github.com/agentid/agentid/middleware/proxy/proxyconfig") {
		t.Fatalf("proxy.go no longer imports middleware/proxy/proxyconfig (imports %v); update this test", pkgs)
	}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/agentid/agentid/middleware/metrics") || len(deps) < 20 {
		t.Fatalf("go list -deps listed %d packages: %v", len(deps), deps)
	}
	for _, d := range deps {
		if d == "database/sql/driver" {
			// Interfaces only (no driver, no connection): linked by
			// github.com/google/uuid, which the OpenTelemetry SDK's
			// resource package (the OTLP export's setup) imports.
			continue
		}
		if linksORM(d) {
			t.Errorf("the proxy's packages link %s", d)
		}
	}
}

// linksORM reports whether pkg is an ORM, a database driver or
// database/sql.
func linksORM(pkg string) bool {
	for _, bad := range forbiddenDeps {
		if pkg == bad || strings.HasPrefix(pkg, bad+"/") {
			return true
		}
	}
	return false
}

var forbiddenDeps = []string{"gorm.io", "github.com/jackc", "github.com/glebarez", "modernc.org/sqlite",
	"github.com/go-gormigrate", "github.com/lib/pq", "github.com/mattn/go-sqlite3", "database/sql"}

func TestLinksORM(t *testing.T) {
	for _, tc := range []struct {
		pkg  string
		want bool
	}{
		{"gorm.io/gorm", true},
		{"gorm.io/driver/postgres", true},
		{"database/sql", true},
		{"database/sql/driver", true},
		{"github.com/agentid/agentid/middleware/metrics", false},
		{"github.com/jackcx/other", false},
	} {
		if got := linksORM(tc.pkg); got != tc.want {
			t.Errorf("linksORM(%q) = %v, want %v", tc.pkg, got, tc.want)
		}
	}
}
