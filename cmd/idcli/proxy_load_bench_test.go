//go:build linux

package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

var proxyLoadDuration = flag.Duration("proxyload.duration", 5*time.Second, "how long BenchmarkProxyNginxLoad keeps the proxy at its maximum rate (the issue's figure is for 60s)")

// BenchmarkProxyNginxLoad runs `idcli proxy` (a child process, access log
// on, to a file) at its maximum rate in front of a static nginx upstream
// with nginx's stock keep-alive settings (keepalive_requests 1000,
// keepalive_timeout 75s), for -proxyload.duration (5 s by default; 60 s
// for the figure), and checks that no request failed. Uniquely
// signed requests over 64 keep-alive connections, signed before the
// measured phase: a 2 s calibration run sizes them to the duration
// (twice its rate).
//
// Reported: failed requests (the benchmark fails unless 0), the
// connections in TIME_WAIT afterwards (/proc/net/tcp and tcp6, state 06)
// with the upstream's port at either end (tw-upstream: the proxy's pool
// closing or losing connections, and nginx closing one after every
// keepalive_requests answers) and in all (tw-total; tw-total-before was
// there before the run), the rate, and the proxy's CPU per request next
// to one crypto/ed25519.Verify timed in the same run.
//
// Needs nginx (apt-get install nginx-light) and Linux. Run with
// -benchtime 1x:
//
//	go test ./cmd/idcli -run '^$' -bench ProxyNginxLoad -benchtime 1x -args -proxyload.duration=60s
func BenchmarkProxyNginxLoad(b *testing.B) {
	bin := idcliBinary(b)
	dir := b.TempDir()
	upstream := startStaticNginx(b, dir)
	srv := clitest.StartServer(b, clitest.ServerOptions{})
	key := signertest.Key(95)
	origin := srv.AgentOrigin(clitest.Register(b, nil, srv.URL, key))
	addr := "127.0.0.1:" + freePort(b)
	startChild(b, dir, "proxy", addr, bin, "proxy", "--listen", addr, "--upstream", "http://"+upstream,
		"--authority", addr, "--trust", "*.localhost:*", "--allow-http", "--allow-private")
	probe := listenerProbe(b, addr)
	_, upPort, _ := strings.Cut(upstream, ":")
	port, _ := strconv.Atoi(upPort)
	target := "http://" + addr + "/x"

	// sign signs n requests to the proxy, on every core.
	sign := func(n int) []signer.SignatureHeaders {
		hs := make([]signer.SignatureHeaders, n)
		var wg sync.WaitGroup
		var next atomic.Int64
		var failed atomic.Value
		for range runtime.GOMAXPROCS(0) {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
					h, err := signer.Headers(http.MethodGet, target, key, signer.Options{SignatureAgent: origin})
					if err != nil {
						failed.CompareAndSwap(nil, err)
						return
					}
					hs[i] = h
				}
			})
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		return hs
	}
	sustained(b, target, sign(500), 0) // key fetch, connections
	// Calibration: the rate, to sign enough for the duration.
	cal := sign(20000)
	r := sustained(b, target, cal, 2*time.Second)
	if r.failed > 0 {
		b.Fatalf("calibration: %d of %d requests failed (first: %v)", r.failed, r.done, r.firstErr)
	}
	rate := float64(r.done) / r.elapsed.Seconds()

	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		hs := sign(int(rate*proxyLoadDuration.Seconds()*2) + 1000) // the rate grows after the calibration
		twBefore, _ := timeWait(port)
		b.StartTimer()
		verify := ed25519VerifyCPU(5000)
		before, err := probe.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		r := sustained(b, target, hs, *proxyLoadDuration)
		use, err := probe.Since(before)
		if err != nil {
			b.Fatal(err)
		}
		tw, err := timeWait(port)
		if err != nil {
			b.Fatal(err)
		}
		if r.done == int64(len(hs)) {
			b.Logf("the signed requests ran out after %v of %v", r.elapsed.Round(time.Millisecond), *proxyLoadDuration)
		}
		perReq := float64(use.Server.Nanoseconds()) / 1e3 / float64(r.done)
		v := float64(verify.Nanoseconds()) / 1e3
		b.ReportMetric(float64(r.failed), "failed")
		b.ReportMetric(float64(tw.upstream), "tw-upstream")
		b.ReportMetric(float64(tw.total), "tw-total")
		b.ReportMetric(float64(twBefore.total), "tw-total-before")
		b.ReportMetric(float64(r.done)/r.elapsed.Seconds(), "req/s")
		b.ReportMetric(r.elapsed.Seconds(), "s")
		b.ReportMetric(perReq, "proxy-µs/req")
		b.ReportMetric(v, "ed25519-µs")
		b.ReportMetric(perReq-v, "beyond-verify-µs")
		if r.failed > 0 {
			b.Errorf("%d of %d requests failed (first: %v)", r.failed, r.done, r.firstErr)
		}
	}
}

// loadResult is what one sustained run did.
type loadResult struct {
	done, failed int64 // requests sent; those that failed or got no 200
	firstErr     error
	elapsed      time.Duration
}

// sustained sends one GET of url per entry of hs (with its signature
// headers, if any) over 64 keep-alive connections, as fast as they are
// answered, until they run out or, if d > 0, d has passed. Failures (an
// error or an answer other than 200) are counted, not fatal.
func sustained(b *testing.B, url string, hs []signer.SignatureHeaders, d time.Duration) loadResult {
	b.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var next, sent, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for range 64 {
		wg.Go(func() {
			for {
				if d > 0 && time.Now().After(deadline) {
					return
				}
				i := next.Add(1) - 1
				if i >= int64(len(hs)) {
					return
				}
				sent.Add(1)
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				if h := hs[i]; h.Signature != "" {
					req.Header["Signature"] = []string{h.Signature}
					req.Header["Signature-Input"] = []string{h.SignatureInput}
					req.Header["Signature-Agent"] = []string{h.SignatureAgent}
				}
				resp, err := c.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("%s: status %d", url, resp.StatusCode)
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	wg.Wait()
	r := loadResult{done: sent.Load(), failed: failed.Load(), elapsed: time.Since(start)}
	r.firstErr, _ = firstErr.Load().(error)
	return r
}

// startStaticNginx starts nginx answering every request with a short 200,
// with its stock keep-alive settings, on a free loopback port (its files
// in dir/nginx), and returns its host:port.
func startStaticNginx(b *testing.B, dir string) string {
	b.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/nginx"); err != nil {
			b.Skipf("nginx is not installed (apt-get install nginx-light): %v", err)
		}
	}
	dir = filepath.Join(dir, "nginx")
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	addr, _ := writeNginxConf(b, dir, `        location / {
            default_type text/plain;
            return 200 "ok\n";
        }`)
	startChild(b, dir, "nginx", addr, bin, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", filepath.Join(dir, "error.log"))
	return addr
}

// twCount is a count of connections in TIME_WAIT.
type twCount struct {
	upstream int // with port at either end
	total    int
}

// timeWait counts the connections in TIME_WAIT in /proc/net/tcp and tcp6,
// those with port at either end apart.
func timeWait(port int) (twCount, error) {
	var c twCount
	hexPort := fmt.Sprintf(":%04X", port)
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(name)
		if err != nil {
			return c, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != "06" {
				continue
			}
			c.total++
			if strings.HasSuffix(fields[1], hexPort) || strings.HasSuffix(fields[2], hexPort) {
				c.upstream++
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return c, err
		}
	}
	return c, nil
}
