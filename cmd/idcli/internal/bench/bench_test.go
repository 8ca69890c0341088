package bench

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	var lat []time.Duration
	for i := 1; i <= 1000; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	tests := []struct {
		in       []time.Duration
		num, den int
		want     time.Duration
	}{
		{lat[:100], 50, 100, 50 * time.Millisecond},
		{lat[:100], 90, 100, 90 * time.Millisecond},
		{lat[:100], 99, 100, 99 * time.Millisecond},
		{lat[:100], 100, 100, 100 * time.Millisecond},
		{lat[:100], 999, 1000, 100 * time.Millisecond},
		{lat, 999, 1000, 999 * time.Millisecond},
		{lat, 99, 100, 990 * time.Millisecond},
		{lat[:1], 99, 100, time.Millisecond},
		{nil, 50, 100, 0},
		{lat[:3], 50, 100, 2 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := percentile(tt.in, tt.num, tt.den); got != tt.want {
			t.Errorf("percentile(n=%d, %d/%d) = %v, want %v", len(tt.in), tt.num, tt.den, got, tt.want)
		}
	}
}

// TestBenchAgentForRoundRobin: request i of a spread run is signed by agent
// i mod N; outside a spread run, by the bench agent.
func TestBenchAgentForRoundRobin(t *testing.T) {
	b := &bench{}
	for i := range 4 {
		b.agents = append(b.agents, benchAgent{origin: fmt.Sprint(i)})
	}
	var got []string
	for i := range int64(6) {
		got = append(got, b.agentFor(i).origin)
	}
	if fmt.Sprint(got) != "[0 0 0 0 0 0]" {
		t.Errorf("one-agent run: %v", got)
	}
	b.spread, got = 4, nil
	for i := range int64(6) {
		got = append(got, b.agentFor(i).origin)
	}
	if fmt.Sprint(got) != "[0 1 2 3 0 1]" {
		t.Errorf("spread run: %v", got)
	}
}

func TestFindServerProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	probe, err := findServerProcess(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if probe.PID() != os.Getpid() {
		t.Errorf("listener pid %d, want this process %d", probe.PID(), os.Getpid())
	}
	before, err := probe.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < 60*time.Millisecond; {
	}
	use, err := probe.Since(before)
	if err != nil {
		t.Fatal(err)
	}
	if use.Server <= 0 {
		t.Errorf("server CPU %v after spinning, want > 0", use.Server)
	}
	if use.Backends != 0 || use.Database != 0 {
		t.Errorf("database %v over %d backends, want none (no database connection)", use.Database, use.Backends)
	}

	ln.Close()
	if _, err := findServerProcess(ln.Addr().String()); err == nil || !strings.Contains(err.Error(), "listens") {
		t.Errorf("closed port: %v, want nothing listens", err)
	}
	if _, err := findServerProcess("192.0.2.1:80"); err == nil {
		t.Error("an address of another host: nil error")
	}
}
