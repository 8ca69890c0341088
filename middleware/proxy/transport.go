package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// directTransport carries the bodiless requests to a plain-http upstream
// on the calling goroutine: it writes the request and reads the response
// headers itself, where http.Transport hands every request to two
// goroutines of its own (a writer and a reader per connection) and back,
// which under load costs more CPU than the rest of the round trip.
// Everything else (a request with a body, an upgrade, another scheme or
// host) goes to fallback, which also sets the dial and idle timeouts.
//
// Its connections are kept in a pool of at most maxIdle idle ones, the
// most recently used first; one idle longer than fallback's
// IdleConnTimeout is closed. A connection goes back to the pool once the
// response body was read to its end and neither side asked to close it.
// A request that failed on a reused connection before any byte of the
// answer arrived (the upstream closed it while it was idle) is sent again
// on a new one if its method is idempotent, as http.Transport does.
type directTransport struct {
	host     string // the upstream URL's host, as requests name it
	addr     string // host:port to dial
	fallback *http.Transport
	dialer   net.Dialer
	maxIdle  int
	idleTTL  time.Duration
	// maxHeaderBytes bounds an answer's headers, as fallback's
	// MaxResponseHeaderBytes does.
	maxHeaderBytes int64

	mu    sync.Mutex
	idle  []*upstreamConn // oldest first
	sweep *time.Timer     // armed while idle is not empty
}

// upstreamConn is one connection to the upstream with its buffers.
type upstreamConn struct {
	c      net.Conn
	br     *bufio.Reader // reads c through limit
	bw     *bufio.Writer
	idleAt time.Time
	limit  int64       // bytes left to read for the answer's headers; < 0 while reading a body
	quiet  func() bool // nothing arrived on c (while it is idle)
}

// errHeadersTooLong is the error of an answer whose headers (informational
// answers included) exceed the limit.
var errHeadersTooLong = errors.New("proxy: the upstream's answer headers are too long")

// Read reads from the connection, within limit while headers are read.
func (pc *upstreamConn) Read(p []byte) (int, error) {
	if pc.limit < 0 {
		return pc.c.Read(p)
	}
	if pc.limit == 0 {
		return 0, errHeadersTooLong
	}
	if int64(len(p)) > pc.limit {
		p = p[:pc.limit]
	}
	n, err := pc.c.Read(p)
	pc.limit -= int64(n)
	return n, err
}

// maxInformational bounds the informational (1xx) answers read before
// the final one, as http.Transport does.
const maxInformational = 5

// newDirectTransport returns a directTransport to the plain-http upstream
// host (a URL's host, with or without a port) that sends what it does not
// handle to fallback.
func newDirectTransport(host string, fallback *http.Transport, maxIdle int) *directTransport {
	addr := host
	if _, _, err := net.SplitHostPort(host); err != nil {
		addr = net.JoinHostPort(strings.Trim(host, "[]"), "80")
	}
	idleTTL := fallback.IdleConnTimeout
	if idleTTL <= 0 {
		idleTTL = 90 * time.Second
	}
	maxHeader := fallback.MaxResponseHeaderBytes
	if maxHeader <= 0 {
		maxHeader = 10 << 20 // http.Transport's default
	}
	return &directTransport{
		host: host, addr: addr, fallback: fallback, maxIdle: maxIdle, idleTTL: idleTTL, maxHeaderBytes: maxHeader,
		dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
	}
}

// direct reports whether req goes on the direct path.
func (t *directTransport) direct(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.URL.Host != t.host {
		return false
	}
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	// An upgrade (WebSocket) needs http.Transport's switched connection.
	_, upgrade := req.Header["Upgrade"]
	return !upgrade
}

// RoundTrip implements http.RoundTripper.
func (t *directTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.direct(req) {
		return t.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	for fresh := false; ; fresh = true {
		var pc *upstreamConn
		var reused bool
		if !fresh { // after a reused connection failed, a new one
			pc, reused = t.get()
		}
		if pc == nil {
			var err error
			if pc, err = t.dial(ctx); err != nil {
				return nil, err
			}
		}
		resp, retry, err := t.roundTrip(ctx, pc, req, reused)
		if err == nil {
			return resp, nil
		}
		if !retry || ctx.Err() != nil {
			if cerr := ctx.Err(); cerr != nil {
				return nil, cerr
			}
			return nil, err
		}
	}
}

// roundTrip sends req on pc and reads the answer's headers. On failure
// pc is closed, and retry tells whether req may be sent again: pc was
// reused, no byte of an answer came and req's method is idempotent.
func (t *directTransport) roundTrip(ctx context.Context, pc *upstreamConn, req *http.Request, reused bool) (*http.Response, bool, error) {
	// The connection is closed if ctx ends first: a read or write blocked
	// on it returns.
	stop := context.AfterFunc(ctx, func() { pc.c.Close() })
	fail := func(err error, retry bool) (*http.Response, bool, error) {
		stop()
		pc.c.Close()
		return nil, retry, err
	}
	if err := req.Write(pc.bw); err != nil {
		return fail(err, reused && idempotent(req))
	}
	if err := pc.bw.Flush(); err != nil {
		return fail(err, reused && idempotent(req))
	}
	// The headers are read within the limit http.Transport sets, counted
	// from what the buffer holds past the previous answer (nothing, as
	// put checks).
	pc.limit = t.maxHeaderBytes
	if _, err := pc.br.Peek(1); err != nil {
		return fail(err, reused && idempotent(req))
	}
	trace := httptrace.ContextClientTrace(ctx)
	for informational := 0; ; informational++ {
		resp, err := http.ReadResponse(pc.br, req)
		if err != nil {
			return fail(err, false)
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			if informational == maxInformational {
				return fail(errors.New("proxy: too many informational answers from the upstream"), false)
			}
			if resp.StatusCode == http.StatusSwitchingProtocols {
				return fail(errors.New("proxy: the upstream switched protocols on a request that asked for no upgrade"), false)
			}
			// An informational answer (103 Early Hints): passed on to
			// the reverse proxy, which forwards it; the final one
			// follows.
			if trace != nil && trace.Got1xxResponse != nil {
				if err := trace.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
					return fail(err, false)
				}
			}
			continue
		}
		pc.limit = -1 // the body has no limit
		b := &directBody{t: t, pc: pc, stop: stop, keep: !resp.Close && !req.Close}
		if resp.Body == http.NoBody {
			b.finish(true)
			return resp, false, nil
		}
		b.rc = resp.Body
		resp.Body = b
		return resp, false, nil
	}
}

// idempotent reports whether req may be sent twice, as http.Transport
// judges it.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	if _, ok := req.Header["Idempotency-Key"]; ok {
		return true
	}
	_, ok := req.Header["X-Idempotency-Key"]
	return ok
}

// dial opens a new connection to the upstream.
func (t *directTransport) dial(ctx context.Context) (*upstreamConn, error) {
	c, err := t.dialer.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	pc := &upstreamConn{c: c, bw: bufio.NewWriter(c), limit: -1, quiet: quietProbe(c)}
	pc.br = bufio.NewReader(pc)
	return pc, nil
}

// get takes the most recently used idle connection, if any, closing the
// ones idle too long or on which something arrived while idle.
func (t *directTransport) get() (*upstreamConn, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for n := len(t.idle); n > 0; n = len(t.idle) {
		pc := t.idle[n-1]
		t.idle[n-1] = nil
		t.idle = t.idle[:n-1]
		// Bytes that came while it was idle would be read as the next
		// request's answer.
		if time.Since(pc.idleAt) < t.idleTTL && pc.quiet() {
			return pc, true
		}
		pc.c.Close()
	}
	return nil, false
}

// put returns pc to the pool, or closes it when the pool is full.
func (t *directTransport) put(pc *upstreamConn) {
	if pc.br.Buffered() > 0 { // bytes past the answer: not a connection to reuse
		pc.c.Close()
		return
	}
	pc.idleAt = time.Now()
	t.mu.Lock()
	if len(t.idle) >= t.maxIdle {
		t.mu.Unlock()
		pc.c.Close()
		return
	}
	t.idle = append(t.idle, pc)
	if t.sweep == nil {
		t.sweep = time.AfterFunc(t.idleTTL, t.closeExpired)
	}
	t.mu.Unlock()
}

// closeExpired closes the connections idle longer than idleTTL, and runs
// again later while some remain.
func (t *directTransport) closeExpired() {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for n < len(t.idle) && time.Since(t.idle[n].idleAt) >= t.idleTTL {
		t.idle[n].c.Close()
		n++
	}
	rest := copy(t.idle, t.idle[n:])
	clear(t.idle[rest:])
	t.idle = t.idle[:rest]
	if len(t.idle) == 0 {
		t.sweep = nil
		return
	}
	t.sweep = time.AfterFunc(t.idleTTL-time.Since(t.idle[0].idleAt), t.closeExpired)
}

// CloseIdleConnections closes the idle connections of both paths.
func (t *directTransport) CloseIdleConnections() {
	t.mu.Lock()
	for _, pc := range t.idle {
		pc.c.Close()
	}
	clear(t.idle)
	t.idle = t.idle[:0]
	t.mu.Unlock()
	t.fallback.CloseIdleConnections()
}

// directBody is the body of an answer on the direct path: read to its
// end, it returns the connection to the pool; closed before, it closes
// the connection.
type directBody struct {
	t    *directTransport
	pc   *upstreamConn
	rc   io.ReadCloser
	stop func() bool // unregisters the close on the request's end
	keep bool        // neither side asked to close the connection
	done atomic.Bool
	eof  atomic.Bool // the body was read to its end
}

func (b *directBody) Read(p []byte) (int, error) {
	if b.done.Load() {
		if b.eof.Load() {
			return 0, io.EOF
		}
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
		b.finish(true)
	} else if err != nil {
		b.finish(false)
	}
	return n, err
}

// Close closes the connection unless the body was read to its end. (The
// body's own Close would read the rest of it first.)
func (b *directBody) Close() error {
	b.finish(false)
	return nil
}

// finish ends the body once: the connection goes back to the pool when
// the answer was read whole, may be kept and the request did not end
// meanwhile; else it is closed.
func (b *directBody) finish(whole bool) {
	if b.done.Swap(true) {
		return
	}
	if b.stop() && whole && b.keep {
		b.t.put(b.pc)
		return
	}
	b.pc.c.Close()
}

// newTransport returns the transport New uses when Config.Transport is nil:
// http.DefaultTransport's dialer, timeouts and TLS settings, no proxy from
// the environment (the upstream is a service next door), and up to
// maxIdlePerHost idle connections kept per upstream host
// (DefaultMaxIdleConnsPerHost if maxIdlePerHost ≤ 0).
func newTransport(maxIdlePerHost int) *http.Transport {
	if maxIdlePerHost <= 0 {
		maxIdlePerHost = DefaultMaxIdleConnsPerHost
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.MaxIdleConnsPerHost = maxIdlePerHost
	if t.MaxIdleConns < maxIdlePerHost {
		t.MaxIdleConns = maxIdlePerHost
	}
	return t
}

// copyBuffers lends the reverse proxy its buffers for copying response
// bodies; without a pool it allocates (and clears) 32 KiB per request.
var copyBuffers = &bufferPool{}

// bufferPool is an httputil.BufferPool over a sync.Pool.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if buf, ok := b.p.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }
