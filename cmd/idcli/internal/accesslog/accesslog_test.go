package accesslog_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/accesslog"
)

// TestHandlerAsJSONHandler: the access log's handler writes every
// record byte for byte as slog.NewJSONHandler does, whether it formats
// the line itself (strings, integers, floats) or hands it over (other
// kinds, groups, floats with an exponent).
func TestHandlerAsJSONHandler(t *testing.T) {
	at := time.Date(2026, 11, 25, 16, 0, 0, 123456789, time.FixedZone("x", 3600))
	strs := []string{"", "plain", `q"uo\te`, "ctl\x00\x01\x1f\n\r\t", "bad\xffutf8\xc3", "é→🙂", "sep\u2028\u2029", "<&>"}
	var cases [][]slog.Attr
	for _, s := range strs {
		cases = append(cases, []slog.Attr{slog.String("k", s), slog.String(s+"key", "v")})
	}
	for _, f := range []float64{0, 0.001, 12.345, 1234567.891, 1e-6, 1e20, 1e21, 1e-7, -3.5, 123456789012345678} {
		cases = append(cases, []slog.Attr{slog.Float64("duration_ms", f)})
	}
	cases = append(cases,
		[]slog.Attr{slog.String("method", "GET"), slog.Int("status", 200), slog.Int64("neg", -7), slog.Float64("duration_ms", 0.25)},
		[]slog.Attr{slog.Bool("b", true)},
		[]slog.Attr{slog.Group("g", slog.String("a", "b"))},
		[]slog.Attr{slog.Any("err", io.EOF)},
		[]slog.Attr{{}, slog.String("after", "empty")},
		[]slog.Attr{slog.String("", "nokey")},
		[]slog.Attr{slog.Duration("d", time.Second)},
		[]slog.Attr{slog.String("a", "1"), slog.String("b", "2"), slog.String("c", "3"), slog.String("d", "4"), slog.String("e", "5"), slog.String("f", "6"), slog.Int("g", 7)},
	)
	for _, attrs := range cases {
		for _, tm := range []time.Time{at, {}} {
			var got, want bytes.Buffer
			r := slog.NewRecord(tm, slog.LevelInfo, "request \"x\"", 0)
			r.AddAttrs(attrs...)
			if err := accesslog.New(&got).Handle(context.Background(), r.Clone()); err != nil {
				t.Fatal(err)
			}
			slog.NewJSONHandler(&want, nil).Handle(context.Background(), r.Clone())
			if got.String() != want.String() {
				t.Errorf("attributes %v at %v:\n got %s\nwant %s", attrs, tm, got.String(), want.String())
			}
		}
	}
	h := accesslog.New(io.Discard)
	if h.Enabled(context.Background(), slog.LevelDebug) || !h.Enabled(context.Background(), slog.LevelInfo) {
		t.Error("Enabled: want info and above, as the JSON handler")
	}
}

// BenchmarkAccessLogHandler formats one access log line of a verified
// request with the access log's handler and, as the baseline,
// slog.NewJSONHandler (CPU per line; no lock needed).
func BenchmarkAccessLogHandler(b *testing.B) {
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "request", 0)
	r.AddAttrs(slog.String("method", "GET"), slog.String("host", "127.0.0.1:8080"), slog.String("path", "/x"),
		slog.Int("status", 200), slog.Float64("duration_ms", 0.412), slog.String("verdict", "verified"),
		slog.String("agent", "http://abcdefghijklmnop.localhost:40000"), slog.String("kid", "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U"))
	for _, bc := range []struct {
		name string
		h    slog.Handler
	}{{"json-baseline", slog.NewJSONHandler(io.Discard, nil)}, {"access", accesslog.New(io.Discard)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.h.Handle(context.Background(), r)
			}
		})
	}
}
