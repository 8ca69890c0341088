package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/bench"
	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// benchServer starts a reference server on loopback with the given database
// whose HOSTNAME is http://agentid.test:<port>; it returns that base URL and
// the address to dial.
func benchServer(t *testing.T, databaseURL string) (base, addr string) {
	t.Helper()
	srv := clitest.StartServer(t, clitest.ServerOptions{DatabaseURL: databaseURL, Host: "agentid.test"})
	return srv.URL, srv.Addr
}

// benchCLI runs `idcli bench args…` in a temporary folder and returns its
// stdout, stderr and error.
func benchCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	r := runCLI(t.Context(), t.TempDir(), nil, append([]string{"bench"}, args...)...)
	return r.stdout, r.stderr, r.err
}

// benchJSON runs `idcli bench --json` against the server at base (dialed
// at addr) whose database is dbURL, and returns its report and stderr.
func benchJSON(t *testing.T, base, addr, dbURL string, args ...string) (bench.Report, string) {
	t.Helper()
	out, errOut, err := benchCLI(t, append([]string{"--url", base, "--connect", addr, "--database-url", dbURL, "--json"}, args...)...)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, errOut)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report %q: %v", out, err)
	}
	return rep, errOut
}

func TestBenchAgainstRefserver(t *testing.T) {
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			dbURL := b.URL(t)
			base, addr := benchServer(t, dbURL)
			rep, errOut := benchJSON(t, base, addr, dbURL, "--requests", "200", "--duration", "1m", "--concurrency", "8", "--target", "all")
			if len(rep.Targets) != 3 {
				t.Fatalf("targets = %d, want 3", len(rep.Targets))
			}
			wantStatus := map[string]string{"whoami": "200", "register": "201", "directory": "200"}
			for _, tr := range rep.Targets {
				if tr.Requests != 200 {
					t.Errorf("%s: requests = %d, want 200", tr.Target, tr.Requests)
				}
				if tr.RPS <= 0 {
					t.Errorf("%s: requests/s = %v, want > 0", tr.Target, tr.RPS)
				}
				if got := tr.Status[wantStatus[tr.Target]]; got != 200 {
					t.Errorf("%s: status %s count = %d, want 200 (all: %v, first error %q)", tr.Target, wantStatus[tr.Target], got, tr.Status, tr.FirstError)
				}
				for code, n := range tr.Status {
					if strings.HasPrefix(code, "5") || code == "error" {
						t.Errorf("%s: %d answers %s, want none", tr.Target, n, code)
					}
				}
				if !(tr.P50ms <= tr.P90ms && tr.P90ms <= tr.P99ms && tr.P99ms <= tr.Maxms && tr.Maxms > 0) {
					t.Errorf("%s: percentiles p50 %v p90 %v p99 %v max %v are not ordered", tr.Target, tr.P50ms, tr.P90ms, tr.P99ms, tr.Maxms)
				}
			}
			// The bench agent and the 200 of the register target are gone.
			if rep.AgentsRegistered != 201 || rep.AgentsRemoved != 201 {
				t.Errorf("agents registered %d, removed %d; want 201 and 201", rep.AgentsRegistered, rep.AgentsRemoved)
			}
			db := dbtest.Open(t, dbURL)
			var agents, keys int64
			db.Model(&store.Agent{}).Count(&agents)
			db.Model(&store.PublicJWK{}).Count(&keys)
			if agents != 0 || keys != 0 {
				t.Errorf("after the run the database holds %d agents and %d keys, want none", agents, keys)
			}
			if !strings.Contains(errOut, "removed the 201 agents") {
				t.Errorf("stderr does not report the removal:\n%s", errOut)
			}
		})
	}
}

func TestBenchTableOutputAndDurationBound(t *testing.T) {
	base, addr := benchServer(t, "sqlite::memory:")
	out, errOut, err := benchCLI(t, "--url", base, "--connect", addr, "--duration", "200ms", "--concurrency", "4", "--keep-agents")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, errOut)
	}
	for _, want := range []string{"idcli bench http://agentid.test:", "target", "req/s", "p99 ms", "whoami", "200:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "register") {
		t.Errorf("default target ran register:\n%s", out)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	checkUsage(t, t.TempDir(), []string{"bench"}, []usageCase{
		{"unbounded", []string{"--duration", "0"}, "must be bounded"},
		{"bad target", []string{"--target", "everything"}, "--target"},
		{"bad url", []string{"--url", "localhost:3000"}, "--url"},
		{"url with path", []string{"--url", "http://localhost:3000/x"}, "a path is not allowed"},
		{"zero concurrency", []string{"--concurrency", "0"}, "--concurrency"},
		{"argument", []string{"extra"}, "unexpected argument"},
	})
}

func TestBenchServerDown(t *testing.T) {
	_, _, err := benchCLI(t, "--url", "http://127.0.0.1:"+freePort(t), "--requests", "1", "--keep-agents")
	if err == nil || !strings.Contains(err.Error(), "register the bench agent") {
		t.Errorf("error = %v, want a registration failure", err)
	}
}

// TestBenchPresignExpiryWarning: presigned requests due more than a
// signature's lifetime into an open-loop run draw a warning.
func TestBenchPresignExpiryWarning(t *testing.T) {
	_, errOut, err := benchCLI(t, "--url", "http://127.0.0.1:"+freePort(t), "--rate", "10", "--presign", "3010", "--duration", "10m", "--keep-agents")
	if err == nil {
		t.Fatal("bench against no server succeeded")
	}
	if !strings.Contains(errOut, "warning: the last of --presign 3010 requests at --rate 10 is due 5m1s into the run") {
		t.Errorf("stderr lacks the expiry warning:\n%s", errOut)
	}
	for _, tt := range []struct {
		cfg  bench.Config
		want time.Duration
	}{
		{bench.Config{Presign: 3000, Rate: 10, Duration: time.Hour}, 300 * time.Second},
		{bench.Config{Presign: 3000, Rate: 10, Duration: time.Minute}, 60 * time.Second}, // only 600 are sent
		{bench.Config{Presign: 3000, Rate: 10, Requests: 100}, 10 * time.Second},
		{bench.Config{Presign: 3000, Duration: time.Hour}, 0}, // closed loop
		{bench.Config{Rate: 10, Duration: time.Hour}, 0},
	} {
		if got := tt.cfg.PresignSpan(); got != tt.want {
			t.Errorf("PresignSpan(%+v) = %v, want %v", tt.cfg, got, tt.want)
		}
	}
}

// stallServer answers registrations and GET /whoami like the reference
// server, except that the stallAt-th /whoami stalls the whole server for
// stall (every request in that window waits, as behind a lock or a pause).
func stallServer(t *testing.T, stallAt int64, stall time.Duration) (base, addr string) {
	t.Helper()
	var (
		mu sync.RWMutex
		n  atomic.Int64
	)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /agents", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			PublicJWK json.RawMessage `json:"public_jwk"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		pk, err := signer.ParsePublicJWK(body.PublicJWK)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"uid": "agent-0123456789abcdef01234567", "kid": pk.JWK.Kid,
			"public_jwk": json.RawMessage(pk.JWK.MarshalPublic()), "is_new": true})
	})
	mux.HandleFunc("GET /whoami", func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == stallAt {
			mu.Lock()
			time.Sleep(stall)
			mu.Unlock()
		} else {
			mu.RLock()
			//lint:ignore SA2001 the empty critical section waits out a stall in progress
			mu.RUnlock()
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"uid":"agent-0123456789abcdef01234567"}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	addr = srv.Listener.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	return "http://agentid.test:" + port, addr
}

// TestBenchOpenLoopSeesAStall: a server that stalls once for 200 ms. A
// closed loop with one worker sends nothing while it waits, so the stall is
// one sample among hundreds and its p99 stays low; the open loop keeps the
// schedule, so every request due during the stall is slow from its
// scheduled time and p99 shows it, even with one connection (requests then
// wait for the connection, and that wait counts).
func TestBenchOpenLoopSeesAStall(t *testing.T) {
	if testing.Short() {
		t.Skip("an open-loop load with a stall: skipped with -short")
	}
	t.Parallel()
	const stall = 200 * time.Millisecond
	report := func(t *testing.T, args ...string) bench.TargetReport {
		t.Helper()
		base, addr := stallServer(t, 50, stall)
		out, errOut, err := benchCLI(t, append([]string{"--url", base, "--connect", addr, "--json", "--keep-agents"}, args...)...)
		if err != nil {
			t.Fatalf("bench %v: %v\n%s", args, err, errOut)
		}
		var rep bench.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Targets) != 1 {
			t.Fatalf("report %q: %v", out, err)
		}
		tr := rep.Targets[0]
		if tr.Errors != 0 || tr.Status["200"] != tr.Requests {
			t.Fatalf("bench %v: statuses %v, first error %q; want only 200", args, tr.Status, tr.FirstError)
		}
		if tr.Maxms < float64(stall.Microseconds())/1000 {
			t.Fatalf("bench %v: max %v ms, want the %v stall to have happened", args, tr.Maxms, stall)
		}
		return tr
	}

	closed := report(t, "--requests", "400", "--duration", "1m", "--concurrency", "1")
	if closed.Mode != "closed" || closed.Requests != 400 {
		t.Errorf("closed loop: mode %q, %d requests; want closed, 400", closed.Mode, closed.Requests)
	}
	if closed.P99ms >= 100 {
		t.Errorf("closed loop: p99 %v ms, want under 100 ms (one slow sample in 400)", closed.P99ms)
	}

	for _, conns := range []string{"64", "1"} {
		open := report(t, "--rate", "150", "--requests", "300", "--concurrency", conns)
		if open.Mode != "open" || open.OfferedRPS != 150 || open.Requests != 300 {
			t.Errorf("open loop, %s connections: mode %q, offered %v, %d requests; want open, 150, 300", conns, open.Mode, open.OfferedRPS, open.Requests)
		}
		if open.P99ms < 100 {
			t.Errorf("open loop, %s connections: p99 %v ms, want at least 100 ms (the stall delays every request due during it)", conns, open.P99ms)
		}
		if open.P999ms < open.P99ms || open.Maxms < open.P999ms {
			t.Errorf("open loop, %s connections: p99 %v, p99.9 %v, max %v ms are not ordered", conns, open.P99ms, open.P999ms, open.Maxms)
		}
		// 300 requests at 150/s take about 2 s; the achieved rate stays near
		// the offered one.
		if open.RPS < 100 || open.RPS > 160 {
			t.Errorf("open loop, %s connections: achieved %v req/s, want about 150", conns, open.RPS)
		}
		if conns == "1" && open.SentLate == 0 {
			t.Errorf("open loop, one connection: sent_late 0, want the requests due during the stall to be sent late")
		}
	}
}

func TestBenchEnvFile(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, clitest.ServerOptions{Host: "localhost"})
	key := signertest.Key(30)
	uid := clitest.Register(t, srv.Client, srv.URL, key)
	dir := credsDir(t, uid, key, srv.URL)
	r := runCLI(t.Context(), dir, nil, "bench", "--url", srv.URL, "--connect", srv.Addr, "--env-file", ".env", "--requests", "20", "--concurrency", "2", "--json")
	if r.err != nil {
		t.Fatalf("bench --env-file: %v\n%s", r.err, r.stderr)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Targets) != 1 {
		t.Fatalf("report %q: %v", r.stdout, err)
	}
	if rep.AgentUID != uid || rep.Targets[0].Status["200"] != 20 {
		t.Errorf("agent %s, statuses %v; want the file's agent %s and 20 answers 200", rep.AgentUID, rep.Targets[0].Status, uid)
	}
	// The file's agent belongs to another service: refused before any request.
	other := credsDir(t, uid, key, "http://elsewhere.example")
	if r := runCLI(t.Context(), other, nil, "bench", "--url", srv.URL, "--env-file", ".env", "--requests", "1"); r.err == nil || !strings.Contains(r.err.Error(), "belongs to http://elsewhere.example") {
		t.Errorf("bench with another service's agent: %v, want a refusal naming it", r.err)
	}
}

// TestCompareScript checks the vestauth comparison script without running
// it (it needs PostgreSQL, npm and minutes): it parses, and it pins the
// vestauth version the interop lock file installs.
func TestCompareScript(t *testing.T) {
	t.Parallel()
	script := filepath.Join("testdata", "compare-vestauth.sh")
	if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n %s: %v\n%s", script, err, out)
	}
	text, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	b, err := os.ReadFile(filepath.Join("testdata", "interop", "package.json"))
	if err != nil || json.Unmarshal(b, &pkg) != nil {
		t.Fatalf("read the interop package.json: %v", err)
	}
	pinned := pkg.Dependencies["vestauth"]
	for _, want := range []string{`[ "$version" = "` + pinned + `" ]`, "npx --no-install vestauth server start", "--env-file", "trap cleanup EXIT", "--bind 127.0.0.1"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("%s lacks %q", script, want)
		}
	}
	if st, err := os.Stat(script); err != nil || st.Mode()&0o100 == 0 {
		t.Errorf("%s is not executable: %v", script, err)
	}
}

// TestBenchLegacy checks that --legacy signs /whoami in the pre-protocol-01
// shape (the Signature-Agent member sent, not covered), which vestauth
// 0.21.1's server needs, and that without it the member is covered.
func TestBenchLegacy(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var inputs []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/whoami" {
			mu.Lock()
			inputs = append(inputs, r.Header.Get("Signature-Input"))
			mu.Unlock()
		}
		w.Write([]byte("{}\n"))
	}))
	defer srv.Close()
	key := signertest.Key(31)
	dir := credsDir(t, "agent-0123456789abcdef01234567", key, srv.URL)
	for _, legacy := range []bool{false, true} {
		mu.Lock()
		inputs = nil
		mu.Unlock()
		args := []string{"bench", "--url", srv.URL, "--env-file", ".env", "--requests", "3", "--concurrency", "1", "--json"}
		if legacy {
			args = append(args, "--legacy")
		}
		if r := runCLI(t.Context(), dir, nil, args...); r.err != nil {
			t.Fatalf("%v: %v\n%s", args, r.err, r.stderr)
		}
		mu.Lock()
		got := slices.Clone(inputs)
		mu.Unlock()
		if len(got) != 3 {
			t.Fatalf("%v: %d requests reached /whoami, want 3", args, len(got))
		}
		for _, in := range got {
			if covered := strings.Contains(in, `"signature-agent";key=`); covered == legacy {
				t.Errorf("legacy %v: Signature-Input %q: member covered %v, want %v", legacy, in, covered, !legacy)
			}
		}
	}
}

// TestBenchAgents: with --agents 6 the whoami target runs signed by the
// bench agent alone, then round-robin by six registered agents (every
// request answered 200, so each agent's key verified), reports both with
// the agent count, and the six agents are removed afterwards.
func TestBenchAgents(t *testing.T) {
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			dbURL := b.URL(t)
			srv := clitest.StartServer(t, clitest.ServerOptions{DatabaseURL: dbURL, Host: "agentid.test", MetricsListen: "127.0.0.1:0"})
			base, addr := srv.URL, srv.Addr
			rep, _ := benchJSON(t, base, addr, dbURL, "--requests", "60", "--presign", "30", "--concurrency", "4", "--agents", "6", "--metrics-url", srv.MetricsURL)
			if len(rep.Targets) != 2 || rep.Targets[0].Target != "whoami" || rep.Targets[1].Target != "whoami" {
				t.Fatalf("targets %+v, want whoami twice", rep.Targets)
			}
			if one, many := rep.Targets[0], rep.Targets[1]; one.Agents != 0 || many.Agents != 6 {
				t.Errorf("agents %d and %d, want 0 (one) and 6", one.Agents, many.Agents)
			}
			for _, tr := range rep.Targets {
				if tr.Requests != 60 || tr.Status["200"] != 60 {
					t.Errorf("whoami (%d agents): %d requests, statuses %v (first error %q), want 60 answered 200", tr.Agents, tr.Requests, tr.Status, tr.FirstError)
				}
			}
			if c1, c2 := rep.Targets[0].CPU, rep.Targets[1].CPU; c1 != nil && c2 != nil && c1.ServerUS > 0 && c2.ServerUS > 0 && rep.Targets[1].CPUvsOneAgent <= 0 {
				t.Errorf("CPU measured (%v, %v) but no ratio to the one-agent run", c1.ServerUS, c2.ServerUS)
			}
			// Each agent sent one request before the timed run: its key is
			// cached. The figure comes from the server's metrics address
			// (--metrics-url).
			switch p := rep.Targets[1].KeyCacheHitPercent; {
			case p == nil:
				t.Errorf("no key cache hit rate reported with --metrics-url %s", srv.MetricsURL)
			case *p < 50:
				t.Errorf("key cache hit rate over 6 agents after a first request each: %.1f%%, want most", *p)
			}
			if rep.AgentsRegistered != 6 || rep.AgentsRemoved != 6 {
				t.Errorf("agents registered %d, removed %d; want 6 and 6", rep.AgentsRegistered, rep.AgentsRemoved)
			}
			if _, errOut, err := benchCLI(t, "--url", base, "--connect", addr, "--keep-agents", "--requests", "1", "--agents", "0"); err == nil {
				t.Errorf("--agents 0 accepted:\n%s", errOut)
			}
			if _, errOut, err := benchCLI(t, "--url", base, "--connect", addr, "--keep-agents", "--requests", "1", "--agents", "3", "--target", "register"); err == nil || !strings.Contains(err.Error()+errOut, "--agents spreads the whoami target") {
				t.Errorf("--agents with the register target alone: %v\n%s", err, errOut)
			}
		})
	}
}

// TestBinaryBenchServerCPU runs bench against a server in this test
// process: the report names this process and its CPU per request.
func TestBinaryBenchServerCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	srv := clitest.StartServer(t, clitest.ServerOptions{})
	r := runBinary(t, t.TempDir(), nil, "bench", "--url", srv.URL, "--keep-agents", "--requests", "400", "--concurrency", "4", "--json")
	if r.code != 0 {
		t.Fatalf("bench: %v", r)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("report %q: %v", r.stdout, err)
	}
	if rep.ServerPID != os.Getpid() || rep.ServerCPU != "" {
		t.Errorf("server pid %d (%q), want this process %d", rep.ServerPID, rep.ServerCPU, os.Getpid())
	}
	if len(rep.Targets) != 1 || rep.Targets[0].CPU == nil {
		t.Fatalf("targets %+v: want whoami with its CPU", rep.Targets)
	}
	c := rep.Targets[0].CPU
	if c.ServerUS <= 0 || c.PerCore <= 0 || c.DatabaseBackends != 0 {
		t.Errorf("CPU %+v: want server CPU > 0 and no PostgreSQL backend (SQLite)", c)
	}

	r = runBinary(t, t.TempDir(), nil, "bench", "--url", srv.URL, "--keep-agents", "--requests", "50")
	if r.code != 0 || !strings.Contains(r.stdout, "whoami: server CPU ") || !strings.Contains(r.stdout, "requests per core-second") {
		t.Errorf("text report: %v", r)
	}
}
