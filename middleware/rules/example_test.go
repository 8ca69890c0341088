package rules_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/policy"
	"github.com/agentid/agentid/middleware/rules"
)

// Public pages accept unsigned requests; everything else needs a verified
// agent that is not on the deny list.
func Example() {
	g, _ := rules.New(rules.Config{
		Mode:   middleware.Required,
		Routes: []rules.Route{{Prefix: "/public/", Mode: middleware.Optional}},
		Deny:   policy.List{Hosts: []string{"*.scraper.example"}},
	})
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	send := func(path, agent string) {
		r := httptest.NewRequest("GET", path, nil)
		if agent != "" {
			r = r.WithContext(middleware.WithAgent(r.Context(), middleware.Agent{ID: agent}))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(path, agent, w.Code)
	}
	send("/public/page", "")
	send("/api/data", "")
	send("/api/data", "https://agent.example")
	send("/api/data", "https://bot.scraper.example")
	// Output:
	// /public/page  200
	// /api/data  401
	// /api/data https://agent.example 200
	// /api/data https://bot.scraper.example 403
}
