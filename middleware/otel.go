package middleware

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentid/agentid/middleware/internal/otelon"
)

// scope is the instrumentation scope of the verifier's spans and metrics.
const scope = "github.com/agentid/agentid/middleware"

// instruments are the verifier's span and metric: one span
// "agentid.verify" per verification and the histogram
// agentid.verify.duration, by outcome and reason.
type instruments struct {
	tracer   otelon.Tracer
	duration metric.Float64Histogram
	// byCode holds the metric attributes of each code defined when the
	// verifier was built ("" for verified); read-only after New.
	byCode map[Code]metric.MeasurementOption
}

func newInstruments(tp trace.TracerProvider, mp metric.MeterProvider) instruments {
	in := instruments{tracer: otelon.New(tp, scope)}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	// An instrument error leaves a no-op instrument, which is what an
	// error would leave anyway.
	in.duration, _ = mp.Meter(scope).Float64Histogram("agentid.verify.duration",
		metric.WithUnit("s"), metric.WithDescription("Duration of request signature verifications."),
		metric.WithExplicitBucketBoundaries(0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
	in.byCode = map[Code]metric.MeasurementOption{"": metric.WithAttributeSet(attribute.NewSet(
		otelon.AttrOutcome.String(string(OutcomeVerified)), otelon.AttrReason.String(reasonVerified)))}
	for c := range statuses {
		in.byCode[c] = metricAttrs(c)
	}
	return in
}

// metricAttrs is the attribute set of a refusal with code c.
func metricAttrs(c Code) metric.MeasurementOption {
	e := Error{Code: c}
	return metric.WithAttributeSet(attribute.NewSet(otelon.AttrOutcome.String(string(e.Outcome())), otelon.AttrReason.String(c.Reason())))
}

// verifyObserved is verify with the span and the metric, when either
// records: the span is a child of the request's.
func (v *Verifier) verifyObserved(r *http.Request, a *Agent, s *Signed, keys KeySource, tracing, timing bool) *Error {
	ctx := r.Context()
	var span trace.Span
	if tracing {
		ctx, span = v.otel.tracer.Start(ctx, "agentid.verify", trace.WithSpanKind(trace.SpanKindInternal))
	}
	var start time.Time
	if timing {
		start = time.Now()
	}
	err := v.run(r, a, s, keys)
	if timing {
		code := Code("")
		if err != nil {
			code = err.Code
		}
		opt, ok := v.otel.byCode[code]
		if !ok {
			opt = metricAttrs(code)
		}
		v.otel.duration.Record(ctx, time.Since(start).Seconds(), opt)
	}
	if tracing {
		if err == nil {
			span.SetAttributes(otelon.ResultAttrs(make([]attribute.KeyValue, 0, 5),
				string(OutcomeVerified), reasonVerified, true, a.ID, a.KeyID, a.UID)...)
		} else {
			span.SetAttributes(otelon.ResultAttrs(make([]attribute.KeyValue, 0, 2),
				string(err.Outcome()), err.Code.Reason(), false, "", "", "")...)
			if err.Status() >= 500 {
				span.SetStatus(codes.Error, "")
			}
		}
		span.End()
	}
	return v.logRefusal(ctx, r, err)
}

// logRefusal logs err, if any, at debug level with the trace id of ctx's
// span, and returns it.
func (v *Verifier) logRefusal(ctx context.Context, r *http.Request, err *Error) *Error {
	if err == nil || !v.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
		return err
	}
	attrs := []slog.Attr{slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.String("outcome", string(err.Outcome())), slog.String("reason", err.Code.Reason()), slog.String("error", err.Error())}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	v.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "signature rejected", attrs...)
	return err
}
