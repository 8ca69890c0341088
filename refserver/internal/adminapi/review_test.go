package adminapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/agentid/agentid/refserver/store"
)

// reviewAnswer is the answer of POST /agents/{uid}/approve and /reject.
type reviewAnswer struct {
	Agent   store.AgentInfo `json:"agent"`
	Changed bool            `json:"changed"`
}

// TestReview: an operator token with agents:write approves or rejects an
// agent pending review, with a reason, once: the same decision again
// answers changed false, the other one 409 agent_not_pending; a rejection
// needs a reason; a bad reason, an unknown agent and an agent never
// pending are refused clearly; the audit trail names the token and the
// request. Concurrent decisions leave exactly one.
func TestReview(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		tok := "Bearer " + e.token("alice", store.ScopeAgentsWrite)
		post := func(uid, decision, body string) (answer, reviewAnswer) {
			t.Helper()
			a := e.call(http.MethodPost, "/admin/v1/agents/"+uid+"/"+decision, body, tok)
			var ra reviewAnswer
			if a.status == http.StatusOK {
				if err := json.Unmarshal(a.body, &ra); err != nil {
					t.Fatalf("%s: %s", decision, a.body)
				}
			}
			return a, ra
		}
		p1, p2 := e.pendingAgent(21), e.pendingAgent(22)
		for i, want := range []bool{true, false} {
			a, ra := post(p1, "approve", `{"reason":"identity checked"}`)
			if a.status != http.StatusOK || ra.Changed != want || ra.Agent.UID != p1 || ra.Agent.State != store.StateActive || ra.Agent.ReviewedAt == nil {
				t.Errorf("approve #%d: %d %s, want 200 changed %v, state active", i+1, a.status, a.body, want)
			}
		}
		if a, _ := post(p1, "reject", `{"reason":"late"}`); a.status != http.StatusConflict || a.errorCode() != "agent_not_pending" || !strings.Contains(a.message(), "approved at") {
			t.Errorf("reject an approved agent: %d %s, want 409 agent_not_pending", a.status, a.body)
		}
		for body, code := range map[string]string{
			"":                            "invalid_request", // a rejection needs a reason
			`{"reason":""}`:               "invalid_request",
			`{"reason":"a\u0007b"}`:       "invalid_request",
			`{"reason":"x","extra":true}`: "invalid_request",
			`{"reason":7}`:                "invalid_request",
		} {
			if a, _ := post(p2, "reject", body); a.status != http.StatusBadRequest || a.errorCode() != code {
				t.Errorf("reject with body %q: %d %s, want 400 %s", body, a.status, a.body, code)
			}
		}
		a, ra := post(p2, "reject", `{"reason":"no contact address"}`)
		if a.status != http.StatusOK || !ra.Changed || ra.Agent.State != store.StateRejected || ra.Agent.ReviewReason != "no contact address" {
			t.Errorf("reject: %d %s", a.status, a.body)
		}
		if a, ra := post(p2, "reject", `{"reason":"again"}`); a.status != http.StatusOK || ra.Changed || ra.Agent.ReviewReason != "no contact address" {
			t.Errorf("reject again: %d %s, want 200 changed false, the first reason kept", a.status, a.body)
		}
		if a, _ := post(p2, "approve", ""); a.status != http.StatusConflict || a.errorCode() != "agent_not_pending" || !strings.Contains(a.message(), "rejected at") {
			t.Errorf("approve a rejected agent: %d %s, want 409 agent_not_pending", a.status, a.body)
		}
		if a, _ := post(e.agent(23), "approve", ""); a.status != http.StatusConflict || !strings.Contains(a.message(), "never pending") {
			t.Errorf("approve an agent registered without approval: %d %s, want 409 naming it never pending", a.status, a.body)
		}
		for _, uid := range []string{"agent-000000000000000000000000", "not-a-uid"} {
			if a, _ := post(uid, "approve", ""); a.status != http.StatusNotFound || a.errorCode() != "agent_not_found" {
				t.Errorf("approve %s: %d %s, want 404 agent_not_found", uid, a.status, a.body)
			}
		}
		rows, err := e.db.Audit(context.Background(), store.AuditQuery{AgentUID: p2, Action: store.ActionReject})
		if err != nil || len(rows) != 1 || rows[0].Actor != "operator:alice" || rows[0].Reason != "no contact address" || rows[0].RequestID != a.header.Get("X-Request-Id") {
			t.Errorf("audit of the rejection: %+v %v (X-Request-Id %q)", rows, err, a.header.Get("X-Request-Id"))
		}

		// Operators deciding at once: one decision.
		p3 := e.pendingAgent(24)
		var wg sync.WaitGroup
		answers := make([]answer, 8)
		for i := range answers {
			wg.Go(func() {
				decision, body := "approve", ""
				if i%2 == 1 {
					decision, body = "reject", `{"reason":"no"}`
				}
				req, _ := http.NewRequest(http.MethodPost, e.base+"/admin/v1/agents/"+p3+"/"+decision, strings.NewReader(body))
				req.Header.Set("Authorization", tok)
				req.Header.Set("Content-Type", "application/json")
				resp, err := e.client.Do(req)
				if err != nil {
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				answers[i] = answer{status: resp.StatusCode, body: b}
			})
		}
		wg.Wait()
		decided := 0
		for i, a := range answers {
			var ra reviewAnswer
			switch {
			case a.status == http.StatusOK && json.Unmarshal(a.body, &ra) == nil:
				if ra.Changed {
					decided++
				}
			case a.status == http.StatusConflict && a.errorCode() == "agent_not_pending":
			default:
				t.Errorf("concurrent decision %d: %d %s", i, a.status, a.body)
			}
		}
		rows, err = e.db.Audit(context.Background(), store.AuditQuery{AgentUID: p3})
		n := 0
		for _, r := range rows {
			if r.Action == store.ActionApprove || r.Action == store.ActionReject {
				n++
			}
		}
		if decided != 1 || n != 1 || err != nil {
			t.Errorf("concurrent decisions: %d answered changed, %d audit rows (%v); want 1 and 1", decided, n, err)
		}
	})
}
