package proxy_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/proxy"
)

// TestProxySpans reads the proxy's spans from the SDK's in-memory
// exporter: a server span per request, named "GET /" (the proxy's one
// route), with the outcome's attributes, and the access log line naming
// its trace.
func TestProxySpans(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	up := newUpstream(t)
	u, _ := url.Parse(up.URL)
	var logs bytes.Buffer
	srv := startProxyConfig(t, middleware.Required, proxy.Config{Upstream: u, TracerProvider: tp}, &logs)
	if resp, body := do(t, signed(t, srv.URL, nil)); resp.StatusCode != http.StatusOK {
		t.Fatalf("signed: %d %s", resp.StatusCode, body)
	}
	if resp, _ := do(t, unsigned(t, srv.URL)); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unsigned: %d, want 401", resp.StatusCode)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for i, want := range []struct {
		status  int64
		outcome string
	}{{200, "verified"}, {401, "not-present"}} {
		s := spans[i]
		got := map[string]string{}
		for _, kv := range s.Attributes() {
			got[string(kv.Key)] = kv.Value.String()
		}
		if s.Name() != "GET /" || got["http.route"] != "/" || got["http.response.status_code"] != strconv.FormatInt(want.status, 10) ||
			got["agentid.outcome"] != want.outcome || s.Status().Code != codes.Unset {
			t.Errorf("span %d: %s %v status %v, want GET / with status %d and outcome %s", i, s.Name(), got, s.Status(), want.status, want.outcome)
		}
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	for i, line := range lines {
		var l struct {
			TraceID string `json:"trace_id"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil || l.TraceID != spans[i].SpanContext().TraceID().String() {
			t.Errorf("access log line %d: %s: want trace_id %s", i, line, spans[i].SpanContext().TraceID())
		}
	}
}
