package telemetry_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/telemetry"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/agentid/agentid/signer/signertest/benchtest"
)

// discardSpans is a span exporter that keeps nothing.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// BenchmarkTracedRequestCPU times one verified request through Start, the
// verifier's Check and End, with no provider ("none") and with the SDK
// sampling every span (the server span and the verifier's, exported
// synchronously to an exporter that discards them), in the same run,
// interleaved, in both orders (the geometric mean of the two orders'
// cpu-x ratios cancels the advantage of the side timed second).
// docs/benchmarks.md has the figures.
func BenchmarkTracedRequestCPU(b *testing.B) {
	key := signertest.Key(0x39)
	const origin = "https://agent-0123456789abcdef01234567.agentid.example"
	now := time.Unix(1767225600, 0)
	keys := middleware.NewStaticKeys()
	keys.Add(origin, key.Public)
	type path struct {
		tel *telemetry.Server
		v   *middleware.Verifier
	}
	newPath := func(b *testing.B, sampled bool) path {
		var tel telemetry.Config
		cfg := middleware.Config{Keys: keys, Authorities: []string{"api.example.com"}, Now: func() time.Time { return now }}
		if sampled {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
				sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(discardSpans{})))
			b.Cleanup(func() { tp.Shutdown(context.Background()) })
			tel.TracerProvider, cfg.TracerProvider = tp, tp
		}
		v, err := middleware.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return path{telemetry.New(tel), v}
	}
	serve := func(p path, r *http.Request) {
		r, req := p.tel.Start(r, "/v1/things")
		res := p.v.Check(r)
		if res.Outcome != middleware.OutcomeVerified {
			b.Fatalf("outcome %s: %v", res.Outcome, res.Err)
		}
		req.End(http.StatusOK, res)
	}
	sign := func(i, n int, side string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "http://api.example.com/v1/things", nil)
		if err := signer.Sign(r, key, signer.Options{SignatureAgent: origin, Now: func() time.Time { return now },
			Nonce: fmt.Sprintf("bench-%s-%d-%d", side, i, n)}); err != nil {
			b.Fatal(err)
		}
		return r
	}
	const block = 64
	for _, order := range []struct {
		name       string
		baseTraced bool
	}{{"none-then-sampled", false}, {"sampled-then-none", true}} {
		b.Run(order.name, func(b *testing.B) {
			base, meas := newPath(b, order.baseTraced), newPath(b, !order.baseTraced)
			rb, rm := make([]*http.Request, block), make([]*http.Request, block)
			baseName, measName := "none", "sampled"
			if order.baseTraced {
				baseName, measName = measName, baseName
			}
			benchtest.PairedPrepared(b, block, baseName, measName,
				func(start, end int) {
					for i := start; i < end; i++ {
						rb[i-start], rm[i-start] = sign(i, b.N, "b"), sign(i, b.N, "m")
					}
				},
				func(i int) { serve(base, rb[i%block]) },
				func(i int) { serve(meas, rm[i%block]) })
		})
	}
}
