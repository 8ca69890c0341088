package main

import (
	"context"
	"io"
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
