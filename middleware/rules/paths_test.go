package rules_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/rules"
)

// TestGatePathNotNormalAttack: behind the verifier's middleware, a path
// whose raw form starts with the optional route but that a normalising
// service reads under the required one is refused 400 invalid_request
// before any route is looked up; the handler never runs.
func TestGatePathNotNormalAttack(t *testing.T) {
	g, err := rules.New(rules.Config{Mode: middleware.Required, Routes: []rules.Route{
		{Prefix: "/public/", Mode: middleware.Optional},
		{Prefix: "/api/", Mode: middleware.Required},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++ }))
	for _, target := range []string{"/public/../api/secret", "/public/%2e%2e/api/x", "/public//api/x", "/public/x/../../api/x", "/public/%2F..%2Fapi"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", target, nil))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "invalid_request") {
			t.Errorf("GET %s: %d %s, want 400 invalid_request", target, rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/public/x", nil))
	if rec.Code != http.StatusOK || ran != 1 {
		t.Errorf("GET /public/x: %d (handler ran %d times), want 200 once", rec.Code, ran)
	}
}

// TestRoutePrefixNotNormal: a route prefix no normal path can start with
// is a configuration error.
func TestRoutePrefixNotNormal(t *testing.T) {
	for _, p := range []string{"/public/../api/", "//api/", "/api;x/", "/a%2fb/"} {
		if _, err := rules.New(rules.Config{Routes: []rules.Route{{Prefix: p, Mode: middleware.Optional}}}); err == nil {
			t.Errorf("route prefix %q accepted", p)
		}
	}
	if _, err := rules.New(rules.Config{Routes: []rules.Route{{Prefix: "/api", Mode: middleware.Optional}, {Prefix: "/", Mode: middleware.Observe}}}); err != nil {
		t.Errorf("normal prefixes refused: %v", err)
	}
}
