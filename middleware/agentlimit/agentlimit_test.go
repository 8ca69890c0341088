package agentlimit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/signer/signertest"
)

func verified(id string, components ...string) *middleware.Result {
	return &middleware.Result{Outcome: middleware.OutcomeVerified, Passed: true, Agent: middleware.Agent{ID: id, Components: components}}
}

func request(addr string) *http.Request {
	r := httptest.NewRequest("GET", "http://api.example/x", nil)
	r.RemoteAddr = addr
	return r
}

func newLimiter(t *testing.T, cfg agentlimit.Config) *agentlimit.Limiter {
	t.Helper()
	l, err := agentlimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestBudgetPerAgent spends an agent's budget: the quota passes, the next
// request is refused with Retry-After, another agent and the unsigned
// address budget are unaffected, and tokens come back with time.
func TestBudgetPerAgent(t *testing.T) {
	clk := signertest.NewClock(time.Unix(1_800_000_000, 0))
	l := newLimiter(t, agentlimit.Config{
		Agent:   agentlimit.Limit{Quota: 3, Window: time.Minute},
		Address: agentlimit.Limit{Quota: 1, Window: time.Minute},
		Store:   agentlimit.NewMemoryStore(agentlimit.MemoryConfig{Now: clk.Now}),
	})
	a, b := verified("https://a.example"), verified("https://b.example")
	for i := range 3 {
		d := l.Take(request("192.0.2.1:1000"), a)
		if !d.Limited || !d.Allowed || d.Policy != agentlimit.PolicyAgent || d.Remaining != 2-i {
			t.Fatalf("request %d: %+v, want allowed with %d remaining", i, d, 2-i)
		}
	}
	d := l.Take(request("192.0.2.1:1000"), a)
	if d.Allowed || d.Err() == nil || d.Err().Code != middleware.CodeRateLimited {
		t.Fatalf("4th request: %+v, want refused with rate_limited", d)
	}
	if d.RetryAfter != 20*time.Second {
		t.Errorf("RetryAfter = %v, want 20s (one token at 3/min)", d.RetryAfter)
	}
	h := http.Header{}
	d.SetHeaders(h)
	if got, want := h.Get("RateLimit-Policy"), `"agent";q=3;w=60`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	if got, want := h.Get("RateLimit"), `"agent";r=0;t=60`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	if got := h.Get("Retry-After"); got != "20" {
		t.Errorf("Retry-After = %q, want 20", got)
	}
	if d := l.Take(request("192.0.2.1:1000"), b); !d.Allowed {
		t.Errorf("another agent refused: %+v", d)
	}
	// Unsigned traffic from the same address has its own budget.
	if d := l.Take(request("192.0.2.1:1000"), nil); !d.Allowed || d.Policy != agentlimit.PolicyAddress {
		t.Errorf("unsigned: %+v, want allowed by address", d)
	}
	if d := l.Take(request("192.0.2.1:2000"), &middleware.Result{Outcome: middleware.OutcomeUnverified}); d.Allowed {
		t.Errorf("second unsigned request from the address (other port): %+v, want refused", d)
	}
	if d := l.Take(request("192.0.2.2:1000"), nil); !d.Allowed {
		t.Errorf("unsigned from another address refused: %+v", d)
	}
	clk.Advance(20 * time.Second)
	if d := l.Take(request("192.0.2.1:1000"), a); !d.Allowed || d.Remaining != 0 {
		t.Errorf("after 20s: %+v, want one token back and spent", d)
	}
	if d := l.Take(request("192.0.2.1:1000"), a); d.Allowed {
		t.Errorf("after 20s, second request: %+v, want refused", d)
	}
}

// TestKeyHeader splits an agent's budget by a header only when its
// signature covers it.
func TestKeyHeader(t *testing.T) {
	l := newLimiter(t, agentlimit.Config{
		Agent:     agentlimit.Limit{Quota: 1, Window: time.Minute},
		KeyHeader: "Signed-Agent-Metadata",
	})
	covered := verified("https://a.example", `"@authority"`, `"signed-agent-metadata"`)
	bare := verified("https://a.example", `"@authority"`)
	withMeta := func(v string) *http.Request {
		r := request("192.0.2.1:1")
		r.Header.Set("Signed-Agent-Metadata", v)
		return r
	}
	for _, tc := range []struct {
		name string
		r    *http.Request
		res  *middleware.Result
		want bool
	}{
		{"covered value one", withMeta("op=1"), covered, true},
		{"covered value one again", withMeta("op=1"), covered, false},
		{"covered value two", withMeta("op=2"), covered, true},
		{"not covered: the agent's own budget", withMeta("op=3"), bare, true},
		{"not covered again: same budget", withMeta("op=4"), bare, false},
	} {
		if d := l.Take(tc.r, tc.res); d.Allowed != tc.want {
			t.Errorf("%s: allowed = %v, want %v", tc.name, d.Allowed, tc.want)
		}
	}
}

// TestMiddleware answers 429 with the JSON error body and the headers.
func TestMiddleware(t *testing.T) {
	l := newLimiter(t, agentlimit.Config{Address: agentlimit.Limit{Quota: 2, Window: 10 * time.Second}})
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	var codes []int
	var last *httptest.ResponseRecorder
	for range 3 {
		last = httptest.NewRecorder()
		h.ServeHTTP(last, request("[2001:db8::1]:443"))
		codes = append(codes, last.Code)
	}
	if codes[0] != 204 || codes[1] != 204 || codes[2] != 429 {
		t.Fatalf("statuses %v, want [204 204 429]", codes)
	}
	var body struct {
		Error struct {
			Status int
			Code   string
		}
	}
	if err := json.Unmarshal(last.Body.Bytes(), &body); err != nil || body.Error.Code != "rate_limited" || body.Error.Status != 429 {
		t.Errorf("body %q (%v), want rate_limited", last.Body, err)
	}
	if got, want := last.Header().Get("RateLimit-Policy"), `"address";q=2;w=10`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	if got := last.Header().Get("Retry-After"); got != "5" {
		t.Errorf("Retry-After = %q, want 5", got)
	}
	// The same /64 shares the budget.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, request("[2001:db8::2]:443"))
	if rec.Code != 429 {
		t.Errorf("same /64: status %d, want 429", rec.Code)
	}
}

// failing is a Store that always fails.
type failing struct{}

func (failing) Take(context.Context, string, int, time.Duration) (bool, float64, error) {
	return false, 0, context.DeadlineExceeded
}

// TestStoreFailureFailsOpen lets a request through when the store fails.
func TestStoreFailureFailsOpen(t *testing.T) {
	l := newLimiter(t, agentlimit.Config{Agent: agentlimit.Limit{Quota: 1, Window: time.Minute}, Store: failing{}})
	if d := l.Take(request("192.0.2.1:1"), verified("https://a.example")); d.Limited || d.Err() != nil {
		t.Errorf("decision %+v, want unlimited", d)
	}
}

func TestValidate(t *testing.T) {
	for _, cfg := range []agentlimit.Config{
		{Agent: agentlimit.Limit{Quota: -1}},
		{Agent: agentlimit.Limit{Quota: 1, Window: time.Millisecond}},
		{Address: agentlimit.Limit{Quota: 5}},
	} {
		if _, err := agentlimit.New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}

// TestMemoryBounded keeps at most MaxKeys buckets.
func TestMemoryBounded(t *testing.T) {
	s := agentlimit.NewMemoryStore(agentlimit.MemoryConfig{MaxKeys: 128})
	for i := range 10_000 {
		s.Take(context.Background(), string(rune(i))+"k", 5, time.Minute)
	}
	if n := s.Len(); n > 128 {
		t.Errorf("Len = %d, want at most 128", n)
	}
}

// TestMemoryConcurrent: of many concurrent takes on a bucket of 50, exactly
// 50 succeed.
func TestMemoryConcurrent(t *testing.T) {
	clk := signertest.NewClock(time.Unix(1_800_000_000, 0))
	s := agentlimit.NewMemoryStore(agentlimit.MemoryConfig{Now: clk.Now})
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for range 200 {
		wg.Go(func() {
			if got, _, _ := s.Take(context.Background(), "k", 50, time.Hour); got {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ok != 50 {
		t.Errorf("%d takes succeeded, want 50", ok)
	}
}
