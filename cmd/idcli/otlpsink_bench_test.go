//go:build linux

package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpSink is an OTLP/HTTP receiver in the benchmark's process: it
// accepts every export, counts the spans it is sent and discards the rest.
// Its CPU is this process's, not the measured child's.
type otlpSink struct {
	srv   *httptest.Server
	spans atomic.Int64
}

func startOTLPSink(b *testing.B) *otlpSink {
	b.Helper()
	s := &otlpSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var resp proto.Message
		switch r.URL.Path {
		case "/v1/traces":
			var req coltracepb.ExportTraceServiceRequest
			if proto.Unmarshal(body, &req) == nil {
				for _, rs := range req.ResourceSpans {
					for _, ss := range rs.ScopeSpans {
						s.spans.Add(int64(len(ss.Spans)))
					}
				}
			}
			resp = &coltracepb.ExportTraceServiceResponse{}
		case "/v1/metrics":
			resp = &colmetricpb.ExportMetricsServiceResponse{}
		default:
			http.NotFound(w, r)
			return
		}
		out, _ := proto.Marshal(resp)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	b.Cleanup(s.srv.Close)
	return s
}

// env is the environment of a child exporting to the sink: every span
// sampled (always_on), traces only unless metrics, the SDK's defaults
// otherwise (batch span processor, 5 s schedule delay).
func (s *otlpSink) env(metrics bool) []string {
	env := append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+s.srv.URL, "OTEL_TRACES_SAMPLER=always_on")
	if !metrics {
		env = append(env, "OTEL_METRICS_EXPORTER=none")
	}
	return env
}

// await waits until the sink holds at least want spans or the batch
// processor's schedule delay has passed twice with none arriving, and
// returns the count.
func (s *otlpSink) await(want int64) int64 {
	last, idle := s.spans.Load(), time.Now()
	for last < want && time.Since(idle) < 11*time.Second {
		time.Sleep(50 * time.Millisecond)
		if n := s.spans.Load(); n != last {
			last, idle = n, time.Now()
		}
	}
	return last
}
