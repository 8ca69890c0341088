package main

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/refserver/dbtest"
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

func TestBenchAgainstRefserver(t *testing.T) {
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			base, addr := benchServer(t, b.URL(t))
			out, errOut, err := benchCLI(t, "--url", base, "--connect", addr,
				"--requests", "200", "--duration", "1m", "--concurrency", "8", "--target", "all", "--json")
			if err != nil {
				t.Fatalf("bench: %v\n%s", err, errOut)
			}
			var rep benchReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("report %q: %v", out, err)
			}
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
		})
	}
}

func TestBenchTableOutputAndDurationBound(t *testing.T) {
	base, addr := benchServer(t, "sqlite::memory:")
	out, errOut, err := benchCLI(t, "--url", base, "--connect", addr, "--duration", "200ms", "--concurrency", "4")
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
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unbounded", []string{"--duration", "0"}, "must be bounded"},
		{"bad target", []string{"--target", "everything"}, "--target"},
		{"bad url", []string{"--url", "localhost:3000"}, "--url"},
		{"url with path", []string{"--url", "http://localhost:3000/x"}, "a path is not allowed"},
		{"zero concurrency", []string{"--concurrency", "0"}, "--concurrency"},
		{"argument", []string{"extra"}, "unexpected argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := benchCLI(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestBenchServerDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, _, err = benchCLI(t, "--url", "http://"+addr, "--requests", "1")
	if err == nil || !strings.Contains(err.Error(), "register the bench agent") {
		t.Errorf("error = %v, want a registration failure", err)
	}
}

func TestPercentile(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	tests := []struct {
		in   []time.Duration
		p    int
		want time.Duration
	}{
		{lat, 50, 50 * time.Millisecond},
		{lat, 90, 90 * time.Millisecond},
		{lat, 99, 99 * time.Millisecond},
		{lat, 100, 100 * time.Millisecond},
		{lat[:1], 99, time.Millisecond},
		{nil, 50, 0},
		{lat[:3], 50, 2 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := percentile(tt.in, tt.p); got != tt.want {
			t.Errorf("percentile(n=%d, %d) = %v, want %v", len(tt.in), tt.p, got, tt.want)
		}
	}
}
