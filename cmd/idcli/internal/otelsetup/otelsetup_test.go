package otelsetup_test

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/agentid/agentid/cmd/idcli/internal/otelsetup"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

func TestEnabled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, false},
	} {
		if got := otelsetup.Enabled(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("Enabled(%v) = %v, want %v", tc.env, got, tc.want)
		}
	}
	before := otel.GetTracerProvider()
	shutdown, err := otelsetup.Start(context.Background(), func(string) string { return "" }, "agentid")
	if err != nil || shutdown(context.Background()) != nil {
		t.Fatalf("Start with no endpoint: %v", err)
	}
	if otel.GetTracerProvider() != before {
		t.Error("Start with no endpoint set a provider")
	}
}

// receiver is an OTLP/HTTP collector on loopback: it decodes the protobuf
// export requests it is sent.
type receiver struct {
	mu      sync.Mutex
	traces  []*coltracepb.ExportTraceServiceRequest
	metrics []*colmetricpb.ExportMetricsServiceRequest
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	var resp proto.Message
	rc.mu.Lock()
	defer rc.mu.Unlock()
	switch r.URL.Path {
	case "/v1/traces":
		var req coltracepb.ExportTraceServiceRequest
		err = proto.Unmarshal(body, &req)
		rc.traces = append(rc.traces, &req)
		resp = &coltracepb.ExportTraceServiceResponse{}
	case "/v1/metrics":
		var req colmetricpb.ExportMetricsServiceRequest
		err = proto.Unmarshal(body, &req)
		rc.metrics = append(rc.metrics, &req)
		resp = &colmetricpb.ExportMetricsServiceResponse{}
	default:
		http.NotFound(w, r)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	b, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(b)
}

// TestExportOverOTLP configures the globals from OTEL_* variables naming
// a receiver in the test, sends a signed request with a traceparent
// through the proxy over loopback, and decodes what the exporters send:
// the proxy's server span under the caller's trace, the verifier's span
// under it, the service name, and http.server.request.duration. It sets
// the process's globals and environment, so it does not run in parallel.
func TestExportOverOTLP(t *testing.T) {
	rc := &receiver{}
	collector := httptest.NewServer(rc)
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_SERVICE_NAME", "agentid-test")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
	shutdown, err := otelsetup.Start(context.Background(), os.Getenv, "agentid-proxy")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		otel.SetTracerProvider(tracenoop.NewTracerProvider())
		otel.SetMeterProvider(metricnoop.NewMeterProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	}()

	key := signertest.Key(0x39)
	const origin = "https://agent-0123456789abcdef01234567.agentid.example"
	keys := middleware.NewStaticKeys()
	keys.Add(origin, key.Public)
	v, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{"api.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	h, err := proxy.New(proxy.Config{Verifier: v, Upstream: u})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(h)
	defer front.Close()
	req, _ := http.NewRequest(http.MethodGet, front.URL+"/things", nil)
	req.Host = "api.example.com"
	if err := signer.Sign(req, key, signer.Options{SignatureAgent: origin}); err != nil {
		t.Fatal(err)
	}
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown (flushing to the receiver): %v", err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	spans := map[string]*tracepb.Span{}
	service := ""
	for _, req := range rc.traces {
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					spans[s.Name] = s
				}
			}
		}
	}
	server, verify := spans["GET /"], spans["agentid.verify"]
	if server == nil || verify == nil {
		t.Fatalf("received spans %v, want GET / and agentid.verify", spans)
	}
	if service != "agentid-test" {
		t.Errorf("service.name %q, want OTEL_SERVICE_NAME's", service)
	}
	if hex.EncodeToString(server.TraceId) != traceID || hex.EncodeToString(server.ParentSpanId) != parentID || server.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("server span: trace %x parent %x kind %v, want the traceparent's, server", server.TraceId, server.ParentSpanId, server.Kind)
	}
	if string(verify.ParentSpanId) != string(server.SpanId) || verify.Kind != tracepb.Span_SPAN_KIND_INTERNAL {
		t.Errorf("agentid.verify: parent %x kind %v, want the server span %x, internal", verify.ParentSpanId, verify.Kind, server.SpanId)
	}
	metrics := map[string]bool{}
	for _, req := range rc.metrics {
		for _, rm := range req.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					metrics[m.Name] = true
				}
			}
		}
	}
	if !metrics["http.server.request.duration"] || !metrics["agentid.verify.duration"] {
		t.Errorf("received metrics %v", metrics)
	}
}
