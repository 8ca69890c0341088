package refserver_test

import (
	"bufio"
	"bytes"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware/metrics"
	"github.com/agentid/agentid/middleware/ratelimit"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

// scrape returns the samples reg serves (as Open serves them on
// Options.MetricsListen), keyed by series (name{labels}).
func scrape(t *testing.T, reg *metrics.Registry) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	reg.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: status = %d (%s), want 200", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != metrics.ContentType {
		t.Errorf("GET /metrics: Content-Type = %q, want %q", ct, metrics.ContentType)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(rec.Body.Bytes()))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func TestKeyCacheTTLBound(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, "sqlite::memory:")
	tests := []struct {
		ttl     time.Duration
		wantErr bool
	}{
		{0, false}, {-1, false}, {refserver.MaxKeyCacheTTL, false}, {refserver.MaxKeyCacheTTL + 1, true}, {time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.ttl.String(), func(t *testing.T) {
			_, err := refserver.New(refserver.Config{DB: store.New(db), Hostname: "http://localhost:3000", KeyCacheTTL: tt.ttl})
			if (err != nil) != tt.wantErr {
				t.Errorf("New with KeyCacheTTL %v: error = %v, want error %v", tt.ttl, err, tt.wantErr)
			}
		})
	}
}

// statusStep is a request and the status its answer must have.
type statusStep struct {
	req  *http.Request
	want int
}

// sendSteps sends each step's request in order and stops the test at the
// first answer whose status is not the step's.
func (e *testEnv) sendSteps(t *testing.T, steps []statusStep) {
	t.Helper()
	for _, step := range steps {
		if r := e.send(step.req); r.status != step.want {
			t.Fatalf("%s %s: status = %d (%s), want %d", step.req.Method, step.req.URL, r.status, r.body, step.want)
		}
	}
}

func TestMetricsWiring(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		reg := metrics.NewRegistry()
		e := newTestEnvConfig(t, db, "", func(c *refserver.Config) { c.Metrics = reg })
		key := signertest.Key(121)
		uid := e.register(key)
		first := e.whoamiReq(http.MethodGet, uid, key)
		again := e.request(http.MethodGet, e.base+"/whoami", nil)
		again.Header = first.Header.Clone()
		e.sendSteps(t, []statusStep{
			{first, 200},
			{again, 401}, // replayed_nonce
			{e.request(http.MethodGet, e.base+"/whoami", nil), 401}, // missing_signature
			{e.request(http.MethodGet, e.base+"/nope", nil), 404},
			{e.request(http.MethodDelete, e.base+"/whoami", nil), 405},
			{e.request("BREW", e.base+"/whoami", nil), 405},                 // unusual methods share one series
			{e.request(http.MethodGet, e.origin(uid)+"/metrics", nil), 404}, // not on agent hosts
			{e.request(http.MethodGet, e.base+"/metrics", nil), 404},        // nor on the service host
		})

		m := scrape(t, reg)
		for series, want := range map[string]float64{
			`agentid_http_requests_total{route="/agents",method="POST",status="201"}`:   1,
			`agentid_http_requests_total{route="/whoami",method="GET",status="200"}`:    1,
			`agentid_http_requests_total{route="/whoami",method="GET",status="401"}`:    2,
			`agentid_http_requests_total{route="/whoami",method="DELETE",status="405"}`: 1,
			`agentid_http_requests_total{route="/whoami",method="OTHER",status="405"}`:  1,
			`agentid_http_requests_total{route="unmatched",method="GET",status="404"}`:  3,
			`agentid_verifications_total{outcome="ok"}`:                                 2, // registration and whoami
			`agentid_verifications_total{outcome="replayed_nonce"}`:                     1,
			`agentid_verifications_total{outcome="missing_signature"}`:                  1,
		} {
			if got := m[series]; got != want {
				t.Errorf("%s = %v, want %v", series, got, want)
			}
		}
		if got := m["agentid_db_query_duration_seconds_count"]; got < 2 {
			t.Errorf("database statements timed = %v, want at least 2", got)
		}
		// Without a registry there is no /metrics either.
		plain := newTestEnv(t, db)
		if r := plain.send(plain.request(http.MethodGet, plain.base+"/metrics", nil)); r.status != http.StatusNotFound {
			t.Errorf("GET /metrics without Config.Metrics: status = %d, want 404", r.status)
		}
	})
}

func TestRegisterRateLimit(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		now := time.Now()
		lim, err := ratelimit.New(ratelimit.Config{Rate: 1.0 / 60, Burst: 2, TrustedProxies: []string{"127.0.0.1/32", "::1/128"},
			Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		e := newTestEnvConfig(t, db, "", func(c *refserver.Config) { c.RegisterLimit = lim })
		tests := []struct {
			name       string
			seed       byte
			forwarded  string
			wantStatus int
		}{
			{"first", 131, "192.0.2.1", http.StatusCreated},
			{"second", 132, "192.0.2.1", http.StatusCreated},
			{"third over the burst", 133, "192.0.2.1", http.StatusTooManyRequests},
			{"another client behind the proxy", 134, "192.0.2.2", http.StatusCreated},
			{"forged hop left of the real client", 135, "192.0.2.2, 192.0.2.1", http.StatusTooManyRequests},
		}
		var uid string
		for _, tt := range tests {
			req := e.registerReq(signertest.Key(tt.seed))
			req.Header.Set("X-Forwarded-For", tt.forwarded)
			r := e.send(req)
			if r.status != tt.wantStatus {
				t.Fatalf("%s: status = %d (%s), want %d", tt.name, r.status, r.body, tt.wantStatus)
			}
			if r.status == http.StatusCreated && uid == "" {
				uid, _ = r.json(t)["uid"].(string)
			}
			if r.status == http.StatusTooManyRequests {
				if code := r.errorCode(t); code != "rate_limited" {
					t.Errorf("%s: code = %s, want rate_limited", tt.name, code)
				}
				if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
					t.Errorf("%s: Retry-After = %q, want 1 to 60 seconds", tt.name, r.header.Get("Retry-After"))
				}
			}
		}
		// A refusal is logged with its code, like any other error.
		if logs := e.logs.String(); !regexp.MustCompile(`path=/agents status=429 .*code=rate_limited`).MatchString(logs) {
			t.Errorf("log lacks the 429's code=rate_limited:\n%s", logs)
		}
		// Only registration is limited.
		for range 3 {
			if r := e.send(e.whoamiReq(http.MethodGet, uid, signertest.Key(131))); r.status != http.StatusOK {
				t.Fatalf("whoami from a limited client: status = %d (%s), want 200", r.status, r.body)
			}
		}
	})
}
