package refserver_test

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware/metrics"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/replaypg"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/agentid/agentid/signer/signertest/benchtest"
)

// loopbackConns is how many keep-alive connections the loopback
// benchmarks keep busy.
const loopbackConns = 64

// loopbackBackends runs fn per store the server can run on, configured as
// `idcli server start` runs it: one request line per request (info level,
// text, here into io.Discard) and metrics on. "memory" keeps keys in an
// in-memory SQLite database and nonces in memory; "postgres" (with
// AGENTID_TEST_DATABASE_URL) keeps keys and nonces in PostgreSQL
// (--replay-store postgres).
func loopbackBackends(b *testing.B, fn func(b *testing.B, e *testEnv)) {
	production := func(c *refserver.Config) {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
		c.Metrics = metrics.NewRegistry()
	}
	b.Run("memory", func(b *testing.B) {
		fn(b, newTestEnvConfig(b, dbtest.Open(b, "sqlite::memory:"), "", production))
	})
	if os.Getenv(dbtest.EnvVar) == "" {
		return
	}
	b.Run("postgres", func(b *testing.B) {
		db := dbtest.Open(b, dbtest.PostgresURL(b))
		replay, err := replaypg.New(replaypg.Config{DB: db})
		if err != nil {
			b.Fatal(err)
		}
		fn(b, newTestEnvConfig(b, db, "", func(c *refserver.Config) {
			production(c)
			c.Replay = replay
		}))
	})
}

// BenchmarkWhoamiLoopback drives /whoami over real loopback connections
// (loopbackConns keep-alive connections, each sending its next request as
// soon as the previous answer is read; requests are signed before the
// timer, each with its own nonce) to profile the server's whole request
// path: net/http, routing, logging, verification, replay store, JSON.
func BenchmarkWhoamiLoopback(b *testing.B) {
	loopbackBackends(b, func(b *testing.B, e *testEnv) {
		reqs := signedWhoami(b, e, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		cpu := benchtest.ProcessCPU()
		rate, err := closedLoop(e, reqs)
		b.ReportMetric(rate, "req/s")
		// The process's CPU time per request (server and client, not the
		// database) varies less with the machine's other load than the rate.
		b.ReportMetric(float64((benchtest.ProcessCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/req")
		if err != nil {
			b.Fatal(err)
		}
	})
}

var openLoopRate = flag.Float64("openloop.rate", 0, "BenchmarkWhoamiOpenLoop's rate in requests per second (0: half the measured maximum)")

// BenchmarkWhoamiOpenLoop measures what a client sees at a fixed offered
// load: it finds the maximum rate with a closed loop (as
// BenchmarkWhoamiLoopback), then sends at half that rate (or at
// -openloop.rate) for 10 s (2 s with -short) on a fixed schedule and
// reports the latency percentiles, each measured from the request's
// scheduled send time (a stalled server cannot hide its queue), the
// achieved rate and the errors. Run it with -benchtime 1x: each run takes
// its fixed time whatever b.N is.
func BenchmarkWhoamiOpenLoop(b *testing.B) {
	loopbackBackends(b, func(b *testing.B, e *testEnv) {
		duration := 10 * time.Second
		if testing.Short() {
			duration = 2 * time.Second
		}
		max, err := closedLoop(e, signedWhoami(b, e, 30000))
		if err != nil {
			b.Fatal(err)
		}
		rate := max / 2
		if *openLoopRate > 0 {
			rate = *openLoopRate
		}
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			reqs := signedWhoami(b, e, int(rate*duration.Seconds()))
			b.StartTimer()
			res := openLoop(e, reqs, rate)
			b.ReportMetric(max, "max-req/s")
			b.ReportMetric(res.rate, "req/s")
			b.ReportMetric(res.percentile(0.50), "p50-ms")
			b.ReportMetric(res.percentile(0.99), "p99-ms")
			b.ReportMetric(res.percentile(0.999), "p99.9-ms")
			b.ReportMetric(float64(res.errors), "errors")
			if res.err != nil {
				b.Error(res.err)
			}
		}
	})
}

// signedWhoami registers an agent with e and returns n serialized GET
// /whoami requests signed by it, each with its own nonce.
func signedWhoami(b *testing.B, e *testEnv, n int) [][]byte {
	b.Helper()
	key := signertest.Key(95)
	uid := e.register(key)
	reqs := make([][]byte, n)
	for i := range reqs {
		h, err := signer.Headers("GET", e.base+"/whoami", key, signer.Options{SignatureAgent: e.origin(uid)})
		if err != nil {
			b.Fatal(err)
		}
		reqs[i] = fmt.Appendf(nil, "GET /whoami HTTP/1.1\r\nHost: %s\r\nSignature: %s\r\nSignature-Input: %s\r\nSignature-Agent: %s\r\n\r\n",
			e.host, h.Signature, h.SignatureInput, h.SignatureAgent)
	}
	return reqs
}

// closedLoop sends reqs over loopbackConns connections, each sending its
// next request when the previous answer is read, and returns the rate
// achieved. Any answer but 200 stops it with an error.
func closedLoop(e *testEnv, reqs [][]byte) (float64, error) {
	var next atomic.Int64
	var failed atomic.Value
	start := time.Now()
	runConns(e, func(c net.Conn, br *bufio.Reader) bool {
		i := next.Add(1) - 1
		if i >= int64(len(reqs)) {
			return false
		}
		if err := roundTrip(c, br, reqs[i]); err != nil {
			failed.Store(err)
			return false
		}
		return true
	}, &failed)
	rate := float64(len(reqs)) / time.Since(start).Seconds()
	if err, _ := failed.Load().(error); err != nil {
		return rate, err
	}
	return rate, nil
}

type openLoopResult struct {
	latencies []time.Duration // sorted; one per answered request
	rate      float64         // answers per second
	errors    int             // requests that failed or got an answer but 200
	err       error           // the first failure
}

// percentile returns the q quantile of the latencies in milliseconds.
func (r openLoopResult) percentile(q float64) float64 {
	if len(r.latencies) == 0 {
		return 0
	}
	i := min(int(q*float64(len(r.latencies))), len(r.latencies)-1)
	return float64(r.latencies[i]) / float64(time.Millisecond)
}

// openLoop sends request i of reqs at start + i/rate (by whichever of
// loopbackConns connections is free) and measures each latency from that
// scheduled time to the end of the answer.
func openLoop(e *testEnv, reqs [][]byte, rate float64) openLoopResult {
	lat := make([]time.Duration, len(reqs))
	for i := range lat {
		lat[i] = -1 // not answered
	}
	var next, errs atomic.Int64
	var failed atomic.Value
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now().Add(10 * time.Millisecond)
	runConns(e, func(c net.Conn, br *bufio.Reader) bool {
		i := next.Add(1) - 1
		if i >= int64(len(reqs)) {
			return false
		}
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		if err := roundTrip(c, br, reqs[i]); err != nil {
			errs.Add(1)
			failed.CompareAndSwap(nil, err)
			return false // the connection may be out of step
		}
		lat[i] = time.Since(at)
		return true
	}, &failed)
	elapsed := time.Since(start)
	res := openLoopResult{errors: int(errs.Load())}
	if n := next.Load(); n < int64(len(reqs)) {
		res.errors += len(reqs) - int(n) // never sent: every connection failed
	}
	res.err, _ = failed.Load().(error)
	for _, d := range lat {
		if d >= 0 {
			res.latencies = append(res.latencies, d)
		}
	}
	slices.Sort(res.latencies)
	res.rate = float64(len(res.latencies)) / elapsed.Seconds()
	return res
}

// runConns runs step on loopbackConns keep-alive connections to e's server
// until it returns false; a connection that cannot be dialled stores its
// error in failed.
func runConns(e *testEnv, step func(net.Conn, *bufio.Reader) bool, failed *atomic.Value) {
	addr := e.ts.Listener.Addr().String()
	var wg sync.WaitGroup
	for range loopbackConns {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				failed.Store(err)
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			for step(c, br) {
			}
		})
	}
	wg.Wait()
}

// roundTrip writes one serialized request and reads its answer, which
// must be 200.
func roundTrip(c net.Conn, br *bufio.Reader, req []byte) error {
	if _, err := c.Write(req); err != nil {
		return err
	}
	status, err := readResponse(br)
	if err == nil && status != 200 {
		err = fmt.Errorf("status %d", status)
	}
	return err
}

// readResponse reads one HTTP/1.1 response with a Content-Length body.
func readResponse(br *bufio.Reader) (int, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return 0, err
	}
	f := strings.Fields(line)
	if len(f) < 2 {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	status, _ := strconv.Atoi(f[1])
	n := 0
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return 0, err
		}
		if l == "\r\n" {
			break
		}
		if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "Content-Length") {
			n, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	_, err = io.CopyN(io.Discard, br, int64(n))
	return status, err
}
