package middleware_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest/benchtest"
)

// attrsOf returns a span's attributes by key.
func attrsOf(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// TestVerifySpan reads the verification span and metric from the SDK's
// in-memory exporters: one "agentid.verify" span per verification, a
// child of the request's span, with the agentid.* attributes and never a
// signature or nonce.
func TestVerifySpan(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	var logs bytes.Buffer
	v := mustNew(t, middleware.Config{Authorities: testAuthorities, Keys: staticKeys(), Now: clock,
		TracerProvider: tp, MeterProvider: mp,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})

	ctx, parent := tp.Tracer("test").Start(context.Background(), "GET /v1/things", trace.WithSpanKind(trace.SpanKindServer))
	good := signedRequest(t, keyA, signOpts(func(o *signer.Options) { o.Nonce = "secret-nonce-1" }))
	if res := v.Check(good.WithContext(ctx)); res.Outcome != middleware.OutcomeVerified {
		t.Fatalf("outcome %s: %v", res.Outcome, res.Err)
	}
	bad := signedRequest(t, keyB, signOpts(func(o *signer.Options) { o.Nonce = "secret-nonce-2" }))
	res := v.Check(bad.WithContext(ctx))
	if res.Err == nil {
		t.Fatal("a request signed with an unpublished key passed")
	}
	parent.End()

	var spans []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "agentid.verify" {
			spans = append(spans, s)
		}
	}
	if len(spans) != 2 {
		t.Fatalf("%d agentid.verify spans, want 2", len(spans))
	}
	for _, s := range spans {
		if s.SpanKind() != trace.SpanKindInternal || s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span kind %v, parent %v: want internal, child of the request's span", s.SpanKind(), s.Parent().SpanID())
		}
		if s.InstrumentationScope().Name != "github.com/agentid/agentid/middleware" {
			t.Errorf("scope %q", s.InstrumentationScope().Name)
		}
		for _, kv := range s.Attributes() {
			val := kv.Value.String()
			if strings.Contains(val, "secret-nonce") || strings.Contains(val, good.Header.Get("Signature")) {
				t.Errorf("attribute %s carries the nonce or signature: %q", kv.Key, val)
			}
		}
	}
	ok, refused := attrsOf(spans[0].Attributes()), attrsOf(spans[1].Attributes())
	want := map[string]string{"agentid.outcome": "verified", "agentid.agent": testOrigin, "agentid.uid": testUID, "agentid.keyid": keyA.KeyID()}
	for k, w := range want {
		if ok[k] != w {
			t.Errorf("verified span: %s = %q, want %q", k, ok[k], w)
		}
	}
	if ok["agentid.reason"] != "verified" {
		t.Errorf("verified span: reason %q", ok["agentid.reason"])
	}
	if refused["agentid.outcome"] != string(res.Outcome) || refused["agentid.reason"] != res.Reason {
		t.Errorf("refused span: %v, want outcome %s reason %s", refused, res.Outcome, res.Reason)
	}
	for _, k := range []string{"agentid.agent", "agentid.keyid", "agentid.uid"} {
		if _, has := refused[k]; has {
			t.Errorf("refused span carries %s, the client's own claim", k)
		}
	}

	// The refusal's log line names the trace.
	var line struct {
		TraceID string `json:"trace_id"`
	}
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil || line.TraceID != parent.SpanContext().TraceID().String() {
		t.Errorf("log line %s (%v): trace_id %q, want %s", logs.String(), err, line.TraceID, parent.SpanContext().TraceID())
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var points []metricdata.HistogramDataPoint[float64]
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "agentid.verify.duration" && m.Unit == "s" {
				points = append(points, m.Data.(metricdata.Histogram[float64]).DataPoints...)
			}
		}
	}
	got := map[string]uint64{}
	for _, p := range points {
		o, _ := p.Attributes.Value("agentid.outcome")
		r, _ := p.Attributes.Value("agentid.reason")
		got[o.AsString()+"/"+r.AsString()] += p.Count
	}
	if len(got) != 2 || got["verified/verified"] != 1 || got[string(res.Outcome)+"/"+res.Reason] != 1 {
		t.Errorf("agentid.verify.duration counts %v", got)
	}
}

// TestNoProviderNoAllocation checks that with no provider given (and none
// set globally: no test of this package sets one) a verified request
// allocates no more than before the verifier had a span and a metric.
func TestNoProviderNoAllocation(t *testing.T) { // not parallel: AllocsPerRun
	key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(benchSeed))
	keys := middleware.NewStaticKeys()
	keys.Add(benchOrigin, key.Public)
	const runs = 50
	allocs := func(check func(*middleware.Verifier, *http.Request) *middleware.Result) float64 {
		v := mustNew(t, middleware.Config{Authorities: testAuthorities, Keys: keys, Now: func() time.Time { return benchNow }})
		reqs := make([]*http.Request, runs+1) // AllocsPerRun runs once more to warm up
		for i := range reqs {
			reqs[i] = benchRequest(t, i, runs, key, nil)
		}
		i := 0
		return testing.AllocsPerRun(runs, func() {
			if res := check(v, reqs[i]); res.Outcome != middleware.OutcomeVerified {
				t.Fatalf("outcome %s: %v", res.Outcome, res.Err)
			}
			i++
		})
	}
	before := allocs((*middleware.Verifier).CheckUninstrumented)
	now := allocs((*middleware.Verifier).Check)
	if now > before {
		t.Errorf("a verified request allocates %v times with no provider, %v before", now, before)
	}
}

// discardSpans is a span exporter that keeps nothing.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// tracingCases are the paths BenchmarkVerifyTracing and
// BenchmarkVerifyTracingCPU compare: "before" is Check without the span
// and metric, "no-provider" today's Check with no provider, "sampled" with
// the SDK sampling every span, exported synchronously to an exporter that
// discards it.
var tracingCases = []struct {
	name    string
	sampled bool
	check   func(*middleware.Verifier, *http.Request) *middleware.Result
}{
	{"before", false, (*middleware.Verifier).CheckUninstrumented},
	{"no-provider", false, (*middleware.Verifier).Check},
	{"sampled", true, (*middleware.Verifier).Check},
}

// tracingVerifier returns a verifier of benchOrigin's key, sampling every
// span when sampled.
func tracingVerifier(b *testing.B, key signer.PrivateKey, sampled bool) *middleware.Verifier {
	keys := middleware.NewStaticKeys()
	keys.Add(benchOrigin, key.Public)
	cfg := middleware.Config{Authorities: testAuthorities, Keys: keys, Now: func() time.Time { return benchNow }}
	if sampled {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(discardSpans{})))
		b.Cleanup(func() { tp.Shutdown(context.Background()) })
		cfg.TracerProvider = tp
	}
	return mustNew(b, cfg)
}

// BenchmarkVerifyTracing reports the allocations of one verified request
// (Check on a key cache hit, a fresh nonce each) on each path of
// tracingCases, in the same run.
func BenchmarkVerifyTracing(b *testing.B) {
	key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(benchSeed))
	for _, bc := range tracingCases {
		b.Run(bc.name, func(b *testing.B) {
			v := tracingVerifier(b, key, bc.sampled)
			reqs := benchRequests(b, b.N, key, nil)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if res := bc.check(v, reqs[i]); res.Outcome != middleware.OutcomeVerified {
					b.Fatalf("outcome %s: %v", res.Outcome, res.Err)
				}
			}
		})
	}
}

// BenchmarkVerifyTracingCPU times two paths of tracingCases in the same
// run, interleaved (benchtest.PairedPrepared): no-provider against before,
// and sampled against no-provider, in both orders (the path timed second
// in each block gains a little from the first: the geometric mean of the
// two orders' ratios cancels that). cpu-x-… is the ratio of the thread's
// CPU time; docs/benchmarks.md has the figures.
func BenchmarkVerifyTracingCPU(b *testing.B) {
	key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(benchSeed))
	for _, pair := range [][2]int{{0, 1}, {1, 0}, {1, 2}, {2, 1}} {
		base, meas := tracingCases[pair[0]], tracingCases[pair[1]]
		b.Run(base.name+"-then-"+meas.name, func(b *testing.B) {
			vb, vm := tracingVerifier(b, key, base.sampled), tracingVerifier(b, key, meas.sampled)
			rb := make([]*http.Request, ratioBlock)
			rm := make([]*http.Request, ratioBlock)
			check := func(c func(*middleware.Verifier, *http.Request) *middleware.Result, v *middleware.Verifier, r *http.Request) {
				if res := c(v, r); res.Outcome != middleware.OutcomeVerified {
					b.Fatalf("outcome %s: %v", res.Outcome, res.Err)
				}
			}
			benchtest.PairedPrepared(b, ratioBlock, base.name, meas.name,
				func(start, end int) {
					for i := start; i < end; i++ {
						rb[i-start] = benchRequest(b, i, b.N, key, nil)
						rm[i-start] = benchRequest(b, i, b.N, key, nil)
					}
				},
				func(i int) { check(base.check, vb, rb[i%ratioBlock]) },
				func(i int) { check(meas.check, vm, rm[i%ratioBlock]) })
		})
	}
}
