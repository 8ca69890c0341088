package telemetry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/telemetry"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

const (
	traceID      = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentSpanID = "00f067aa0ba902b7"
)

// attrs returns kvs by key.
func attrs(kvs []attribute.KeyValue) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

// TestServerSpans serves requests through Start and End around a verifier
// and reads the spans and the metric from the SDK's in-memory exporters:
// the names and attributes of the HTTP semantic conventions, the parent
// from traceparent, the verifier's span as the server span's child, and
// the span status set only for a 5xx.
func TestServerSpans(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	key := signertest.Key(0xa1)
	const origin = "https://agent-0123456789abcdef01234567.agentid.example"
	keys := middleware.NewStaticKeys()
	keys.Add(origin, key.Public)
	v, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{"api.example.com"}, TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	tel := telemetry.New(telemetry.Config{TracerProvider: tp, MeterProvider: mp, Propagator: propagation.TraceContext{}})
	serve := func(r *http.Request, route string, status int) {
		r, req := tel.Start(r, route)
		res := v.Check(r)
		if status == 0 && !res.Passed {
			status = res.Err.Status()
		}
		req.End(status, res)
	}

	signed := httptest.NewRequest(http.MethodGet, "http://api.example.com/v1/things/42?q=1", nil)
	if err := signer.Sign(signed, key, signer.Options{SignatureAgent: origin}); err != nil {
		t.Fatal(err)
	}
	signed.Header.Set("traceparent", "00-"+traceID+"-"+parentSpanID+"-01")
	serve(signed, "/v1/things/{id}", 0)
	serve(httptest.NewRequest(http.MethodPost, "http://api.example.com/v1/things", nil), "/v1/things", 0)
	serve(httptest.NewRequest("BREW", "http://api.example.com/pot", nil), "", http.StatusServiceUnavailable)

	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.Name() != "agentid.verify" || s.SpanContext().TraceID().String() == traceID {
			byName[s.Name()] = s
		}
	}
	get, post, other, verify := byName["GET /v1/things/{id}"], byName["POST /v1/things"], byName["HTTP"], byName["agentid.verify"]
	if get == nil || post == nil || other == nil || verify == nil {
		t.Fatalf("spans %v", byName)
	}
	if get.SpanKind() != trace.SpanKindServer || get.SpanContext().TraceID().String() != traceID || get.Parent().SpanID().String() != parentSpanID || !get.Parent().IsRemote() {
		t.Errorf("GET span: kind %v, trace %s, parent %s: want a server span under the traceparent's", get.SpanKind(), get.SpanContext().TraceID(), get.Parent().SpanID())
	}
	if verify.Parent().SpanID() != get.SpanContext().SpanID() {
		t.Errorf("agentid.verify's parent is %s, want the server span %s", verify.Parent().SpanID(), get.SpanContext().SpanID())
	}
	g := attrs(get.Attributes())
	for k, want := range map[string]string{"http.request.method": "GET", "http.route": "/v1/things/{id}", "url.scheme": "http",
		"url.path": "/v1/things/42", "server.address": "api.example.com", "network.protocol.version": "1.1",
		"agentid.outcome": "verified", "agentid.reason": "verified", "agentid.agent": origin, "agentid.keyid": key.KeyID(),
		"agentid.uid": "agent-0123456789abcdef01234567"} {
		if got := g[k].String(); got != want {
			t.Errorf("GET span: %s = %q, want %q", k, got, want)
		}
	}
	if g["http.response.status_code"].AsInt64() != 200 || get.Status().Code != codes.Unset {
		t.Errorf("GET span: status code %v, span status %v", g["http.response.status_code"], get.Status())
	}
	p := attrs(post.Attributes())
	if p["http.response.status_code"].AsInt64() != 401 || p["agentid.outcome"].String() != "not-present" || post.Status().Code != codes.Unset {
		t.Errorf("POST span (a 401): %v, status %v; want the status unset", p, post.Status())
	}
	if _, has := p["error.type"]; has {
		t.Errorf("a 4xx server span has error.type")
	}
	o := attrs(other.Attributes())
	if o["http.request.method"].String() != "_OTHER" || o["http.request.method_original"].String() != "BREW" || o["error.type"].String() != "503" || other.Status().Code != codes.Error {
		t.Errorf("BREW span (a 503): %v, status %v", o, other.Status())
	}
	if _, has := o["http.route"]; has {
		t.Errorf("a request no route matched has http.route")
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "http.server.request.duration" {
				continue
			}
			if m.Unit != "s" {
				t.Errorf("unit %q", m.Unit)
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				method, _ := dp.Attributes.Value("http.request.method")
				status, _ := dp.Attributes.Value("http.response.status_code")
				route, _ := dp.Attributes.Value("http.route")
				counts[method.String()+" "+status.String()+" "+route.String()] += dp.Count
			}
		}
	}
	want := map[string]uint64{"GET 200 /v1/things/{id}": 1, "POST 401 /v1/things": 1, "_OTHER 503 ": 1}
	if len(counts) != len(want) {
		t.Errorf("http.server.request.duration: %v, want %v", counts, want)
	}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("http.server.request.duration: %v, want %v", counts, want)
			break
		}
	}
}

// TestNoProviderNoAllocation checks that Start and End do nothing, and
// allocate nothing, with no provider given or set (no test of this
// package sets one).
func TestNoProviderNoAllocation(t *testing.T) { // not parallel: AllocsPerRun
	tel := telemetry.New(telemetry.Config{})
	r := httptest.NewRequest(http.MethodGet, "http://api.example.com/", nil)
	r.Header.Set("traceparent", "00-"+traceID+"-"+parentSpanID+"-01")
	n := testing.AllocsPerRun(100, func() {
		r2, req := tel.Start(r, "/")
		if r2 != r || req != nil {
			t.Fatal("Start did something with no provider")
		}
		req.End(200, nil)
	})
	if n != 0 {
		t.Errorf("Start and End allocate %v times with no provider", n)
	}
}
