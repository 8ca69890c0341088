package refserver_test

import (
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer/signertest"
)

// TestServerSpans reads the server's spans from the SDK's in-memory
// exporter: one server span per request named after its route template,
// the verifier's span its child, a 401 leaving the span status unset, and
// the request's log line carrying its trace id.
func TestServerSpans(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	e := newTestEnvConfig(t, dbtest.Open(t, "sqlite::memory:"), "", func(c *refserver.Config) { c.TracerProvider = tp })
	key := signertest.Key(0x39)
	uid := e.register(key)
	if resp := e.send(e.whoamiReq(http.MethodGet, uid, key)); resp.status != http.StatusOK {
		t.Fatalf("GET /whoami: %d %s", resp.status, resp.body)
	}
	if resp := e.send(e.request(http.MethodGet, e.base+"/whoami", nil)); resp.status != http.StatusUnauthorized {
		t.Fatalf("unsigned GET /whoami: %d, want 401", resp.status)
	}
	if resp := e.send(e.request(http.MethodGet, e.base+"/no/such/route", nil)); resp.status != http.StatusNotFound {
		t.Fatalf("GET of an unknown path: %d, want 404", resp.status)
	}

	var whoami, verify []sdktrace.ReadOnlySpan
	names := map[string]bool{}
	for _, s := range rec.Ended() {
		names[s.Name()] = true
		switch s.Name() {
		case "GET /whoami":
			whoami = append(whoami, s)
		case "agentid.verify":
			verify = append(verify, s)
		}
	}
	if len(whoami) != 2 || !names["POST /agents"] || !names["GET"] {
		t.Fatalf("spans named %v: want two GET /whoami, POST /agents, and GET for the unmatched path", names)
	}
	status := func(s sdktrace.ReadOnlySpan) attribute.Value {
		for _, kv := range s.Attributes() {
			if kv.Key == "http.response.status_code" {
				return kv.Value
			}
		}
		return attribute.Value{}
	}
	ok, refused := whoami[0], whoami[1]
	if status(ok).AsInt64() != 200 || status(refused).AsInt64() != 401 || refused.Status().Code != codes.Unset {
		t.Errorf("GET /whoami spans: statuses %v and %v, span status %v: want 200, 401, unset", status(ok), status(refused), refused.Status())
	}
	child := false
	for _, v := range verify {
		if v.Parent().SpanID() == ok.SpanContext().SpanID() {
			child = true
		}
	}
	if !child {
		t.Error("no agentid.verify span is a child of the verified GET /whoami's span")
	}
	if logs := e.logs.String(); !strings.Contains(logs, "trace_id="+refused.SpanContext().TraceID().String()) {
		t.Errorf("no request log line names the refused request's trace:\n%s", logs)
	}
}
