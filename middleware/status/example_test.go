package status_test

import (
	"fmt"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/status"
)

// The page's numbers, as Snapshot returns them.
func Example() {
	page := status.New(status.Config{})
	page.Observe(middleware.Result{Outcome: middleware.OutcomeVerified, Agent: middleware.Agent{ID: "https://agent.example"}})
	page.Observe(middleware.Result{Outcome: middleware.OutcomeInvalid, Err: middleware.Fail(middleware.CodeExpiredSignature, "expired")})
	s := page.Snapshot()
	fmt.Println(s.Hour.Verified, s.Hour.Invalid, s.Agents[0].ID, s.Reasons[0].Outcome, s.Reasons[0].Reason, s.Refusals[0].Count)
	// Output: 1 1 https://agent.example invalid invalid_freshness 1
}
