package ratelimit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/ratelimit"
	"github.com/agentid/agentid/signer/signertest"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newLimiter(t *testing.T, cfg ratelimit.Config) (*ratelimit.Limiter, *signertest.Clock) {
	t.Helper()
	clk := signertest.NewClock(t0)
	cfg.Now = clk.Now
	l, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l, clk
}

func TestAllow(t *testing.T) {
	type step struct {
		advance  time.Duration
		key      string
		want     bool
		wantWait time.Duration
	}
	tests := []struct {
		name  string
		cfg   ratelimit.Config
		steps []step
	}{
		{
			name: "burst then refill",
			cfg:  ratelimit.Config{Rate: 2, Burst: 3},
			steps: []step{
				{0, "a", true, 0}, {0, "a", true, 0}, {0, "a", true, 0},
				{0, "a", false, 500 * time.Millisecond},
				{250 * time.Millisecond, "a", false, 250 * time.Millisecond},
				{250 * time.Millisecond, "a", true, 0},
				{0, "a", false, 500 * time.Millisecond},
			},
		},
		{
			name: "clients are independent",
			cfg:  ratelimit.Config{Rate: 1, Burst: 1},
			steps: []step{
				{0, "a", true, 0}, {0, "a", false, time.Second},
				{0, "b", true, 0}, {0, "b", false, time.Second},
			},
		},
		{
			name: "refill is capped at burst",
			cfg:  ratelimit.Config{Rate: 1, Burst: 2},
			steps: []step{
				{0, "a", true, 0},
				{time.Hour, "a", true, 0}, {0, "a", true, 0},
				{0, "a", false, time.Second},
			},
		},
		{
			name: "defaults: 20 at once, then 1/s",
			cfg:  ratelimit.Config{},
			steps: append(func() []step {
				var s []step
				for range 20 {
					s = append(s, step{0, "a", true, 0})
				}
				return s
			}(), step{0, "a", false, time.Second}, step{time.Second, "a", true, 0}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, clk := newLimiter(t, tt.cfg)
			for i, st := range tt.steps {
				clk.Advance(st.advance)
				got, wait := l.Allow(st.key)
				if got != st.want || wait != st.wantWait {
					t.Errorf("step %d: Allow(%q) = %v, %v; want %v, %v", i, st.key, got, wait, st.want, st.wantWait)
				}
			}
		})
	}
}

func TestBoundedClients(t *testing.T) {
	l, clk := newLimiter(t, ratelimit.Config{Rate: 1, Burst: 1, MaxClients: 3, IdleTimeout: time.Minute})
	for i := range 10 {
		l.Allow(fmt.Sprintf("10.0.0.%d", i))
		if got := l.Len(); got > 3 {
			t.Fatalf("after %d clients Len = %d, want at most 3", i+1, got)
		}
	}
	// Idle buckets are swept once IdleTimeout has passed.
	clk.Advance(time.Minute)
	l.Allow("10.0.1.1")
	if got := l.Len(); got != 1 {
		t.Errorf("after idle sweep Len = %d, want 1", got)
	}
}

func TestClientAddr(t *testing.T) {
	tests := []struct {
		name    string
		trusted []string
		remote  string
		xff     []string
		want    string
	}{
		{"peer only", nil, "192.0.2.7:5555", nil, "192.0.2.7"},
		{"untrusted peer: XFF ignored", nil, "192.0.2.7:5555", []string{"203.0.113.9"}, "192.0.2.7"},
		{"peer not in trusted list", []string{"10.0.0.0/8"}, "192.0.2.7:5555", []string{"203.0.113.9"}, "192.0.2.7"},
		{"trusted proxy", []string{"10.0.0.0/8"}, "10.1.2.3:5555", []string{"203.0.113.9"}, "203.0.113.9"},
		{"rightmost untrusted wins over spoofed left", []string{"10.0.0.0/8"}, "10.1.2.3:5555", []string{"1.1.1.1, 203.0.113.9"}, "203.0.113.9"},
		{"chain of trusted proxies", []string{"10.0.0.0/8", "172.16.0.1"}, "10.1.2.3:5555", []string{"1.1.1.1, 203.0.113.9, 172.16.0.1", "10.9.9.9"}, "203.0.113.9"},
		{"all trusted: leftmost", []string{"10.0.0.0/8"}, "10.1.2.3:5555", []string{"10.0.0.5, 10.0.0.6"}, "10.0.0.5"},
		{"trusted without XFF", []string{"10.0.0.0/8"}, "10.1.2.3:5555", nil, "10.1.2.3"},
		{"garbage hop stops the walk", []string{"10.0.0.0/8"}, "10.1.2.3:5555", []string{"203.0.113.9, nonsense, 10.0.0.7"}, "10.0.0.7"},
		{"ipv6 grouped by /64", nil, "[2001:db8:1:2:3:4:5:6]:443", nil, "2001:db8:1:2::/64"},
		{"ipv4-mapped ipv6", nil, "[::ffff:192.0.2.7]:443", nil, "192.0.2.7"},
		{"ipv6 in XFF", []string{"::1"}, "[::1]:443", []string{"[2001:db8::1]:1234"}, "2001:db8::/64"},
		{"unparsable peer", nil, "@pipe", nil, "@pipe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := newLimiter(t, ratelimit.Config{TrustedProxies: tt.trusted})
			r := httptest.NewRequest("POST", "/agents", nil)
			r.RemoteAddr = tt.remote
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := l.ClientAddr(r); got != tt.want {
				t.Errorf("ClientAddr = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMiddleware(t *testing.T) {
	l, clk := newLimiter(t, ratelimit.Config{Rate: 0.5, Burst: 2, TrustedProxies: []string{"127.0.0.1"}})
	var served atomic.Int64
	srv := httptest.NewServer(l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()

	do := func(xff string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/agents", strings.NewReader("{}"))
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for i := range 2 {
		if resp := do("203.0.113.1"); resp.StatusCode != http.StatusCreated {
			t.Fatalf("request %d: status = %d, want 201", i+1, resp.StatusCode)
		}
	}
	resp := do("203.0.113.1")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("request 3: status = %d, want 429", resp.StatusCode)
	}
	if got := resp.Header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q, want %q", got, "2")
	}
	if got := resp.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", got)
	}
	body, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct {
			Status  int    `json:"status"`
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if e.Error.Status != 429 || e.Error.Code != "rate_limited" || e.Error.Message == "" {
		t.Errorf("error body = %+v, want status 429, code rate_limited and a message", e.Error)
	}
	// Another client behind the trusted proxy is not affected.
	if resp := do("203.0.113.2"); resp.StatusCode != http.StatusCreated {
		t.Errorf("other client: status = %d, want 201", resp.StatusCode)
	}
	// After the refill time the first client may go on.
	clk.Advance(2 * time.Second)
	if resp := do("203.0.113.1"); resp.StatusCode != http.StatusCreated {
		t.Errorf("after refill: status = %d, want 201", resp.StatusCode)
	}
	if got := served.Load(); got != 4 {
		t.Errorf("handler ran %d times, want 4", got)
	}
}

// TestCheck: Check lets a caller write the refusal itself: it returns nil
// while the client has tokens, then the 429 rate_limited error, having set
// only Retry-After on the writer.
func TestCheck(t *testing.T) {
	l, _ := newLimiter(t, ratelimit.Config{Rate: 0.25, Burst: 1})
	r := httptest.NewRequest("POST", "/agents", nil)
	r.RemoteAddr = "192.0.2.7:5000"
	if err := l.Check(httptest.NewRecorder(), r); err != nil {
		t.Fatalf("first Check = %v, want nil", err)
	}
	w := httptest.NewRecorder()
	err := l.Check(w, r)
	var e *middleware.Error
	if !errors.As(err, &e) || e.Code != ratelimit.CodeRateLimited || e.Message == "" {
		t.Fatalf("second Check = %#v, want a rate_limited *middleware.Error", err)
	}
	if got := w.Header().Get("Retry-After"); got != "4" {
		t.Errorf("Retry-After = %q, want %q", got, "4")
	}
	if w.Body.Len() != 0 || w.Code != http.StatusOK && w.Code != 0 {
		t.Errorf("Check wrote an answer (status %d, body %q); the caller writes it", w.Code, w.Body)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     ratelimit.Config
		wantErr bool
	}{
		{"zero is valid", ratelimit.Config{}, false},
		{"cidr and address", ratelimit.Config{TrustedProxies: []string{"10.0.0.0/8", "::1", " 192.0.2.1 "}}, false},
		{"bad cidr", ratelimit.Config{TrustedProxies: []string{"10.0.0.0/33"}}, true},
		{"hostname is not an address", ratelimit.Config{TrustedProxies: []string{"proxy.local"}}, true},
		{"negative rate", ratelimit.Config{Rate: -1}, true},
		{"negative burst", ratelimit.Config{Burst: -1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ratelimit.New(tt.cfg)
			if (err != nil) != tt.wantErr {
				t.Errorf("New error = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestParseRate(t *testing.T) {
	tests := []struct {
		in      string
		want    float64
		wantOK  bool
		wantErr bool
	}{
		{"10/s", 10, true, false},
		{"600/m", 10, true, false},
		{"3600/h", 1, true, false},
		{"5", 5, true, false},
		{"0.5/s", 0.5, true, false},
		{"off", 0, false, false},
		{"0", 0, false, false},
		{"", 0, false, false},
		{"-1/s", 0, false, true},
		{"ten/s", 0, false, true},
		{"10/d", 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok, err := ratelimit.ParseRate(tt.in)
			if got != tt.want || ok != tt.wantOK || (err != nil) != tt.wantErr {
				t.Errorf("ParseRate(%q) = %v, %v, %v; want %v, %v, error %v", tt.in, got, ok, err, tt.want, tt.wantOK, tt.wantErr)
			}
		})
	}
}
