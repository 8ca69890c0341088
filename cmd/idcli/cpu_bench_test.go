//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/bench"
	"github.com/agentid/agentid/cmd/idcli/internal/bench/proccpu"
	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/agentid/agentid/signer/signertest/benchtest"
)

var cpuBenchRequests = flag.Int("cpubench.requests", 20000, "requests per run of BenchmarkWhoamiServerCPU (vestauth gets a fifth of them)")

var cpuBenchConns = flag.Int("cpubench.conns", 64, "keep-alive connections BenchmarkWhoamiServerCPU keeps busy")

var cpuBenchOtel = flag.Bool("cpubench.otel", false, "BenchmarkProxyServerCPU and BenchmarkWhoamiServerCPU: also run the same binary exporting OpenTelemetry over OTLP/HTTP (every request sampled) to a sink in this process, interleaved with the untraced one")

var cpuBenchMemory = flag.Bool("cpubench.memory", false, "BenchmarkWhoamiServerCPU: also run the same server with nonces in its memory (--replay-store memory), to show what the shared replay store costs")

// BenchmarkWhoamiServerCPU measures the CPU a /whoami request costs the
// reference server as `idcli server start` runs it (a child process, one
// request line per request logged to a file, nonces in PostgreSQL) and
// PostgreSQL, next to one crypto/ed25519.Verify timed in the same run.
//
// The server runs as a child process so that its CPU (utime+stime from
// /proc, the same probe as `idcli bench`) holds nothing of the load
// generator, which runs in this process: cpubench.requests uniquely signed
// requests (signed before the measured phase) over 64 keep-alive
// connections (-cpubench.conns), as `idcli bench` sends by default. (Fewer connections mean
// smaller replay batches, so more PostgreSQL commits per request.) The database's share is that of the PostgreSQL backends
// serving the server's connections plus PostgreSQL's background
// processes. The baseline is the CPU time of this benchmark's own OS
// thread over a loop of ed25519.Verify, while the server is idle.
//
// The floor: the same load, in the same iteration, against
// testdata/httpfloor, a net/http server configured as ours that answers
// every request with a fixed body and does nothing else
// (http-floor-µs/req). What the reference server spends beyond it
// (beyond-floor-µs/req) is ours: verification, the replay store, the log.
//
// beyond-floor-x-ed25519 is the target figure: the server's and
// PostgreSQL's CPU beyond the floor, in crypto/ed25519.Verify calls.
// backend-ed25519-µs is one verification by the signer package's own
// Ed25519 backend (the one the server uses, with the key's precomputed
// table), timed like the standard library's, so that a run shows how much
// of the figure the signature check alone takes. With -cpubench.memory the
// same binary also serves the same load with its nonces in memory
// (mem-server-µs/req, mem-beyond-floor-x-ed25519): the difference is what
// the replay store shared through PostgreSQL costs, server and database.
//
// With AGENTID_CPUBENCH_BASELINE naming another idcli binary (an older
// build, say), the same load runs against that binary's server too, on
// its own schema, interleaved with this one's in every iteration, for a
// before/after in one run (base-server-µs/req, base-pg-µs/req).
//
// With -cpubench.otel the same binary also serves the same load exporting
// traces over OTLP/HTTP to a sink in this process, every request sampled,
// on its own schema, before this one's load in odd iterations and after it
// in even ones: traced-server-µs/req, traced-x-untraced (the server's CPU
// over the untraced server's) and traced-total-x-untraced (with
// PostgreSQL's). The export of the last batch may fall after the measure;
// the sink's CPU is this process's and is not counted.
//
// With AGENTID_INTEROP_NODE_MODULES (vestauth 0.21.1, see
// testdata/interop) the same load, measured the same way, also runs
// against vestauth's own server on its own PostgreSQL database.
//
// Needs AGENTID_TEST_DATABASE_URL and Linux. Run with -benchtime 1x:
// every iteration sends cpubench.requests whatever b.N is.
//
//	go test -run '^$' -bench WhoamiServerCPU -benchtime 1x -count 3 ./cmd/idcli
func BenchmarkWhoamiServerCPU(b *testing.B) {
	bin := idcliBinary(b)
	dir := b.TempDir()
	agentidURL := startAgentid(b, bin, dir, "agentid", "postgres")
	var baseURL, memURL string
	if base := os.Getenv("AGENTID_CPUBENCH_BASELINE"); base != "" {
		baseURL = startAgentid(b, base, dir, "baseline", "postgres")
	}
	if *cpuBenchMemory {
		memURL = startAgentid(b, bin, dir, "memory", "memory")
	}
	var tracedURL string
	var tracedSink *otlpSink
	if *cpuBenchOtel {
		tracedSink = startOTLPSink(b)
		tracedURL = startAgentidEnv(b, tracedSink.env(false), bin, dir, "traced", "postgres")
	}

	var vestauthURL string
	var vestauthCreds *agent.Credentials
	if modules := os.Getenv("AGENTID_INTEROP_NODE_MODULES"); modules != "" {
		vestauthURL, vestauthCreds = startVestauth(b, bin, modules, dir)
	}

	floorURL, floorCreds := startHTTPFloor(b, dir)

	n := *cpuBenchRequests
	if testing.Short() {
		n /= 4
	}
	// Warm up: connections to the database, the key cache, the JIT.
	cpuLoad(b, agentidURL, nil, false, 500)
	cpuLoad(b, floorURL, floorCreds, false, 500)
	if baseURL != "" {
		cpuLoad(b, baseURL, nil, false, 500)
	}
	if memURL != "" {
		cpuLoad(b, memURL, nil, false, 500)
	}
	if tracedURL != "" {
		cpuLoad(b, tracedURL, nil, false, 500)
		tracedSink.await(2 * 500) // so that no warm-up span is exported in a measure
	}
	if vestauthCreds != nil {
		cpuLoad(b, vestauthURL, vestauthCreds, true, 200)
	}

	b.ResetTimer()
	// tracedLoad sends the load to the traced server and reports the
	// spans its sink received per request.
	tracedLoad := func() bench.TargetReport {
		spans := tracedSink.spans.Load()
		tt := cpuLoad(b, tracedURL, nil, false, n)
		got := tracedSink.await(spans+2*int64(n)) - spans
		b.ReportMetric(float64(got)/float64(n), "traced-spans/req")
		return tt
	}
	for i := range b.N {
		verify := ed25519VerifyCPU(5000)
		verifyUS := float64(verify.Nanoseconds()) / 1e3
		b.ReportMetric(float64(backendVerifyCPU(5000).Nanoseconds())/1e3, "backend-ed25519-µs")
		// The traced server's load goes before this one's in odd
		// iterations, after it in even ones.
		var tt bench.TargetReport
		if tracedURL != "" && i%2 == 1 {
			tt = tracedLoad()
		}
		t := cpuLoad(b, agentidURL, nil, false, n)
		if tracedURL != "" {
			if i%2 == 0 {
				tt = tracedLoad()
			}
			b.ReportMetric(tt.CPU.ServerUS, "traced-server-µs/req")
			b.ReportMetric(tt.CPU.DatabaseUS, "traced-pg-µs/req")
			b.ReportMetric(tt.CPU.ServerUS/t.CPU.ServerUS, "traced-x-untraced")
			b.ReportMetric((tt.CPU.ServerUS+tt.CPU.DatabaseUS)/(t.CPU.ServerUS+t.CPU.DatabaseUS), "traced-total-x-untraced")
		}
		total := t.CPU.ServerUS + t.CPU.DatabaseUS
		b.ReportMetric(verifyUS, "ed25519-µs")
		b.ReportMetric(t.CPU.ServerUS, "server-µs/req")
		b.ReportMetric(t.CPU.DatabaseUS, "pg-µs/req")
		b.ReportMetric(t.CPU.DatabaseUS-t.CPU.DatabaseBackgroundUS, "pg-backend-µs/req")
		b.ReportMetric(total/(float64(verify.Nanoseconds())/1e3), "x-ed25519")
		b.ReportMetric(t.CPU.ServerUS/(float64(verify.Nanoseconds())/1e3), "server-x-ed25519")
		b.ReportMetric(t.RPS, "req/s")
		floor := cpuLoad(b, floorURL, floorCreds, false, n)
		b.ReportMetric(floor.CPU.ServerUS, "http-floor-µs/req")
		b.ReportMetric(t.CPU.ServerUS-floor.CPU.ServerUS, "beyond-floor-µs/req")
		b.ReportMetric((total-floor.CPU.ServerUS)/verifyUS, "beyond-floor-x-ed25519")
		if memURL != "" {
			m := cpuLoad(b, memURL, nil, false, n)
			b.ReportMetric(m.CPU.ServerUS, "mem-server-µs/req")
			b.ReportMetric((m.CPU.ServerUS+m.CPU.DatabaseUS-floor.CPU.ServerUS)/verifyUS, "mem-beyond-floor-x-ed25519")
		}
		if baseURL != "" {
			bt := cpuLoad(b, baseURL, nil, false, n)
			b.ReportMetric(bt.CPU.ServerUS, "base-server-µs/req")
			b.ReportMetric(bt.CPU.DatabaseUS, "base-pg-µs/req")
		}
		if vestauthCreds != nil {
			v := cpuLoad(b, vestauthURL, vestauthCreds, true, max(n/5, 1000))
			vtotal := v.CPU.ServerUS + v.CPU.DatabaseUS
			b.ReportMetric(vtotal, "vestauth-µs/req")
			b.ReportMetric(vtotal/total, "vestauth-x")
		}
	}
}

// cpuLoad sends n presigned /whoami requests to base (the agent of creds,
// or a bench agent; legacy: in the pre-protocol-01 shape, which vestauth
// 0.21.1 needs) and returns the target's report, which must hold the
// server's CPU and only 200 answers.
func cpuLoad(b *testing.B, base string, creds *agent.Credentials, legacy bool, n int) bench.TargetReport {
	b.Helper()
	u, _ := url.Parse(base)
	rep, err := bench.Run(context.Background(), bench.Config{
		URL: base, Connect: "127.0.0.1:" + u.Port(), Requests: int64(n), Concurrency: *cpuBenchConns,
		Targets: []string{bench.Whoami}, Timeout: 30 * time.Second, Presign: n, Credentials: creds,
		Legacy: legacy,
	})
	if err != nil {
		b.Fatal(err)
	}
	t := rep.Targets[0]
	if t.CPU == nil {
		b.Fatalf("%s: server CPU not measured: %s", base, rep.ServerCPU)
	}
	if t.Status["200"] != n {
		b.Fatalf("%s: statuses %v (first error %q), want %d × 200", base, t.Status, t.FirstError, n)
	}
	return t
}

// startHTTPFloor builds and starts testdata/httpfloor (a net/http server
// that answers every request with a fixed /whoami-sized body and does no
// other work) and returns its URL and the credentials the load signs with
// (a key of our own: nothing verifies them there, but every request carries
// the same signature headers as those sent to the reference server).
func startHTTPFloor(b *testing.B, dir string) (string, *agent.Credentials) {
	b.Helper()
	bin := filepath.Join(dir, "httpfloor")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/httpfloor").CombinedOutput(); err != nil {
		b.Fatalf("go build ./testdata/httpfloor: %v\n%s", err, out)
	}
	port := freePort(b)
	startChild(b, dir, "httpfloor", "127.0.0.1:"+port, bin, "127.0.0.1:"+port)
	base := "http://localhost:" + port
	return base, &agent.Credentials{UID: "agent-0123456789abcdef01234567", Key: signertest.Key(96), Hostname: base}
}

// startAgentid migrates a fresh PostgreSQL schema with bin and starts bin's
// server on it (nonces in replayStore, postgres or memory; registration
// unlimited; request lines logged to dir/<label>.log) and returns its URL.
func startAgentid(b *testing.B, bin, dir, label, replayStore string) string {
	b.Helper()
	return startAgentidEnv(b, nil, bin, dir, label, replayStore)
}

// startAgentidEnv is startAgentid with env as the server's environment
// (nil: this process's).
func startAgentidEnv(b *testing.B, env []string, bin, dir, label, replayStore string) string {
	b.Helper()
	dbURL := dbtest.PostgresURL(b)
	if out, err := exec.Command(bin, "server", "db:migrate", "--database-url", dbURL).CombinedOutput(); err != nil {
		b.Fatalf("%s db:migrate: %v\n%s", label, err, out)
	}
	port := freePort(b)
	startChildEnv(b, env, dir, label, "127.0.0.1:"+port, bin, "server", "start", "--port", port, "--bind", "127.0.0.1",
		"--hostname", "http://localhost:"+port, "--database-url", dbURL, "--replay-store", replayStore,
		"--rate-limit", "off")
	return "http://localhost:" + port
}

// ed25519VerifyCPU returns the CPU time of one crypto/ed25519.Verify of a
// message the size of a /whoami signature base, measured on this
// goroutine's OS thread over n verifications.
func ed25519VerifyCPU(n int) time.Duration {
	key := signertest.Key(93)
	msg := bytes.Repeat([]byte("x"), 250)
	sig := ed25519.Sign(key.Key, msg)
	pub := key.Key.Public().(ed25519.PublicKey)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := benchtest.ThreadCPU()
	for range n {
		if !ed25519.Verify(pub, msg, sig) {
			panic("ed25519: valid signature refused")
		}
	}
	return (benchtest.ThreadCPU() - start) / time.Duration(n)
}

// backendVerifyCPU returns the CPU time of one signature check by
// signer.PublicKey.Verify (the server's Ed25519 backend, the key expanded
// as the server's key source holds it), measured as ed25519VerifyCPU
// measures crypto/ed25519.Verify.
func backendVerifyCPU(n int) time.Duration {
	key := signertest.Key(93)
	msg := bytes.Repeat([]byte("x"), 250)
	sig := ed25519.Sign(key.Key, msg)
	pub := key.Public
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := benchtest.ThreadCPU()
	for range n {
		if pub.Verify("", msg, sig) != nil {
			panic("signer: valid signature refused")
		}
	}
	return (benchtest.ThreadCPU() - start) / time.Duration(n)
}

// startChild starts name (args…) in dir in its own process group, logging
// to dir/<label>.log, waits until http://<addr>/ answers and stops the
// group when the benchmark ends.
func startChild(b *testing.B, dir, label, addr, name string, args ...string) {
	b.Helper()
	startChildEnv(b, nil, dir, label, addr, name, args...)
}

// startChildEnv is startChild with env as the child's environment (nil:
// this process's).
func startChildEnv(b *testing.B, env []string, dir, label, addr, name string, args ...string) {
	b.Helper()
	log, err := os.Create(filepath.Join(dir, label+".log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		log.Close()
	})
	for deadline := time.Now().Add(60 * time.Second); ; {
		resp, err := http.Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(log.Name())
			b.Fatalf("%s: nothing answers at %s: %v\n%s", label, addr, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// listenerProbe returns the CPU probe of the process of this host that
// listens on addr (host:port), as bench finds a server's.
func listenerProbe(b *testing.B, addr string) *proccpu.Probe {
	b.Helper()
	_, port, _ := strings.Cut(addr, ":")
	p, err := strconv.Atoi(port)
	if err != nil {
		b.Fatalf("%s: %v", addr, err)
	}
	probe, err := proccpu.Listening(p)
	if err != nil {
		b.Fatal(err)
	}
	return probe
}

// startVestauth starts vestauth's own server (from modules, the
// installation of testdata/interop/install.sh) on a scratch PostgreSQL
// database dropped at the end, registers an agent with its CLI and returns
// the server's URL and the agent.
func startVestauth(b *testing.B, bin, modules, dir string) (string, *agent.Credentials) {
	b.Helper()
	peers := filepath.Dir(modules)
	u, err := url.Parse(dbtest.PostgresBaseURL(b))
	if err != nil {
		b.Fatal(err)
	}
	u.Path = "/vestauth_cpubench_" + dbtest.RandomHex(6)
	u.RawQuery = ""
	vdb := u.String()
	run := func(name string, args ...string) {
		b.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = peers
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run("npx", "--no-install", "vestauth", "server", "db:create", "--database-url", vdb)
	b.Cleanup(func() { exec.Command(bin, "server", "db:drop", "--database-url", vdb).Run() })
	run("npx", "--no-install", "vestauth", "server", "db:migrate", "--database-url", vdb)
	port := freePort(b)
	base := "http://localhost:" + port
	startChild(b, peers, "vestauth", "127.0.0.1:"+port, "npx", "--no-install", "vestauth", "server", "start", "--port", port,
		"--hostname", base, "--database-url", vdb)
	agentDir := filepath.Join(dir, "vestauth-agent")
	if err := os.Mkdir(agentDir, 0o700); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("node", filepath.Join(modules, "vestauth", "src", "cli", "vestauth.js"), "agent", "init", "--hostname", base)
	cmd.Dir = agentDir
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("vestauth agent init: %v\n%s", err, out)
	}
	creds, err := agent.Load(agent.LoadOptions{Dir: agentDir, Getenv: noEnv})
	if err != nil {
		b.Fatal(fmt.Errorf("vestauth agent: %w", err))
	}
	return base, &creds
}

// BenchmarkProxyServerCPU measures the CPU `idcli proxy` spends per
// verified request it forwards: the proxy runs as a child process (access
// log on, to a file) in front of a static upstream in this process,
// verifying agents of a reference server in this process (keys fetched
// once, then cached; nonces in the proxy's memory). Requests are signed
// before the measured phase, each with its own nonce, and sent over 64
// keep-alive connections. Reported: the proxy's CPU per request
// (proxy-µs/req, from /proc), one crypto/ed25519.Verify timed on this
// goroutine's thread in the same run, their difference (beyond-verify-µs)
// and the mean latency at that concurrency straight to the upstream and
// through the proxy (direct-latency-µs, proxied-latency-µs). Run with
// -benchtime 1x: every iteration sends cpubench.requests whatever b.N is.
//
// With -cpubench.otel the same binary also runs as two more proxies with
// OpenTelemetry on (OTEL_EXPORTER_OTLP_ENDPOINT naming an OTLP/HTTP sink
// in this process, OTEL_TRACES_SAMPLER=always_on, the SDK's defaults
// otherwise): traces only (traced-proxy-µs/req) and traces and metrics
// (otel-proxy-µs/req). Each gets the same load as the untraced proxy, the
// three measured one after another in an order that turns every
// iteration; traced-x-untraced and otel-x-untraced are their CPU per
// request over the untraced proxy's, the export of every span included
// (spans/req counts what the sink received; the sink's own CPU, this
// process's, is not counted).
//
//	go test -run '^$' -bench ProxyServerCPU -benchtime 1x -count 3 ./cmd/idcli -args -cpubench.otel
func BenchmarkProxyServerCPU(b *testing.B) {
	bin := idcliBinary(b)
	dir := b.TempDir()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("ok\n"))
	}))
	b.Cleanup(upstream.Close)
	srv := clitest.StartServer(b, clitest.ServerOptions{})
	key := signertest.Key(94)
	uid := clitest.Register(b, nil, srv.URL, key)
	origin := srv.AgentOrigin(uid)
	startProxy := func(label, bin string, env []string) (string, *proccpu.Probe) {
		addr := "127.0.0.1:" + freePort(b)
		startChildEnv(b, env, dir, label, addr, bin, "proxy", "--listen", addr, "--upstream", upstream.URL,
			"--authority", addr, "--trust", "*.localhost:*", "--allow-http", "--allow-private")
		return addr, listenerProbe(b, addr)
	}
	// The proxies measured in every iteration, in an order that turns
	// from one iteration to the next: this build's, untraced, first.
	type side struct {
		name  string // metric prefix: "" for the untraced proxy
		addr  string
		probe *proccpu.Probe
		sink  *otlpSink // nil: no export
	}
	sides := []*side{{name: ""}}
	sides[0].addr, sides[0].probe = startProxy("proxy", bin, nil)
	// -cpubench.otel: the same binary exporting over OTLP/HTTP, every
	// request sampled; traces only ("traced-"), and traces and metrics
	// ("otel-"), each to a sink of its own.
	if *cpuBenchOtel {
		for _, name := range []string{"traced-", "otel-"} {
			sd := &side{name: name, sink: startOTLPSink(b)}
			sd.addr, sd.probe = startProxy(strings.TrimSuffix(name, "-"), bin, sd.sink.env(name == "otel-"))
			sides = append(sides, sd)
		}
	}
	// AGENTID_CPUBENCH_BASELINE: that binary's proxy gets the same load,
	// interleaved (base-proxy-µs/req).
	if base := os.Getenv("AGENTID_CPUBENCH_BASELINE"); base != "" {
		sd := &side{name: "base-"}
		sd.addr, sd.probe = startProxy("baseline", base, nil)
		sides = append(sides, sd)
	}

	n := *cpuBenchRequests
	if testing.Short() {
		n /= 4
	}
	sign := func(addr string, n int) []signer.SignatureHeaders {
		hs := make([]signer.SignatureHeaders, n)
		for i := range hs {
			h, err := signer.Headers(http.MethodGet, "http://"+addr+"/x", key, signer.Options{SignatureAgent: origin})
			if err != nil {
				b.Fatal(err)
			}
			hs[i] = h
		}
		return hs
	}
	// measure sends hs through sd's proxy and returns its CPU per request
	// in µs, the mean latency and, when it exports, the spans its sink
	// received per request. An exporting proxy's CPU includes the export
	// of the last batch: the measure ends when the sink holds every span
	// of the load (two a request: the server's and the verifier's) or
	// none has arrived for two schedule delays.
	measure := func(sd *side, hs []signer.SignatureHeaders) (float64, time.Duration, float64) {
		var spans int64
		if sd.sink != nil {
			spans = sd.sink.spans.Load()
		}
		before, err := sd.probe.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		proxied := load(b, "http://"+sd.addr+"/x", hs)
		if sd.sink != nil {
			spans = sd.sink.await(spans+2*int64(len(hs))) - spans
		}
		use, err := sd.probe.Since(before)
		if err != nil {
			b.Fatal(err)
		}
		return float64(use.Server.Nanoseconds()) / 1e3 / float64(len(hs)), proxied, float64(spans) / float64(len(hs))
	}
	for _, sd := range sides { // key fetch, connections
		measure(sd, sign(sd.addr, 500))
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		hs := make([][]signer.SignatureHeaders, len(sides))
		for j, sd := range sides {
			hs[j] = sign(sd.addr, n)
		}
		b.StartTimer()
		verify := ed25519VerifyCPU(5000)
		direct := load(b, upstream.URL+"/x", make([]signer.SignatureHeaders, n))
		perReq := make([]float64, len(sides))
		var proxied time.Duration
		for k := range sides {
			j := (i + k) % len(sides)
			sd := sides[j]
			var spans float64
			perReq[j], proxied, spans = measure(sd, hs[j])
			if j == 0 {
				b.ReportMetric(float64(proxied.Nanoseconds())/1e3, "proxied-latency-µs")
			}
			if sd.sink != nil {
				b.ReportMetric(spans, sd.name+"spans/req")
			}
		}
		v := float64(verify.Nanoseconds()) / 1e3
		for j, sd := range sides {
			b.ReportMetric(perReq[j], sd.name+"proxy-µs/req")
			if j > 0 && sd.name != "base-" {
				b.ReportMetric(perReq[j]/perReq[0], sd.name+"x-untraced")
			}
		}
		b.ReportMetric(v, "ed25519-µs")
		b.ReportMetric(perReq[0]-v, "beyond-verify-µs")
		b.ReportMetric(float64(direct.Nanoseconds())/1e3, "direct-latency-µs")
	}
}

// load sends one GET of url per entry of hs (with its signature headers,
// if any) over 64 keep-alive connections; every answer must be 200. It
// returns the mean latency (64 × elapsed / requests).
func load(b *testing.B, url string, hs []signer.SignatureHeaders) time.Duration {
	b.Helper()
	r := sustained(b, url, hs, 0)
	if r.firstErr != nil {
		b.Fatal(r.firstErr)
	}
	return r.elapsed * 64 / time.Duration(len(hs))
}
