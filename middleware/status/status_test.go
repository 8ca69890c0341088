package status_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/status"
	"github.com/agentid/agentid/signer/signertest"
)

func verified(id string) middleware.Result {
	return middleware.Result{Outcome: middleware.OutcomeVerified, Agent: middleware.Agent{ID: id}}
}

func invalid(id string, code middleware.Code) middleware.Result {
	return middleware.Result{Outcome: middleware.OutcomeInvalid, Agent: middleware.Agent{ID: id}, Err: middleware.Fail(code, "x")}
}

func unsigned() middleware.Result {
	return middleware.Result{Outcome: middleware.OutcomeNotPresent, Err: middleware.Fail(middleware.CodeMissingSignature, "x")}
}

// TestSnapshot counts verdicts per minute over the last hour, ranks agents
// and reasons, and forgets minutes older than the hour.
func TestSnapshot(t *testing.T) {
	clk := signertest.NewClock(time.Date(2026, 11, 25, 10, 0, 30, 0, time.UTC))
	p := status.New(status.Config{Now: clk.Now})
	for range 5 {
		p.Observe(verified("https://a.example"))
	}
	p.Observe(unsigned())
	clk.Advance(time.Minute)
	for range 3 {
		p.Observe(verified("https://b.example"))
	}
	p.Observe(invalid("https://b.example", middleware.CodeExpiredSignature))
	p.Observe(invalid("https://c.example", middleware.CodeKeyFetchFailed))
	p.Observe(invalid("", middleware.CodeExpiredSignature))
	passed := invalid("", middleware.CodeReplayedNonce) // observe mode: counted, not refused
	passed.Passed = true
	p.Observe(passed)
	p.ObserveRefusal(middleware.OutcomeVerified, middleware.CodeRateLimited)

	s := p.Snapshot()
	if len(s.Minutes) != status.Minutes {
		t.Fatalf("%d minutes, want %d", len(s.Minutes), status.Minutes)
	}
	last, prev := s.Minutes[len(s.Minutes)-1], s.Minutes[len(s.Minutes)-2]
	if last.Verified != 3 || last.Invalid != 4 || last.NotPresent != 0 || prev.Verified != 5 || prev.NotPresent != 1 {
		t.Errorf("last two minutes %+v, %+v; want 5 verified + 1 unsigned, then 3 verified + 3 invalid", prev, last)
	}
	if s.Hour.Total() != 13 || s.Hour.Invalid != 4 {
		t.Errorf("hour %+v, want 13 with 4 invalid", s.Hour)
	}
	if len(s.Agents) != 3 || s.Agents[0].ID != "https://a.example" || s.Agents[0].Requests != 5 ||
		s.Agents[1].ID != "https://b.example" || s.Agents[1].Verified != 3 || s.Agents[1].Invalid != 1 {
		t.Errorf("agents %+v", s.Agents)
	}
	// Every request not verified, by outcome and reason; every refusal,
	// the rules' (ObserveRefusal) and the verifier's (Passed false).
	want := []status.ReasonCount{{Outcome: "invalid", Reason: "invalid_freshness", Count: 2}, {Outcome: "invalid", Reason: "key_fetch_failed", Count: 1},
		{Outcome: "invalid", Reason: "replayed_nonce", Count: 1}, {Outcome: "not-present", Reason: "unsigned", Count: 1}}
	if !slices.Equal(s.Reasons, want) {
		t.Errorf("reasons %+v, want %+v", s.Reasons, want)
	}
	want = []status.ReasonCount{{Outcome: "invalid", Reason: "invalid_freshness", Count: 2}, {Outcome: "invalid", Reason: "key_fetch_failed", Count: 1},
		{Outcome: "not-present", Reason: "unsigned", Count: 1}, {Outcome: "verified", Reason: "rate_limited", Count: 1}}
	if !slices.Equal(s.Refusals, want) {
		t.Errorf("refusals %+v, want %+v", s.Refusals, want)
	}
	if s.Fetch.OK != 8 || s.Fetch.Failed != 1 || s.Fetch.FailedHour != 1 || !s.Fetch.LastFailure.Equal(clk.Now()) {
		t.Errorf("fetch %+v", s.Fetch)
	}
	clk.Advance(time.Hour)
	s = p.Snapshot()
	if s.Hour.Total() != 0 || s.Fetch.FailedHour != 0 || s.Totals.Total() != 13 {
		t.Errorf("an hour later: hour %+v, failed %d, totals %+v; want the hour empty and the totals kept", s.Hour, s.Fetch.FailedHour, s.Totals)
	}
}

// TestSketchBounded: with many more agents than counters, the heavy
// hitters are still on top and their counts are within the error bound.
func TestSketchBounded(t *testing.T) {
	p := status.New(status.Config{TopAgents: 3, SketchSize: 20})
	for i := range 20_000 {
		switch {
		case i%4 == 0:
			p.Observe(verified("https://heavy.example"))
		case i%10 == 1:
			p.Observe(verified("https://medium.example"))
		default:
			p.Observe(verified(fmt.Sprintf("https://tail-%d.example", i)))
		}
	}
	s := p.Snapshot()
	if len(s.Agents) != 3 || s.Agents[0].ID != "https://heavy.example" || s.Agents[1].ID != "https://medium.example" {
		t.Fatalf("top agents %+v, want heavy then medium", s.Agents)
	}
	for _, a := range s.Agents[:2] {
		want := map[string]uint64{"https://heavy.example": 5000, "https://medium.example": 2000}[a.ID]
		if a.Requests < want || a.Requests-a.Error > want {
			t.Errorf("%s: %d requests (error %d), true count %d outside the bound", a.ID, a.Requests, a.Error, want)
		}
	}
}

// TestServeHeaders: the page forbids loading anything and refuses POST.
func TestServeHeaders(t *testing.T) {
	p := status.New(status.Config{})
	p.Observe(verified("https://a.example"))
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
	if rec.Code != 200 || rec.Header().Get("Content-Security-Policy") != status.ContentSecurityPolicy ||
		!strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Errorf("GET: %d %v", rec.Code, rec.Header())
	}
	if strings.Contains(rec.Body.String(), "<script") {
		t.Error("the page has a script")
	}
	rec = httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("POST", "/status", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", rec.Code)
	}
}

// TestAgentIDEscaped: an identity is text, never markup.
func TestAgentIDEscaped(t *testing.T) {
	p := status.New(status.Config{})
	p.Observe(verified(`https://x.example/"><img src=https://evil.example/x>`))
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
	if strings.Contains(rec.Body.String(), "<img") {
		t.Errorf("identity rendered as markup:\n%s", rec.Body)
	}
}

// TestAgentNames: Config.AgentName names the listed agents, looked up by
// the key-set URL they were verified with, on the page next to their
// identity (escaped), and only there.
func TestAgentNames(t *testing.T) {
	var asked []string
	var mu sync.Mutex
	p := status.New(status.Config{AgentName: func(u string) (string, string) {
		mu.Lock()
		asked = append(asked, u)
		mu.Unlock()
		if u == "https://a.example/card.json" {
			return "Crawler <A>", "search"
		}
		return "", ""
	}})
	a := verified("https://a.example/card.json")
	a.Agent.DirectoryURL = "https://a.example/card.json"
	b := verified("https://b.example")
	b.Agent.DirectoryURL = "https://b.example/.well-known/http-message-signatures-directory"
	p.Observe(invalid("https://a.example/card.json", middleware.CodeExpiredSignature)) // no key set yet
	p.Observe(a)
	p.Observe(b)
	if len(asked) != 0 {
		t.Errorf("AgentName called by Observe: %v", asked)
	}
	s := p.Snapshot()
	if len(s.Agents) != 2 || s.Agents[0].Name != "Crawler <A>" || s.Agents[0].Purpose != "search" || s.Agents[1].Name != "" {
		t.Fatalf("agents = %+v, want a named Crawler <A> (search), b unnamed", s.Agents)
	}
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
	body := rec.Body.String()
	if want := `data-name="Crawler &lt;A&gt;"><td><b class="name">Crawler &lt;A&gt;</b> <span class="purpose">(search)</span><br>https://a.example/card.json</td>`; !strings.Contains(body, want) {
		t.Errorf("page lacks %s:\n%s", want, body)
	}
	if strings.Count(body, `class="name"`) != 1 {
		t.Errorf("the unnamed agent got a name:\n%s", body)
	}
}

// TestVocabularyAndUIDs: the page speaks the outcomes of X-Agent-Outcome
// and the access log (an unsigned request is not-present, its reason
// "unsigned"); and Config.UID names an agentid service's agents by uid
// (others by identity alone).
func TestVocabularyAndUIDs(t *testing.T) {
	const svcAgent = "https://agent-0123456789abcdef01234567.agentid.example"
	p := status.New(status.Config{UID: func(id string) string {
		if id == svcAgent {
			return "agent-0123456789abcdef01234567"
		}
		return ""
	}})
	p.Observe(verified(svcAgent))
	p.Observe(verified("https://bot.example"))
	p.Observe(unsigned())
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`Not present<b id="hour-not-present" data-count="1">`,
		`Unverified<b id="hour-unverified" data-count="0">`,
		`<tr class="refusal" data-outcome="not-present" data-reason="unsigned" data-count="1">`,
		`<tr class="reason" data-outcome="not-present" data-reason="unsigned" data-count="1">`,
		`data-uid="agent-0123456789abcdef01234567"><td><b class="uid">agent-0123456789abcdef01234567</b><br>` + svcAgent + `</td>`,
		`data-id="https://bot.example" data-requests="1" data-verified="1" data-invalid="0"><td>https://bot.example</td>`,
		`></span>not-present<`,
		`></span>unverified<`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(body, "Unsigned") || strings.Count(body, "unsigned") != 4 { // the two rows' attribute and cell
		t.Errorf("the page says unsigned elsewhere than as a reason:\n%s", body)
	}
	if got := p.Snapshot().Agents; len(got) != 2 || got[0].UID == got[1].UID {
		t.Errorf("agents %+v, want one with a uid", got)
	}
}
