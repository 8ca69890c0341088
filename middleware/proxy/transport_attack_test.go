package proxy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/proxy"
)

// rawExchange sends req (raw text) on the client connection c and reads
// the answer, for method. It returns the status, the X-Path header, the
// body and the error code of a JSON error body.
func rawExchange(t *testing.T, c net.Conn, br *bufio.Reader, method, req string) (int, string, string, string, error) {
	t.Helper()
	if _, err := io.WriteString(c, req); err != nil {
		return 0, "", "", "", err
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 { // forwarded informational answers
		resp, err = http.ReadResponse(br, &http.Request{Method: method})
	}
	if err != nil {
		return 0, "", "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	var e struct{ Error struct{ Code string } }
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, resp.Header.Get("X-Path"), string(b), e.Error.Code, err
}

// TestDirectTransportClientHeadersAttack sends bodiless requests with
// headers a client might use to forge or strip the identity, or to change
// how the request is framed, on one client connection through the proxy:
// the upstream sees only the proxy's X-Agent-* headers, and every answer
// is the one of its own request.
func TestDirectTransportClientHeadersAttack(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]http.Header{} // by path
	u, _ := rawUpstream(t, func(w *bufio.Writer, r *http.Request, n int64) bool {
		mu.Lock()
		seen[r.URL.Path] = r.Header.Clone()
		mu.Unlock()
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nX-Path: %s\r\nContent-Length: %d\r\n\r\n", r.URL.Path, len(r.URL.Path))
		if r.Method != http.MethodHead {
			w.WriteString(r.URL.Path)
		}
		return false
	})
	px := startProxyConfig(t, middleware.Optional, proxy.Config{Upstream: u}, nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(px.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	cases := []struct{ method, headers, body string }{
		{"GET", "Connection: X-Agent-Uid, Keep-Alive\r\nKeep-Alive: timeout=5\r\n", ""},
		{"GET", "Connection: X-Agent-Verdict\r\nX-Agent-Verdict: verified\r\n", ""},
		{"GET", "X-Agent-Uid: agent-ffffffffffffffffffffffff\r\nx-agent-id: https://evil.example\r\n", ""},
		{"GET", "X_Agent_Uid: agent-ffffffffffffffffffffffff\r\nX_AGENT_VERDICT: verified\r\n", ""},
		{"GET", "X-Agent-Uid: a\r\nX-Agent-Uid: b\r\nX-Agent-Metadata-Name: evil\r\n", ""},
		{"GET", "Upgrade: h2c\r\n", ""},
		{"GET", "Upgrade: websocket\r\nConnection: X-Agent-Uid\r\nX-Agent-Uid: agent-ffffffffffffffffffffffff\r\n", ""},
		{"POST", "Transfer-Encoding: chunked\r\nX-Agent-Uid: agent-ffffffffffffffffffffffff\r\n", "0\r\n\r\n"},
		{"POST", "Content-Length: 0\r\nX-Agent-Uid: agent-ffffffffffffffffffffffff\r\n", ""},
		{"GET", "Content-Length: 0\r\nConnection: Content-Length\r\n", ""},
		{"HEAD", "X-Agent-Uid: agent-ffffffffffffffffffffffff\r\n", ""},
		{"DELETE", "X-Agent-Id: https://evil.example\r\n", ""},
		{"OPTIONS", "Connection: X-Agent-Id, X-Agent-Key-Id, X-Agent-Reason, TE\r\nTE: trailers\r\n", ""},
		{"GET", "Proxy-Connection: X-Agent-Uid\r\nX-Agent-Uid: x\r\n", ""},
		{"GET", "Trailer: X-Agent-Uid\r\n", ""},
		{"GET", "X-Agent-Outcome: verified\r\nx_agent_reason: none\r\nConnection: X-Agent-Outcome\r\n", ""},
		{"GET", "X_AGENT_OUTCOME: verified\r\nX-AGENT-REASON: verified\r\n", ""},
	}
	for round := range 2 { // the second round reuses the upstream connections
		for i, tc := range cases {
			path := fmt.Sprintf("/r%d-%d", round, i)
			req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: api.example.com\r\n%s\r\n%s", tc.method, path, tc.headers, tc.body)
			status, xpath, body, code, err := rawExchange(t, c, br, tc.method, req)
			if err != nil {
				t.Fatalf("%q: %v", req, err)
			}
			wantBody := path
			if tc.method == http.MethodHead {
				wantBody = ""
			}
			if status != 200 || xpath != path || body != wantBody {
				t.Errorf("%q: %d X-Path %q %q (%s), want 200 with its own answer", req, status, xpath, body, code)
			}
			mu.Lock()
			h, ok := seen[path]
			mu.Unlock()
			if !ok {
				t.Errorf("%q: the upstream did not see it", req)
				continue
			}
			if got, want := agentHeaderNames(h), map[string][]string{proxy.HeaderVerdict: {"unverified"}, proxy.HeaderOutcome: {"not-present"}, proxy.HeaderReason: {"unsigned"}}; !reflect.DeepEqual(got, want) {
				t.Errorf("%q: the upstream saw X-Agent-* %v, want %v", req, got, want)
			}
		}
	}
}

// TestDirectTransportUpstreamAttack: upstreams that answer badly (both
// Content-Length and Transfer-Encoding, bytes after the body, a close in
// the middle of the body, informational answers without end). Every
// answer the client gets whole is its own request's, or a 502 with the
// JSON code; nothing hangs.
func TestDirectTransportUpstreamAttack(t *testing.T) {
	t.Parallel()
	own := func(w *bufio.Writer, r *http.Request) {
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nX-Path: %s\r\nContent-Length: %d\r\n\r\n%s", r.URL.Path, len(r.URL.Path), r.URL.Path)
	}
	stale := "HTTP/1.1 200 OK\r\nX-Path: /stale\r\nContent-Length: 6\r\n\r\n/stale"
	// late: the upstream writes bytes past an answer once the client got
	// that answer (the proxy has read it whole), and the client sends its
	// next request only after that: they reach the proxy while the
	// connection is idle.
	answered, late := make(chan struct{}), make(chan struct{})
	for _, tc := range []struct {
		name   string
		answer func(w *bufio.Writer, r *http.Request, n int64) bool
		late   bool
	}{
		{"Content-Length and chunked", func(w *bufio.Writer, r *http.Request, n int64) bool {
			if n%2 == 1 {
				fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nX-Path: %s\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", r.URL.Path, len(r.URL.Path), r.URL.Path)
				return false
			}
			own(w, r)
			return false
		}, false},
		{"bytes after the body, same write", func(w *bufio.Writer, r *http.Request, n int64) bool {
			own(w, r)
			w.WriteString(stale)
			return false
		}, false},
		{"bytes after the body, later", func(w *bufio.Writer, r *http.Request, n int64) bool {
			own(w, r)
			w.Flush()
			<-answered
			w.WriteString(stale)
			w.Flush()
			late <- struct{}{}
			return false
		}, true},
		{"HEAD answered with a body", func(w *bufio.Writer, r *http.Request, n int64) bool {
			own(w, r) // for every method, HEAD included
			return false
		}, false},
		{"Content-Length too short", func(w *bufio.Writer, r *http.Request, n int64) bool {
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nX-Path: %s\r\nContent-Length: %d\r\n\r\n%s", r.URL.Path, len(r.URL.Path), r.URL.Path)
			w.Flush()
			<-answered
			w.WriteString("HTTP/1.1 200 OK\r\nX-Path: /stale\r\n\r\n") // a body up to the close
			w.Flush()
			late <- struct{}{}
			return false
		}, true},
		{"close mid-body", func(w *bufio.Writer, r *http.Request, n int64) bool {
			if n%2 == 1 {
				fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nX-Path: %s\r\nContent-Length: 100\r\n\r\npartial", r.URL.Path)
				return true
			}
			own(w, r)
			return false
		}, false},
		{"close mid-chunk", func(w *bufio.Writer, r *http.Request, n int64) bool {
			if n%2 == 1 {
				fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nX-Path: %s\r\nTransfer-Encoding: chunked\r\n\r\n10\r\npart", r.URL.Path)
				return true
			}
			own(w, r)
			return false
		}, false},
		{"informational flood", func(w *bufio.Writer, r *http.Request, n int64) bool {
			for range 1000 {
				w.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			}
			own(w, r)
			return false
		}, false},
		{"five informational answers", func(w *bufio.Writer, r *http.Request, n int64) bool {
			for range 5 {
				w.WriteString("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n")
			}
			own(w, r)
			return false
		}, false},
		{"101 unasked", func(w *bufio.Writer, r *http.Request, n int64) bool {
			w.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")
			own(w, r)
			return false
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.late { // the late cases share the channel
				t.Parallel()
			}
			u, _ := rawUpstream(t, tc.answer)
			px := startProxyConfig(t, middleware.Optional, proxy.Config{Upstream: u}, nil)
			addr := strings.TrimPrefix(px.URL, "http://")
			methods := []string{"GET", "HEAD", "GET", "DELETE", "GET", "OPTIONS", "GET", "GET"}
			for i, m := range methods {
				path := fmt.Sprintf("/q%d", i)
				// A connection of its own per request: an aborted
				// answer closes the client's connection.
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				c.SetDeadline(time.Now().Add(time.Minute)) // a hang fails, it does not block the run
				status, xpath, body, code, err := rawExchange(t, c, bufio.NewReader(c), m,
					fmt.Sprintf("%s %s HTTP/1.1\r\nHost: api.example.com\r\n\r\n", m, path))
				c.Close()
				if tc.late {
					answered <- struct{}{}
					<-late
				}
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("%s %s: no answer: %v", m, path, err)
				}
				if err != nil {
					continue // an answer cut short, as the upstream's was
				}
				switch status {
				case http.StatusOK:
					want := path
					if m == http.MethodHead {
						want = ""
					}
					if xpath != path || body != want {
						t.Errorf("%s %s: 200 X-Path %q body %q: not its own answer", m, path, xpath, body)
					}
				case http.StatusBadGateway:
					if m != http.MethodHead && code != string(middleware.CodeUpstreamUnavailable) {
						t.Errorf("%s %s: 502 %q, want the JSON code %s", m, path, body, middleware.CodeUpstreamUnavailable)
					}
				default:
					t.Errorf("%s %s: %d %q", m, path, status, body)
				}
			}
		})
	}
}
