package agentlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
)

// Two requests a minute per agent: the third is refused with 429 and the
// rate-limit fields.
func Example() {
	lim, _ := agentlimit.New(agentlimit.Config{Agent: agentlimit.Limit{Quota: 2, Window: time.Minute}})
	h := lim.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 3 {
		r := httptest.NewRequest("GET", "/", nil)
		r = r.WithContext(middleware.WithAgent(r.Context(), middleware.Agent{ID: "https://agent.example"}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d %s %s retry-after=%s\n", w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "agent";q=2;w=60 "agent";r=1;t=30 retry-after=
	// 200 "agent";q=2;w=60 "agent";r=0;t=60 retry-after=
	// 429 "agent";q=2;w=60 "agent";r=0;t=60 retry-after=30
}
