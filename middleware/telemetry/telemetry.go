// Package telemetry gives an HTTP server a span per request and the metric
// http.server.request.duration, named and attributed as OpenTelemetry's
// HTTP semantic conventions say, plus the agentid.* attributes of the
// request's verification; the parent span is the one the request's W3C
// traceparent names. The reference server and the proxy share it; what
// each records is in docs/deployment.md and docs/proxy.md.
//
//	tel := telemetry.New(telemetry.Config{}) // the global providers
//	r, req := tel.Start(r, "/agents/{uid}")
//	… answer …
//	req.End(status, res) // res: the verification's *middleware.Result, or nil
//
// With no provider set (and none given) Start and End do nothing and
// allocate nothing.
package telemetry

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/internal/otelon"
)

// scope is the instrumentation scope of the spans and the metric.
const scope = "github.com/agentid/agentid/middleware/telemetry"

// Config names the providers. A nil field means the global one (for the
// propagator too), which does nothing until an application sets it.
type Config struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Propagator     propagation.TextMapPropagator
}

// Server starts the spans of one server's requests. It is safe for
// concurrent use; a nil *Server starts nothing.
type Server struct {
	tracer   otelon.Tracer
	duration metric.Float64Histogram
	prop     propagation.TextMapPropagator
}

// New returns the Server of cfg's providers.
func New(cfg Config) *Server {
	s := &Server{tracer: otelon.New(cfg.TracerProvider, scope, trace.WithSchemaURL(semconv.SchemaURL)), prop: cfg.Propagator}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	// On an error the instrument is a no-op, which is what it would be.
	s.duration, _ = mp.Meter(scope, metric.WithSchemaURL(semconv.SchemaURL)).Float64Histogram("http.server.request.duration",
		metric.WithUnit("s"), metric.WithDescription("Duration of HTTP server requests."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10))
	return s
}

// Request is one request's span and timing, from Start to End. A nil
// *Request (nothing records) does nothing.
type Request struct {
	s      *Server
	ctx    context.Context
	span   trace.Span // nil when only the metric records
	start  time.Time
	method attribute.KeyValue
	scheme string
	route  string
	timing bool
}

// Start begins r's server span, named "{method} {route}" (route is the
// route template the request matched; "" if none, and the name is then the
// method alone), as the child of the span r's traceparent names, and
// returns r with the span in its context, so that the verifier's span is
// its child.
func (s *Server) Start(r *http.Request, route string) (*http.Request, *Request) {
	if s == nil {
		return r, nil
	}
	ctx := r.Context()
	tracing, timing := s.tracer.On(), s.duration.Enabled(ctx)
	if !tracing && !timing {
		return r, nil
	}
	q := &Request{s: s, start: time.Now(), method: methodAttr(r.Method), scheme: "http", route: route, timing: timing}
	if r.TLS != nil {
		q.scheme = "https"
	}
	if tracing {
		prop := s.prop
		if prop == nil {
			prop = otel.GetTextMapPropagator()
		}
		ctx = prop.Extract(ctx, propagation.HeaderCarrier(r.Header))
		name := q.method.Value.AsString()
		if name == "_OTHER" {
			name = "HTTP"
		}
		if route != "" {
			name += " " + route
		}
		attrs := make([]attribute.KeyValue, 0, 9)
		attrs = append(attrs, q.method, semconv.URLScheme(q.scheme), semconv.URLPath(otelon.Bound(r.URL.Path)),
			semconv.NetworkProtocolVersion(protocolVersion(r)))
		if q.method.Value.AsString() == "_OTHER" {
			attrs = append(attrs, semconv.HTTPRequestMethodOriginal(otelon.Bound(r.Method)))
		}
		if route != "" {
			attrs = append(attrs, semconv.HTTPRoute(route))
		}
		if host, port := splitHost(r.Host); host != "" {
			attrs = append(attrs, semconv.ServerAddress(otelon.Bound(host)))
			if port > 0 {
				attrs = append(attrs, semconv.ServerPort(port))
			}
		}
		ctx, q.span = s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		r = r.WithContext(ctx)
	}
	q.ctx = ctx
	return r, q
}

// End ends the span with status, the status sent (0 means 200), and with
// res's outcome and reason (and, when verified, the agent's identity, uid
// and keyid) if res is not nil, and records the request's duration. A 5xx
// sets the span's status to Error; a 4xx leaves it unset, as the
// conventions say of server spans.
func (q *Request) End(status int, res *middleware.Result) {
	if q == nil {
		return
	}
	if status == 0 {
		status = http.StatusOK
	}
	var errType attribute.KeyValue
	if status >= 500 {
		errType = semconv.ErrorTypeKey.String(strconv.Itoa(status))
	}
	if q.timing {
		attrs := make([]attribute.KeyValue, 0, 5)
		attrs = append(attrs, q.method, semconv.URLScheme(q.scheme), semconv.HTTPResponseStatusCode(status))
		if q.route != "" {
			attrs = append(attrs, semconv.HTTPRoute(q.route))
		}
		if errType.Valid() {
			attrs = append(attrs, errType)
		}
		q.s.duration.Record(q.ctx, time.Since(q.start).Seconds(), metric.WithAttributes(attrs...))
	}
	if q.span == nil {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs, semconv.HTTPResponseStatusCode(status))
	if errType.Valid() {
		attrs = append(attrs, errType)
		q.span.SetStatus(codes.Error, "")
	}
	if res != nil {
		attrs = otelon.ResultAttrs(attrs, string(res.Outcome), res.Reason, res.Outcome == middleware.OutcomeVerified,
			res.Agent.ID, res.Agent.KeyID, res.Agent.UID)
	}
	q.span.SetAttributes(attrs...)
	q.span.End()
}

// methodAttr is http.request.method: the method if it is one the
// conventions know, else "_OTHER".
func methodAttr(m string) attribute.KeyValue {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return semconv.HTTPRequestMethodKey.String(m)
	}
	return semconv.HTTPRequestMethodKey.String("_OTHER")
}

// protocolVersion is network.protocol.version: "1.1", "2"…
func protocolVersion(r *http.Request) string {
	switch {
	case r.ProtoMajor == 2:
		return "2"
	case r.ProtoMajor == 3:
		return "3"
	case r.ProtoMinor == 0:
		return "1.0"
	}
	return "1.1"
}

// splitHost splits a Host value into host and port (0 if none).
func splitHost(hostport string) (string, int) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport, 0
	}
	port, _ := strconv.Atoi(p)
	return host, port
}
