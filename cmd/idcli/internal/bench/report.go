package bench

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/bench/proccpu"
)

// TargetReport is the outcome of one target's run.
type TargetReport struct {
	Target string `json:"target"`
	// Mode is "closed" or "open" (--rate).
	Mode string `json:"mode"`
	// OfferedRPS is the open loop's arrival rate (--rate); 0 in the
	// closed loop.
	OfferedRPS float64 `json:"offered_requests_per_second,omitempty"`
	Requests   int     `json:"requests"`
	Seconds    float64 `json:"seconds"`
	// RPS is the achieved rate: requests answered per second of the run.
	RPS   float64 `json:"requests_per_second"`
	P50ms float64 `json:"p50_ms"`
	P90ms float64 `json:"p90_ms"`
	P99ms float64 `json:"p99_ms"`
	// P999ms is the 99.9th percentile.
	P999ms float64 `json:"p99_9_ms"`
	Maxms  float64 `json:"max_ms"`
	// SentLate counts open-loop requests sent more than 10 ms after their
	// scheduled time because every connection was busy (their latency
	// includes the wait).
	SentLate int            `json:"sent_late,omitempty"`
	Status   map[string]int `json:"status"` // "200", "429", …, "error"
	Errors   int            `json:"errors"`
	// FirstError is the first transport error, if any.
	FirstError string `json:"first_error,omitempty"`
	// Agents is the number of agents whose signatures this run spread its
	// /whoami requests over (--agents; 0 for one agent).
	Agents int `json:"agents,omitempty"`
	// CPUvsOneAgent is the server+PostgreSQL CPU per request of this run
	// over that of the one-agent run of the same bench (--agents).
	CPUvsOneAgent float64 `json:"cpu_vs_one_agent,omitempty"`
	// ServerRSSBytes is the server's resident memory after this run
	// (--agents; 0 when its /metrics does not say).
	ServerRSSBytes int64 `json:"server_rss_bytes,omitempty"`
	// KeyCacheHitPercent is the share of the server's key lookups answered
	// from its cache during a whoami run (agentid_key_cache_total of its
	// /metrics; absent when it does not say).
	KeyCacheHitPercent *float64 `json:"key_cache_hit_percent,omitempty"`
	// CPU is the server's CPU per request during this target's run, when
	// the server runs on this host (Linux).
	CPU *CPU `json:"cpu,omitempty"`
}

// CPU is the CPU time the server (and its PostgreSQL backends) used
// during one target's run, per request answered. The generator's own CPU
// is not in it.
type CPU struct {
	// ServerUS is the server process's user+system CPU per request, in µs.
	ServerUS float64 `json:"server_us_per_request"`
	// DatabaseUS is that of the PostgreSQL backends serving the server's
	// connections plus PostgreSQL's background processes (WAL writer,
	// checkpointer, …); 0 with no PostgreSQL backend (SQLite).
	DatabaseUS float64 `json:"database_us_per_request"`
	// DatabaseBackgroundUS is the part of DatabaseUS spent by PostgreSQL's
	// background processes, which serve every database of that PostgreSQL
	// server: other load on it shows here.
	DatabaseBackgroundUS float64 `json:"database_background_us_per_request"`
	// DatabaseBackends counts the server's PostgreSQL backends at the end.
	DatabaseBackends int `json:"database_backends"`
	// ServerPerCore is 1e6 / ServerUS: the requests per second one core
	// spent only on the server would answer; PerCore is the same for
	// server and database together (both on one host).
	ServerPerCore float64 `json:"server_requests_per_core_second"`
	PerCore       float64 `json:"requests_per_core_second"`
}

// Report is the whole run. Its JSON form is `idcli bench --json`.
type Report struct {
	URL         string         `json:"url"`
	Concurrency int            `json:"concurrency"`
	AgentUID    string         `json:"agent_uid"`
	Targets     []TargetReport `json:"targets"`
	// ServerRSSBytes and ServerHeapBytes come from the server's /metrics
	// after the run (0 when it does not expose them).
	ServerRSSBytes  int64 `json:"server_rss_bytes,omitempty"`
	ServerHeapBytes int64 `json:"server_heap_bytes,omitempty"`
	// AgentsRegistered counts the agents the run registered (the bench
	// agent and every new one of the register target); AgentsRemoved
	// those it removed from the server's database afterwards (0 with
	// --keep-agents).
	AgentsRegistered int `json:"agents_registered"`
	AgentsRemoved    int `json:"agents_removed"`
	// ServerPID is the process measured for the targets' CPU (the one
	// listening on the port bench dials), 0 when none on this host;
	// ServerCPU then says why.
	ServerPID int    `json:"server_pid,omitempty"`
	ServerCPU string `json:"server_cpu_unavailable,omitempty"`
}

// perRequest divides a run's CPU by the requests answered.
func perRequest(use proccpu.Use, requests int) *CPU {
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(requests) }
	c := &CPU{ServerUS: us(use.Server), DatabaseUS: us(use.Database),
		DatabaseBackgroundUS: us(use.Background), DatabaseBackends: use.Backends}
	if c.ServerUS > 0 {
		c.ServerPerCore = 1e6 / c.ServerUS
	}
	if t := c.ServerUS + c.DatabaseUS; t > 0 {
		c.PerCore = 1e6 / t
	}
	return c
}

// summarize merges the workers' records of one target.
func summarize(target string, stats []workerStats, elapsed time.Duration) TargetReport {
	out := TargetReport{Target: target, Seconds: elapsed.Seconds(), Status: map[string]int{}}
	var lat []time.Duration
	for _, ws := range stats {
		lat = append(lat, ws.lat...)
		for s, n := range ws.status {
			out.Status[strconv.Itoa(s)] += n
		}
		if ws.errors > 0 {
			out.Status["error"] += ws.errors
			out.Errors += ws.errors
			if out.FirstError == "" {
				out.FirstError = ws.firstErr
			}
		}
	}
	slices.Sort(lat)
	out.Requests = len(lat)
	if elapsed > 0 {
		out.RPS = float64(len(lat)) / elapsed.Seconds()
	}
	out.P50ms = ms(percentile(lat, 50, 100))
	out.P90ms = ms(percentile(lat, 90, 100))
	out.P99ms = ms(percentile(lat, 99, 100))
	out.P999ms = ms(percentile(lat, 999, 1000))
	if len(lat) > 0 {
		out.Maxms = ms(lat[len(lat)-1])
	}
	return out
}

// percentile returns the nearest-rank percentile num/den of sorted (99/100
// for p99, 999/1000 for p99.9): the value at rank ceil(n·num/den).
func percentile(sorted []time.Duration, num, den int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*num + den - 1) / den
	return sorted[max(i, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// WriteTable writes the report as `idcli bench` prints it: a table of the
// targets, then a line on each open loop, transport errors, CPU and memory.
func (rep Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "idcli bench %s: %d connections, bench agent %s\n", rep.URL, rep.Concurrency, rep.AgentUID)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tloop\trequests\tseconds\treq/s\tp50 ms\tp90 ms\tp99 ms\tp99.9 ms\tmax ms\tstatus")
	for _, t := range rep.Targets {
		codes := make([]string, 0, len(t.Status))
		for c := range t.Status {
			codes = append(codes, c)
		}
		sort.Strings(codes)
		var st []string
		for _, c := range codes {
			st = append(st, fmt.Sprintf("%s:%d", c, t.Status[c]))
		}
		loop := "closed"
		if t.Mode == "open" {
			loop = fmt.Sprintf("open %g/s", t.OfferedRPS)
		}
		name := t.Target
		if t.Agents > 1 {
			name = fmt.Sprintf("%s (%d agents)", t.Target, t.Agents)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\n",
			name, loop, t.Requests, t.Seconds, t.RPS, t.P50ms, t.P90ms, t.P99ms, t.P999ms, t.Maxms, strings.Join(st, " "))
	}
	tw.Flush()
	for _, t := range rep.Targets {
		if t.Mode == "open" {
			fmt.Fprintf(w, "%s: offered %g req/s, achieved %.0f req/s; latency counted from each request's scheduled send time", t.Target, t.OfferedRPS, t.RPS)
			if t.SentLate > 0 {
				fmt.Fprintf(w, "; %d sent more than %v late (every connection busy: raise --concurrency if the server is not the cause)", t.SentLate, lateAfter)
			}
			fmt.Fprintln(w)
		}
		if t.FirstError != "" {
			fmt.Fprintf(w, "%s: %d transport errors, first: %s\n", t.Target, t.Errors, t.FirstError)
		}
	}
	for _, t := range rep.Targets {
		if c := t.CPU; c != nil {
			fmt.Fprintf(w, "%s: server CPU %.1f µs/request (pid %d)", t.Target, c.ServerUS, rep.ServerPID)
			if c.DatabaseBackends > 0 {
				fmt.Fprintf(w, ", PostgreSQL %.1f µs/request (%d backends %.1f, background processes %.1f)",
					c.DatabaseUS, c.DatabaseBackends, c.DatabaseUS-c.DatabaseBackgroundUS, c.DatabaseBackgroundUS)
			}
			fmt.Fprintf(w, ": %.0f requests per core-second (server alone: %.0f)", c.PerCore, c.ServerPerCore)
			if t.Agents > 1 && t.CPUvsOneAgent > 0 {
				fmt.Fprintf(w, "; over %d agents %.2f× the one-agent CPU of this run", t.Agents, t.CPUvsOneAgent)
			}
			if t.KeyCacheHitPercent != nil {
				fmt.Fprintf(w, "; key cache hits %.1f%%", *t.KeyCacheHitPercent)
			}
			if t.ServerRSSBytes > 0 {
				fmt.Fprintf(w, "; server RSS %.1f MiB after it", float64(t.ServerRSSBytes)/(1<<20))
			}
			fmt.Fprintln(w)
		}
	}
	if rep.ServerPID == 0 && rep.ServerCPU != "" {
		fmt.Fprintf(w, "server CPU not measured: %s\n", rep.ServerCPU)
	}
	if rep.ServerRSSBytes > 0 || rep.ServerHeapBytes > 0 {
		fmt.Fprintf(w, "server memory after the run: RSS %.1f MiB, Go heap %.1f MiB\n",
			float64(rep.ServerRSSBytes)/(1<<20), float64(rep.ServerHeapBytes)/(1<<20))
	}
}
