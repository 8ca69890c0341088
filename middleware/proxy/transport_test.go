package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/proxy"
)

// rawUpstream serves HTTP/1.1 by hand on a listener: answer writes the
// answer to the request number n (from 1, over all connections) and
// reports whether to close the connection afterwards (without telling the
// client). It returns the upstream's URL and the count of accepted
// connections.
func rawUpstream(t *testing.T, answer func(w *bufio.Writer, r *http.Request, n int64) (closeAfter bool)) (*url.URL, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted, served atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				br, bw := bufio.NewReader(c), bufio.NewWriter(c)
				for {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, r.Body)
					closeAfter := answer(bw, r, served.Add(1))
					if bw.Flush() != nil || closeAfter {
						return
					}
				}
			}()
		}
	}()
	return mustURL("http://" + ln.Addr().String()), &accepted
}

// get sends an unsigned GET through the proxy (optional mode) and returns
// the status and body.
func get(t *testing.T, client *http.Client, px string) (int, string) {
	t.Helper()
	resp, err := client.Get(px + "/x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// getOK sends n unsigned GETs, one after the other over one client's
// keep-alive connections, through a proxy (optional mode) in front of u;
// every one must answer 200 "ok".
func getOK(t *testing.T, u *url.URL, n int) {
	t.Helper()
	px := startProxyConfig(t, middleware.Optional, proxy.Config{Upstream: u}, nil)
	client := &http.Client{Transport: &http.Transport{}}
	for i := range n {
		if status, body := get(t, client, px.URL); status != http.StatusOK || body != "ok" {
			t.Fatalf("request %d: %d %q, want 200 ok", i, status, body)
		}
	}
}

// TestUpstreamClosesIdleConnections: an upstream that closes each
// connection after one answer without saying so (as one does when its
// keep-alive timeout strikes while the connection is idle in the
// proxy's pool): every request still succeeds, sent again on a new
// connection when the reused one turns out closed.
func TestUpstreamClosesIdleConnections(t *testing.T) {
	t.Parallel()
	u, accepted := rawUpstream(t, func(w *bufio.Writer, r *http.Request, n int64) bool {
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	const n = 20
	getOK(t, u, n)
	if got := accepted.Load(); got != n {
		t.Errorf("the upstream accepted %d connections for %d requests, want one each", got, n)
	}
}

// TestUpstreamConnectionClose: an upstream that asks to close every
// third connection (Connection: close, as nginx does after
// keepalive_requests) gets a new connection for the next request and
// every request succeeds; the others are reused.
func TestUpstreamConnectionClose(t *testing.T) {
	t.Parallel()
	u, accepted := rawUpstream(t, func(w *bufio.Writer, r *http.Request, n int64) bool {
		if n%3 == 0 {
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
			return true
		}
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return false
	})
	const n = 30
	getOK(t, u, n)
	if got := accepted.Load(); got != n/3 {
		t.Errorf("the upstream accepted %d connections for %d requests closing every third, want %d", got, n, n/3)
	}
}

// TestUpstreamChunkedAndEarlyHints: a chunked answer with a trailer,
// after a 103 Early Hints, reaches the client whole (the 103 too), and
// the connection is reused for the next request.
func TestUpstreamChunkedAndEarlyHints(t *testing.T) {
	t.Parallel()
	u, accepted := rawUpstream(t, func(w *bufio.Writer, r *http.Request, n int64) bool {
		fmt.Fprintf(w, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nX-Sum: 5\r\n\r\n")
		return false
	})
	px := startProxyConfig(t, middleware.Optional, proxy.Config{Upstream: u}, nil)
	client := &http.Client{Transport: &http.Transport{}}
	for i := range 3 {
		var hints []string
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			hints = append(hints, fmt.Sprint(code, " ", h.Get("Link")))
			return nil
		}}
		r, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodGet, px.URL+"/x", nil)
		resp, err := client.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "abcde" || resp.Trailer.Get("X-Sum") != "5" {
			t.Errorf("request %d: %d %q trailer %v, want 200 abcde with X-Sum: 5", i, resp.StatusCode, b, resp.Trailer)
		}
		if len(hints) != 1 || hints[0] != "103 </style.css>; rel=preload" {
			t.Errorf("request %d: informational answers %q, want the 103 with its Link", i, hints)
		}
	}
	if got := accepted.Load(); got != 1 {
		t.Errorf("the upstream accepted %d connections, want 1", got)
	}
}

// TestUpstreamBodyLeftUnread: a client that goes away in the middle of a
// long answer makes the proxy drop that upstream connection (it cannot be
// reused with the rest of the answer unread), and the next request gets
// another one.
func TestUpstreamBodyLeftUnread(t *testing.T) {
	t.Parallel()
	var accepted atomic.Int64
	release := make(chan struct{})
	var once sync.Once
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/long" {
			w.Write([]byte(strings.Repeat("x", 1<<10)))
			w.(http.Flusher).Flush()
			select { // until the client is gone
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, "ok")
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}
	up.Start()
	t.Cleanup(func() { once.Do(func() { close(release) }); up.Close() })
	px := startProxyConfig(t, middleware.Optional, proxy.Config{Upstream: mustURL(up.URL)}, nil)
	client := &http.Client{Transport: &http.Transport{}}
	if status, body := get(t, client, px.URL); status != 200 || body != "ok" {
		t.Fatalf("first request: %d %q", status, body)
	}
	resp, err := client.Get(px.URL + "/long")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1<<10)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // mid-answer: the client's connection closes
	client.CloseIdleConnections()
	for i := range 3 {
		if status, body := get(t, client, px.URL); status != 200 || body != "ok" {
			t.Fatalf("request %d after the abandoned one: %d %q", i, status, body)
		}
	}
	// The first connection went to the long answer, whose client left;
	// the next requests needed a new one, then reused it.
	if got := accepted.Load(); got != 2 {
		t.Errorf("the upstream accepted %d connections, want 2", got)
	}
}

// TestUpstreamUnboundedAnswers: an upstream whose answer headers never end
// (more than http.Transport's 10 MiB), or that sends informational
// answers without end, gets the client a 502, not a proxy that reads on.
func TestUpstreamUnboundedAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer string
	}{
		{"long headers", "HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("a", 11<<20) + "\r\nContent-Length: 2\r\n\r\nok"},
		{"informational answers", strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", 6) + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
	} {
		u, _ := rawUpstream(t, func(w *bufio.Writer, r *http.Request, n int64) bool {
			w.WriteString(tc.answer)
			return true
		})
		px := startProxyConfig(t, middleware.Optional, proxy.Config{Upstream: u}, nil)
		if status, body := get(t, &http.Client{Transport: &http.Transport{}}, px.URL); status != http.StatusBadGateway {
			t.Errorf("%s: %d %q, want 502", tc.name, status, body)
		}
	}
}

// TestUpstreamUpgrade: a bodiless request asking for an upgrade (a
// WebSocket, say) still gets the upstream's switched connection, both
// ways.
func TestUpstreamUpgrade(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			io.WriteString(w, "ok")
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		io.WriteString(c, "echo "+line)
	}))
	t.Cleanup(up.Close)
	px := startProxyConfig(t, middleware.Optional, proxy.Config{Upstream: mustURL(up.URL)}, nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(px.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: api.example.com\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %d, want 101", resp.StatusCode)
	}
	io.WriteString(c, "ping\n")
	if got, err := br.ReadString('\n'); err != nil || got != "echo ping\n" {
		t.Errorf("over the upgraded connection: %q %v, want \"echo ping\\n\"", got, err)
	}
}
