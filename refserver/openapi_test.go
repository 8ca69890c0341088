package refserver

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
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

// TestOpenAPIErrorCodes checks that every error code in middleware's code
// table (the only place codes are defined) is in the documented enum, with
// the status the table gives it.
func TestOpenAPIErrorCodes(t *testing.T) {
	doc := readOpenAPI(t)
	codes := middleware.Codes()
	if len(codes) < 15 {
		t.Fatalf("middleware.Codes() has only %d codes", len(codes))
	}
	for _, c := range codes {
		if !doc.codes[string(c)] {
			t.Errorf("error code %q (status %d) is missing from docs/openapi.yaml", c, c.Status())
		}
	}
}
