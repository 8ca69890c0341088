package metrics_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/metrics"
)

// exposition is a parsed text exposition: series (name plus labels as
// written) → value, and metric family → type.
type exposition struct {
	values map[string]float64
	types  map[string]string
}

// parse reads the text format strictly enough to catch malformed output:
// every sample belongs to a family announced by HELP and TYPE lines.
func parse(t *testing.T, r io.Reader) exposition {
	t.Helper()
	e := exposition{values: map[string]float64{}, types: map[string]string{}}
	help := map[string]bool{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# HELP "):
			f := strings.SplitN(line, " ", 4)
			if len(f) < 4 {
				t.Fatalf("line %d: bad HELP %q", n, line)
			}
			help[f[2]] = true
		case strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(line)
			if len(f) != 4 || !help[f[2]] {
				t.Fatalf("line %d: bad or unannounced TYPE %q", n, line)
			}
			e.types[f[2]] = f[3]
		case line == "" || strings.HasPrefix(line, "#"):
			t.Fatalf("line %d: unexpected %q", n, line)
		default:
			i := strings.LastIndexByte(line, ' ')
			if i < 0 {
				t.Fatalf("line %d: no value in %q", n, line)
			}
			series, val := line[:i], line[i+1:]
			v, err := strconv.ParseFloat(val, 64)
			if err != nil {
				t.Fatalf("line %d: value %q: %v", n, val, err)
			}
			name := series
			if j := strings.IndexByte(series, '{'); j >= 0 {
				name = series[:j]
				if !strings.HasSuffix(series, "}") {
					t.Fatalf("line %d: unterminated labels in %q", n, line)
				}
			}
			fam := name
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suf); ok && e.types[b] == "histogram" {
					fam = b
				}
			}
			if e.types[fam] == "" {
				t.Fatalf("line %d: sample %q before its TYPE", n, name)
			}
			if _, dup := e.values[series]; dup {
				t.Fatalf("line %d: duplicate series %q", n, series)
			}
			e.values[series] = v
		}
	}
	return e
}

func scrape(t *testing.T, url string) exposition {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: status = %d, want 200", url, resp.StatusCode)
	}
	if got := resp.Header.Get("Content-Type"); !strings.HasPrefix(got, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type = %q, want text/plain; version=0.0.4", got)
	}
	return parse(t, resp.Body)
}

func (e exposition) want(t *testing.T, series string, want float64) {
	t.Helper()
	got, ok := e.values[series]
	if !ok {
		t.Errorf("series %s missing", series)
		return
	}
	if got != want {
		t.Errorf("%s = %v, want %v", series, got, want)
	}
}

func TestRequestsByRoute(t *testing.T) {
	reg := metrics.NewRegistry()
	for _, q := range []struct {
		route, method string
		status        int
	}{
		{"/agents/{uid}/keys", "PUT", 200},
		{"/agents/{uid}/keys", "PUT", 200},
		{"/whoami", "GET", 401},
		{"/teapot", "BREW", 418}, // unusual methods share one series
		{"", "GET", 404},         // no route matched
	} {
		reg.ObserveRequest(q.route, q.method, q.status)
	}
	srv := httptest.NewServer(reg.Handler())
	defer srv.Close()
	e := scrape(t, srv.URL)
	if got := e.types["agentid_http_requests_total"]; got != "counter" {
		t.Errorf("TYPE agentid_http_requests_total = %q, want counter", got)
	}
	for _, c := range []struct {
		series string
		want   float64
	}{
		{`agentid_http_requests_total{route="/agents/{uid}/keys",method="PUT",status="200"}`, 2},
		{`agentid_http_requests_total{route="/whoami",method="GET",status="401"}`, 1},
		{`agentid_http_requests_total{route="/teapot",method="OTHER",status="418"}`, 1},
		{`agentid_http_requests_total{route="unmatched",method="GET",status="404"}`, 1},
	} {
		e.want(t, c.series, c.want)
	}
}

func TestVerificationOutcomes(t *testing.T) {
	reg := metrics.NewRegistry()
	// As middleware's OnResult hook…
	for _, res := range []middleware.Result{
		{Outcome: middleware.OutcomeVerified},
		{Outcome: middleware.OutcomeInvalid, Err: middleware.Fail(middleware.CodeReplayedNonce, "x")},
		{Outcome: middleware.OutcomeNotPresent, Err: middleware.Fail(middleware.CodeMissingSignature, "x")},
		{Outcome: middleware.OutcomeUnverified, Err: middleware.Fail(middleware.CodeKeyFetchFailed, "x")},
		{Outcome: middleware.OutcomeInvalid, Err: middleware.Fail(middleware.CodeExpiredSignature, "x")},
		{Outcome: middleware.OutcomeInvalid, Err: middleware.Fail(middleware.CodeWindowTooLong, "x")},
		// A hand-made Result cannot add series: its Reason is not read,
		// its unknown outcome counts as invalid.
		{Outcome: "made-up", Reason: "client text", Err: middleware.Fail(middleware.CodeInvalidSignature, "x")},
	} {
		reg.ObserveResult(res)
	}
	// …or by outcome label.
	reg.ObserveVerification(string(middleware.CodeMissingSignature))
	var b strings.Builder
	reg.WriteTo(&b)
	e := parse(t, strings.NewReader(b.String()))
	e.want(t, `agentid_verifications_total{outcome="ok"}`, 1)
	e.want(t, `agentid_verifications_total{outcome="replayed_nonce"}`, 1)
	e.want(t, `agentid_verifications_total{outcome="missing_signature"}`, 2)
	// Outcomes and reasons, from the OnResult hook only.
	e.want(t, `agentid_verification_outcomes_total{outcome="verified",reason="verified"}`, 1)
	e.want(t, `agentid_verification_outcomes_total{outcome="invalid",reason="replayed_nonce"}`, 1)
	e.want(t, `agentid_verification_outcomes_total{outcome="not-present",reason="unsigned"}`, 1)
	e.want(t, `agentid_verification_outcomes_total{outcome="unverified",reason="key_fetch_failed"}`, 1)
	e.want(t, `agentid_verification_outcomes_total{outcome="invalid",reason="invalid_freshness"}`, 2)
	e.want(t, `agentid_verification_outcomes_total{outcome="invalid",reason="invalid_signature"}`, 1)
	if n := strings.Count(b.String(), "\nagentid_verification_outcomes_total{"); n != 6 {
		t.Errorf("%d outcome series, want 6:\n%s", n, b.String())
	}
}

func TestKeyCacheAndHistogram(t *testing.T) {
	reg := metrics.NewRegistry()
	reg.ObserveKeyCache(true)
	reg.ObserveKeyCache(true)
	reg.ObserveKeyCache(false)
	for _, d := range []time.Duration{300 * time.Microsecond, 3 * time.Millisecond, 3 * time.Millisecond, 20 * time.Second} {
		reg.ObserveDBQuery(d)
	}
	var b strings.Builder
	if _, err := reg.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	e := parse(t, strings.NewReader(b.String()))
	e.want(t, `agentid_key_cache_total{result="hit"}`, 2)
	e.want(t, `agentid_key_cache_total{result="miss"}`, 1)
	if got := e.types["agentid_db_query_duration_seconds"]; got != "histogram" {
		t.Errorf("TYPE = %q, want histogram", got)
	}
	for _, c := range []struct {
		le   string
		want float64
	}{{"0.0005", 1}, {"0.001", 1}, {"0.0025", 1}, {"0.005", 3}, {"10", 3}, {"+Inf", 4}} {
		e.want(t, `agentid_db_query_duration_seconds_bucket{le="`+c.le+`"}`, c.want)
	}
	e.want(t, `agentid_db_query_duration_seconds_count`, 4)
	e.want(t, `agentid_db_query_duration_seconds_sum`, 20.0063)
	if _, ok := e.values["go_memstats_heap_alloc_bytes"]; !ok {
		t.Errorf("go_memstats_heap_alloc_bytes missing")
	}
}

func TestLogDrops(t *testing.T) {
	reg := metrics.NewRegistry()
	var b strings.Builder
	reg.WriteTo(&b)
	if strings.Contains(b.String(), "agentid_log_records_dropped_total") {
		t.Errorf("log drops exposed before CountLogDrops")
	}
	n := uint64(7)
	reg.CountLogDrops(func() uint64 { return n })
	b.Reset()
	reg.WriteTo(&b)
	e := parse(t, strings.NewReader(b.String()))
	e.want(t, "agentid_log_records_dropped_total", 7)
	if got := e.types["agentid_log_records_dropped_total"]; got != "counter" {
		t.Errorf("TYPE = %q, want counter", got)
	}
}

func TestLabelEscaping(t *testing.T) {
	reg := metrics.NewRegistry()
	reg.ObserveRequest("/a\"b\\c\nd", "GET", 200)
	var b strings.Builder
	reg.WriteTo(&b)
	want := `agentid_http_requests_total{route="/a\"b\\c\nd",method="GET",status="200"} 1`
	if !strings.Contains(b.String(), want+"\n") {
		t.Errorf("exposition lacks %s:\n%s", want, b.String())
	}
	parse(t, strings.NewReader(b.String()))
}

func TestHandlerMethods(t *testing.T) {
	srv := httptest.NewServer(metrics.NewRegistry().Handler())
	defer srv.Close()
	resp, err := http.Post(srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST status = %d, want 405", resp.StatusCode)
	}
}
