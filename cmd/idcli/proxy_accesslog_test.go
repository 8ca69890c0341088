package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// stalledWriter is a log sink that accepts nothing until release is
// closed (a full pipe, a stalled disk), then writes to out.
type stalledWriter struct {
	release chan struct{}
	out     io.Writer
}

func (w stalledWriter) Write(p []byte) (int, error) {
	<-w.release
	return w.out.Write(p)
}

// TestProxyAccessLogStalled checks that the access log is written off the
// request path: a proxy whose stdout accepts nothing still answers every
// request, and the lines are written out once stdout accepts them again
// (at the latest when the proxy stops).
func TestProxyAccessLogStalled(t *testing.T) {
	t.Parallel()
	up := newEchoUpstream(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	args := []string{"proxy", "--listen", listen, "--authority", listen, "--upstream", up.URL, "--mode", "optional", "--trust", "*.agentid.example"}
	ctx, cancel := context.WithCancel(context.Background())
	b := &bgCLI{args: args, stdout: &syncBuffer{}, stderr: &syncBuffer{}, cancel: cancel, done: make(chan struct{})}
	release := make(chan struct{})
	released := false
	env := &cliEnv{
		Stdin:  strings.NewReader(""),
		Stdout: stalledWriter{release: release, out: b.stdout},
		Stderr: b.stderr,
		Getenv: func(string) string { return "" },
		Dir:    t.TempDir(),
	}
	go func() {
		defer close(b.done)
		b.err = run(ctx, args, env)
	}()
	t.Cleanup(func() {
		if !released {
			close(release)
		}
		b.stop()
	})
	base := waitForStderr(t, b, proxyBanner)

	client := &http.Client{Timeout: 5 * time.Second}
	const n = 3
	for range n {
		resp, err := client.Get(base + "/stalled")
		if err != nil {
			t.Fatalf("GET /stalled with stdout stalled: %v (the access log is written on the request path)", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /stalled: %d, want 200", resp.StatusCode)
		}
	}

	close(release)
	released = true
	if err := b.stop(); err != nil {
		t.Fatalf("idcli proxy: exit: %v\nstderr:\n%s", err, b.stderr)
	}
	if got := len(accessLog(t, b.stdout.String())["/stalled"]); got != n {
		t.Errorf("%d access-log lines for /stalled after stop, want %d:\n%s", got, n, b.stdout)
	}
}

// TestAccessLogHandlerAsJSONHandler: the access log's handler writes every
// record byte for byte as slog.NewJSONHandler does, whether it formats
// the line itself (strings, integers, floats) or hands it over (other
// kinds, groups, floats with an exponent).
func TestAccessLogHandlerAsJSONHandler(t *testing.T) {
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
			if err := newAccessLogHandler(&got).Handle(context.Background(), r.Clone()); err != nil {
				t.Fatal(err)
			}
			slog.NewJSONHandler(&want, nil).Handle(context.Background(), r.Clone())
			if got.String() != want.String() {
				t.Errorf("attributes %v at %v:\n got %s\nwant %s", attrs, tm, got.String(), want.String())
			}
		}
	}
	h := newAccessLogHandler(io.Discard)
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
	}{{"json-baseline", slog.NewJSONHandler(io.Discard, nil)}, {"access", newAccessLogHandler(io.Discard)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.h.Handle(context.Background(), r)
			}
		})
	}
}
