// Package metrics counts what the reference server does and serves it at
// /metrics in the Prometheus text exposition format (version 0.0.4),
// written by hand: no client library.
//
//	reg := metrics.NewRegistry()
//	reg.ObserveRequest("/whoami", "GET", 200) // once per answered request
//	reg.ObserveDBQuery(elapsed)               // once per database statement
//	router.Handle("/metrics", reg.Handler())
//
// Series: agentid_http_requests_total{route,method,status},
// agentid_verifications_total{outcome} (outcome "ok" or the error code of
// the JSON error body), agentid_verification_outcomes_total{outcome,reason}
// (docs/outcomes.md), agentid_key_cache_total{result="hit"|"miss"},
// agentid_db_query_duration_seconds (histogram),
// agentid_log_records_dropped_total (with CountLogDrops),
// agentid_agents{state} and agentid_keys{state} (with CountInventory), plus
// Go runtime memory and goroutine gauges.
package metrics

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentid/agentid/middleware"
)

// ContentType is the media type of the exposition.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// DBBuckets are the upper bounds, in seconds, of the database latency
// histogram buckets (+Inf is implicit).
var DBBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Unmatched is the route label of requests no route matched.
const Unmatched = "unmatched"

// outcomeKey labels agentid_verification_outcomes_total: one of the four
// outcomes and a reason of the fixed set, so at most a few dozen series.
type outcomeKey struct{ outcome, reason string }

type requestKey struct {
	route, method string
	status        int
}

// Histogram counts observations into fixed buckets. It is safe for
// concurrent use; Observe is lock-free.
type Histogram struct {
	bounds []float64
	counts []atomic.Uint64 // len(bounds)+1; the last is +Inf
	sumNs  atomic.Int64
}

func newHistogram(bounds []float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// Observe records one duration.
func (h *Histogram) Observe(d time.Duration) {
	s := d.Seconds()
	i, _ := slices.BinarySearch(h.bounds, s) // first bound >= s
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

// Registry holds the server's metrics. The zero value is not usable; call
// NewRegistry. It is safe for concurrent use; recording is lock-free once a
// label set has been seen.
type Registry struct {
	requests      counters[requestKey]
	verifications counters[string] // by outcome
	outcomes      counters[outcomeKey]
	keyHit        atomic.Uint64
	keyMiss       atomic.Uint64
	db            *Histogram
	logDrops      atomic.Pointer[func() uint64]
	inv           atomic.Pointer[inventory]
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{db: newHistogram(DBBuckets)}
}

// counters is a family of counters by label set. Finding a seen label
// set takes a read lock and allocates nothing (a sync.Map would box each
// key into an interface).
type counters[K comparable] struct {
	mu sync.RWMutex
	m  map[K]*atomic.Uint64
}

// get returns the counter of k, creating it at zero.
func (c *counters[K]) get(k K) *atomic.Uint64 {
	c.mu.RLock()
	n := c.m[k]
	c.mu.RUnlock()
	if n != nil {
		return n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n = c.m[k]; n == nil {
		if c.m == nil {
			c.m = make(map[K]*atomic.Uint64)
		}
		n = new(atomic.Uint64)
		c.m[k] = n
	}
	return n
}

// sorted returns the label sets and their values, sorted by cmp.
func (c *counters[K]) sorted(cmp func(a, b K) int) ([]K, []uint64) {
	c.mu.RLock()
	keys := make([]K, 0, len(c.m))
	for k := range c.m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp)
	values := make([]uint64, len(keys))
	for i, k := range keys {
		values[i] = c.m[k].Load()
	}
	c.mu.RUnlock()
	return keys, values
}

// ObserveRequest counts one HTTP response. route is the route template
// ("" counts as "unmatched"); unusual methods are counted as "OTHER" so a
// client cannot create series at will.
func (r *Registry) ObserveRequest(route, method string, status int) {
	if route == "" {
		route = Unmatched
	}
	r.requests.get(requestKey{route, normMethod(method), status}).Add(1)
}

func normMethod(m string) string {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS":
		return m
	}
	return "OTHER"
}

// ObserveVerification counts one signature verification outcome: "ok" or
// the error code (e.g. "replayed_nonce").
func (r *Registry) ObserveVerification(outcome string) {
	r.verifications.get(outcome).Add(1)
}

// ObserveResult counts one verification outcome as middleware's
// Config.OnResult hook: "ok" for a verified request, else the error code.
// Install it with middleware.Config{OnResult: reg.ObserveResult}.
func (r *Registry) ObserveResult(res middleware.Result) {
	r.outcomes.get(outcomeOf(&res)).Add(1)
	if res.Outcome == middleware.OutcomeVerified || res.Err == nil {
		r.ObserveVerification("ok")
		return
	}
	r.ObserveVerification(string(res.Err.Code))
}

// outcomeOf is res's outcome and reason, each from its fixed set
// whatever a caller put in res: the reason is read from the error's code,
// an unknown outcome counts as invalid.
func outcomeOf(res *middleware.Result) outcomeKey {
	k := outcomeKey{string(middleware.OutcomeInvalid), "verified"}
	switch o := res.Outcome; o {
	case middleware.OutcomeVerified, middleware.OutcomeNotPresent, middleware.OutcomeUnverified, middleware.OutcomeInvalid:
		k.outcome = string(o)
	}
	if res.Err != nil {
		k.reason = res.Err.Code.Reason()
	}
	return k
}

// ObserveKeyCache counts one key lookup answered from the cache (hit) or
// not (miss).
func (r *Registry) ObserveKeyCache(hit bool) {
	if hit {
		r.keyHit.Add(1)
	} else {
		r.keyMiss.Add(1)
	}
}

// ObserveDBQuery records the duration of one database statement.
func (r *Registry) ObserveDBQuery(d time.Duration) { r.db.Observe(d) }

// CountLogDrops makes the registry expose
// agentid_log_records_dropped_total, read from dropped (for example
// asynclog.Handler.Dropped): log records dropped because the log writer
// was behind.
func (r *Registry) CountLogDrops(dropped func() uint64) { r.logDrops.Store(&dropped) }

// Handler serves the exposition (GET and HEAD).
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			middleware.WriteError(w, req, middleware.Fail(middleware.CodeMethodNotAllowed, "use GET"))
			return
		}
		w.Header().Set("Content-Type", ContentType)
		w.Header().Set("Cache-Control", "no-store")
		if req.Method == http.MethodHead {
			return
		}
		r.writeTo(req.Context(), w)
	})
}

// WriteTo writes the exposition to w: each family with HELP and TYPE lines,
// series sorted by label values.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	return r.writeTo(context.Background(), w)
}

func (r *Registry) writeTo(ctx context.Context, w io.Writer) (int64, error) {
	bw := &countWriter{w: bufio.NewWriter(w)}

	family(bw, "agentid_http_requests_total", "counter", "HTTP responses by route template, method and status code.")
	reqs, counts := r.requests.sorted(func(a, b requestKey) int {
		return cmp.Or(cmp.Compare(a.route, b.route), cmp.Compare(a.method, b.method), cmp.Compare(a.status, b.status))
	})
	for i, k := range reqs {
		fmt.Fprintf(bw, "agentid_http_requests_total{route=%s,method=%s,status=\"%d\"} %d\n",
			quote(k.route), quote(k.method), k.status, counts[i])
	}

	family(bw, "agentid_verifications_total", "counter", `Signature verifications by outcome: "ok" or the error code.`)
	outs, counts := r.verifications.sorted(strings.Compare)
	for i, o := range outs {
		fmt.Fprintf(bw, "agentid_verifications_total{outcome=%s} %d\n", quote(o), counts[i])
	}

	family(bw, "agentid_verification_outcomes_total", "counter", "Verification outcomes (verified, invalid, unverified, not-present) by reason, as in docs/outcomes.md.")
	names, counts := r.outcomes.sorted(func(a, b outcomeKey) int {
		return cmp.Or(cmp.Compare(a.outcome, b.outcome), cmp.Compare(a.reason, b.reason))
	})
	for i, k := range names {
		fmt.Fprintf(bw, "agentid_verification_outcomes_total{outcome=%s,reason=%s} %d\n", quote(k.outcome), quote(k.reason), counts[i])
	}

	family(bw, "agentid_key_cache_total", "counter", "Key lookups answered from the cache (hit) or not (miss).")
	fmt.Fprintf(bw, "agentid_key_cache_total{result=\"hit\"} %d\n", r.keyHit.Load())
	fmt.Fprintf(bw, "agentid_key_cache_total{result=\"miss\"} %d\n", r.keyMiss.Load())

	r.writeInventory(ctx, bw)

	if f := r.logDrops.Load(); f != nil {
		family(bw, "agentid_log_records_dropped_total", "counter", "Log records dropped because the log writer was behind.")
		fmt.Fprintf(bw, "agentid_log_records_dropped_total %d\n", (*f)())
	}

	family(bw, "agentid_db_query_duration_seconds", "histogram", "Database statement latency in seconds.")
	var cum uint64
	for i := range r.db.counts {
		cum += r.db.counts[i].Load()
		le := "+Inf"
		if i < len(r.db.bounds) {
			le = formatFloat(r.db.bounds[i])
		}
		fmt.Fprintf(bw, "agentid_db_query_duration_seconds_bucket{le=%q} %d\n", le, cum)
	}
	fmt.Fprintf(bw, "agentid_db_query_duration_seconds_sum %s\n", formatFloat(time.Duration(r.db.sumNs.Load()).Seconds()))
	fmt.Fprintf(bw, "agentid_db_query_duration_seconds_count %d\n", cum)

	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	family(bw, "go_goroutines", "gauge", "Number of goroutines.")
	fmt.Fprintf(bw, "go_goroutines %d\n", runtime.NumGoroutine())
	family(bw, "go_memstats_heap_alloc_bytes", "gauge", "Bytes of allocated heap objects.")
	fmt.Fprintf(bw, "go_memstats_heap_alloc_bytes %d\n", ms.HeapAlloc)
	family(bw, "go_memstats_sys_bytes", "gauge", "Bytes of memory obtained from the OS by the Go runtime.")
	fmt.Fprintf(bw, "go_memstats_sys_bytes %d\n", ms.Sys)
	if rss, ok := residentBytes(); ok {
		family(bw, "process_resident_memory_bytes", "gauge", "Resident set size in bytes.")
		fmt.Fprintf(bw, "process_resident_memory_bytes %d\n", rss)
	}
	if err := bw.w.Flush(); err != nil && bw.err == nil {
		bw.err = err
	}
	return bw.n, bw.err
}

// countWriter counts what WriteTo writes and keeps its first error. It is
// an io.Writer over a buffer, not a wrapped http.ResponseWriter: there is
// no status to record, so it is not middleware.StatusWriter.
type countWriter struct {
	w   *bufio.Writer
	n   int64
	err error
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

func family(w io.Writer, name, typ, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, typ)
}

// quote renders a label value: backslash, double quote and newline escaped.
func quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

func formatFloat(f float64) string {
	if math.IsInf(f, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// residentBytes reads the resident set size from /proc/self/statm (Linux).
func residentBytes() (int64, bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * int64(os.Getpagesize()), true
}
