package refserver_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/metrics"
	"github.com/agentid/agentid/refserver/replaypg"
	"github.com/agentid/agentid/signer"
)

// BenchmarkWhoamiLoopback drives /whoami over real loopback connections
// (64 keep-alive connections writing pre-serialized requests, signed before
// the timer, each with its own nonce) to profile the server's whole
// request path: net/http, routing, logging, verification, JSON.
// The postgres variant (with AGENTID_TEST_DATABASE_URL) keeps keys and
// nonces in PostgreSQL (replaypg), as --replay-store postgres does.
func BenchmarkWhoamiLoopback(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		benchWhoamiLoopback(b, newTestEnv(b, dbtest.Open(b, "sqlite::memory:")))
	})
	if os.Getenv(dbtest.EnvVar) == "" {
		return
	}
	b.Run("postgres", func(b *testing.B) {
		db := dbtest.Open(b, dbtest.PostgresURL(b))
		store, err := replaypg.New(replaypg.Config{DB: db})
		if err != nil {
			b.Fatal(err)
		}
		benchWhoamiLoopback(b, newTestEnvConfig(b, db, "", func(c *refserver.Config) {
			c.Replay = store
			c.Logger = nil
			c.Metrics = metrics.NewRegistry()
		}))
	})
}

func benchWhoamiLoopback(b *testing.B, e *testEnv) {
	key := testKey(95)
	uid := e.register(key)
	reqs := make([][]byte, b.N)
	for i := range reqs {
		h, err := signer.Headers("GET", e.base+"/whoami", key, signer.Options{SignatureAgent: e.origin(uid)})
		if err != nil {
			b.Fatal(err)
		}
		reqs[i] = fmt.Appendf(nil, "GET /whoami HTTP/1.1\r\nHost: %s\r\nSignature: %s\r\nSignature-Input: %s\r\nSignature-Agent: %s\r\n\r\n",
			e.host, h.Signature, h.SignatureInput, h.SignatureAgent)
	}
	addr := e.ts.Listener.Addr().String()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				failed.Store(err.Error())
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				i := next.Add(1) - 1
				if i >= int64(len(reqs)) {
					return
				}
				if _, err := c.Write(reqs[i]); err != nil {
					failed.Store(err.Error())
					return
				}
				status, err := readResponse(br)
				if err != nil || status != 200 {
					failed.Store(fmt.Sprintf("status %d, %v", status, err))
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
	if f := failed.Load(); f != nil {
		b.Fatal(f)
	}
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
