package refserver_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware/metrics"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/ratelimit"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

// testClock stands still at its start (the real time when created) until
// a test advances it.
type testClock struct {
	start  time.Time
	offset atomic.Int64
}

func newTestClock() *testClock { return &testClock{start: time.Now()} }

func (c *testClock) Now() time.Time          { return c.start.Add(time.Duration(c.offset.Load())) }
func (c *testClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// scrape returns the samples of e's /metrics, keyed by series
// (name{labels}).
func scrape(t *testing.T, e *testEnv) map[string]float64 {
	t.Helper()
	resp := e.send(e.request(http.MethodGet, e.base+"/metrics", nil))
	if resp.status != http.StatusOK {
		t.Fatalf("GET /metrics: status = %d (%s), want 200", resp.status, resp.body)
	}
	if ct := resp.header.Get("Content-Type"); ct != metrics.ContentType {
		t.Errorf("GET /metrics: Content-Type = %q, want %q", ct, metrics.ContentType)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(resp.body))
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

func TestKeyCacheAcrossInstances(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		const ttl = 200 * time.Millisecond
		clock := newTestClock()
		regB := metrics.NewRegistry()
		a := newTestEnvConfig(t, db, "", func(c *refserver.Config) { c.KeyCacheTTL = ttl; c.Now = clock.Now })
		b := a.sibling(db, func(c *refserver.Config) { c.KeyCacheTTL = ttl; c.Now = clock.Now; c.Metrics = regB })
		k1, k2, k3 := signertest.Key(111), signertest.Key(112), signertest.Key(113)
		uid := a.register(k1)

		whoami := func(e *testEnv, key signer.PrivateKey) (int, string) {
			t.Helper()
			r := e.send(e.whoamiReq(http.MethodGet, uid, key))
			if r.status == http.StatusOK {
				return r.status, ""
			}
			return r.status, r.errorCode(t)
		}
		// dirKid returns the single kid of uid's directory as served by e.
		dirKid := func(e *testEnv) string {
			t.Helper()
			r := e.send(e.request(http.MethodGet, e.directoryURL(uid), nil))
			var d struct{ Keys []struct{ Kid string } }
			if err := json.Unmarshal(r.body, &d); err != nil || r.status != http.StatusOK || len(d.Keys) != 1 {
				t.Fatalf("directory: status %d body %s, want 200 with one key", r.status, r.body)
			}
			return d.Keys[0].Kid
		}
		dirStep := func(e *testEnv, want signer.PrivateKey) func() (int, string) {
			return func() (int, string) {
				if got := dirKid(e); got != want.KeyID() {
					return http.StatusConflict, "directory serves " + got
				}
				return http.StatusOK, ""
			}
		}
		steps := []struct {
			name     string
			do       func() (int, string)
			wantCode string // "" for 200
		}{
			{"B serves the directory with k1", dirStep(b, k1), ""},
			{"B reads k1 from the database", func() (int, string) { return whoami(b, k1) }, ""},
			{"B serves k1 from its cache", func() (int, string) { return whoami(b, k1) }, ""},
			{"rotation k1 to k2 through A", func() (int, string) {
				r := a.send(a.rotateReq(uid, k1, k2))
				return r.status, ""
			}, ""},
			{"A refuses k1 at once (its cache was dropped)", func() (int, string) { return whoami(a, k1) }, "revoked_key"},
			{"A serves the directory with k2 at once", dirStep(a, k2), ""},
			{"B accepts k2 at once (a new kid is never served stale)", func() (int, string) { return whoami(b, k2) }, ""},
			// The bound: B's cached k1 may be used until its TTL ends, not after.
			{"B within the TTL still has k1 cached", func() (int, string) { clock.Advance(ttl - time.Millisecond); return whoami(b, k1) }, ""},
			{"B within the TTL still serves its cached directory", dirStep(b, k1), ""},
			{"B refuses k1 once the TTL has passed", func() (int, string) { clock.Advance(time.Millisecond); return whoami(b, k1) }, "revoked_key"},
			{"B serves the directory with k2 once the TTL has passed", dirStep(b, k2), ""},
			{"B refuses an unknown kid", func() (int, string) { return whoami(b, k3) }, "unknown_key"},
		}
		for _, st := range steps {
			status, code := st.do()
			wantStatus := http.StatusOK
			if st.wantCode != "" {
				wantStatus = http.StatusUnauthorized
			}
			if status != wantStatus || code != st.wantCode {
				t.Fatalf("%s: status %d code %q, want %d %q", st.name, status, code, wantStatus, st.wantCode)
			}
		}
		// Unknown kids are cached as unknown for the TTL: k3 registered
		// through A works on A at once and on B once B's entry expires.
		uid3 := a.register(k3)
		if r := a.send(a.whoamiReq(http.MethodGet, uid3, k3)); r.status != http.StatusOK {
			t.Errorf("A with k3 just registered through A: status = %d (%s), want 200", r.status, r.body)
		}
		if r := b.send(b.whoamiReq(http.MethodGet, uid3, k3)); r.status != http.StatusUnauthorized {
			t.Errorf("B with k3 cached as unknown, within the TTL: status = %d (%s), want 401", r.status, r.body)
		}
		clock.Advance(ttl)
		if r := b.send(b.whoamiReq(http.MethodGet, uid3, k3)); r.status != http.StatusOK {
			t.Errorf("B with k3 registered through A, once the TTL has passed: status = %d (%s), want 200", r.status, r.body)
		}

		m := scrape(t, b)
		if got := m[`agentid_key_cache_total{result="hit"}`]; got < 2 {
			t.Errorf("B key cache hits = %v, want at least 2", got)
		}
		if got := m[`agentid_key_cache_total{result="miss"}`]; got < 3 {
			t.Errorf("B key cache misses = %v, want at least 3", got)
		}
	})
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
			_, err := refserver.New(refserver.Config{DB: db, Hostname: "http://localhost:3000", KeyCacheTTL: tt.ttl})
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
		})

		m := scrape(t, e)
		for series, want := range map[string]float64{
			`agentid_http_requests_total{route="/agents",method="POST",status="201"}`:   1,
			`agentid_http_requests_total{route="/whoami",method="GET",status="200"}`:    1,
			`agentid_http_requests_total{route="/whoami",method="GET",status="401"}`:    2,
			`agentid_http_requests_total{route="/whoami",method="DELETE",status="405"}`: 1,
			`agentid_http_requests_total{route="/whoami",method="OTHER",status="405"}`:  1,
			`agentid_http_requests_total{route="unmatched",method="GET",status="404"}`:  2,
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
		// A scrape is counted once it has been answered.
		if got := scrape(t, e)[`agentid_http_requests_total{route="/metrics",method="GET",status="200"}`]; got != 1 {
			t.Errorf("scrapes counted = %v, want 1", got)
		}

		// Without a registry there is no /metrics.
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
