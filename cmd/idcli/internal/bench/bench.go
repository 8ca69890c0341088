// Package bench is idcli's load generator (`idcli bench`): it registers a
// bench agent with a running agentid server, sends it signed requests in a
// closed or an open loop, and reports throughput, latency percentiles,
// status counts and, for a server on this host, its CPU per request (read
// from /proc by package proccpu).
//
//	rep, err := bench.Run(ctx, bench.Config{URL: "http://localhost:3000",
//		Duration: 10 * time.Second, Concurrency: 64, Timeout: 10 * time.Second,
//		Targets: []string{bench.Whoami}})
//	rep.WriteTable(os.Stdout)
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/hint"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
)

// The targets a run loads: GET /whoami signed, POST /agents with a new
// key, and GET of the bench agent's key directory on its agent host.
const (
	Whoami    = "whoami"
	Register  = "register"
	Directory = "directory"
)

// Targets are the targets in the order `--target all` runs them.
var Targets = []string{Whoami, Register, Directory}

// Config is what a run does.
type Config struct {
	// URL is the service base URL (its HOSTNAME), e.g. http://localhost:3000.
	URL string
	// Connect is the host:port every connection dials (agent hosts
	// included). If "", the URL's host and port.
	Connect string
	// Duration bounds each target's run; 0 means no time bound.
	Duration time.Duration
	// Requests bounds each target's request count; 0 means no count bound.
	Requests int64
	// Concurrency is the number of workers (and connections).
	Concurrency int
	// Targets run one after another.
	Targets []string
	// Timeout bounds one request.
	Timeout time.Duration
	// Rate, if positive, is the open loop's arrival rate in requests per
	// second: request i is due at start + i/Rate whether or not earlier
	// ones have been answered, and its latency is measured from that
	// scheduled time. Concurrency then caps the requests in flight. If 0,
	// the closed loop: each worker sends its next request when the last is
	// answered.
	Rate float64
	// Credentials, if set, is the agent whose key signs /whoami (an agent
	// registered beforehand, e.g. with `vestauth agent init`), instead of a
	// bench agent registered with POST /agents.
	Credentials *agent.Credentials
	// Legacy signs /whoami in the pre-protocol-01 shape (the Signature-Agent
	// member not covered), which vestauth 0.21.1's server needs.
	Legacy bool
	// Presign is how many /whoami requests are signed before the timed
	// phase (each with its own nonce, so replay protection stays on); the
	// run signs more inside the loop if it uses them up. 0 signs every
	// request inside the loop, as a real client does.
	Presign int
	// Agents spreads /whoami over this many registered agents (the bench
	// agent and Agents-1 more registered before the run): the whoami
	// target then runs twice, signed by the bench agent alone, then by the
	// Agents round-robin, each request uniquely signed. 0 or 1: one agent.
	Agents int
	// Progress, if not nil, receives a line about the run at least once a
	// second (ProgressEvery).
	Progress io.Writer
	// ProgressEvery is the interval of the progress lines; 0 means 1 s.
	ProgressEvery time.Duration
	// MetricsURL, if set, is the server's Prometheus metrics (served on
	// its --metrics-listen address, e.g. http://127.0.0.1:9090/metrics),
	// read before and after runs for the key-cache hit rate and memory. If
	// "", those figures are left out.
	MetricsURL string
	// DB, if not nil, is the server's database: the agents the run
	// registers (the bench agent and those of the register target) are
	// removed from it at the end. If nil, they are kept.
	DB AgentStore
}

// AgentStore is the server's database as a run cleans it up: *store.DB of
// package refserver is one.
type AgentStore interface {
	// HasAgent reports whether the agent uid is in the database.
	HasAgent(ctx context.Context, uid string) (bool, error)
	// DeleteAgents deletes the agents uids and their keys and returns how
	// many agents it deleted.
	DeleteAgents(ctx context.Context, uids []string) (int, error)
}

// openLoopCount is the number of requests an open loop schedules: Rate ×
// Duration, at most Requests.
func (c Config) openLoopCount() int64 {
	n := int64(-1)
	if c.Duration > 0 {
		n = int64(c.Rate * c.Duration.Seconds())
	}
	if c.Requests > 0 && (n < 0 || c.Requests < n) {
		n = c.Requests
	}
	return max(n, 1)
}

// Validate checks the configuration as Run does before it sends anything.
func (c Config) Validate() error {
	_, err := c.validate()
	return err
}

// validate checks the configuration and returns the service URL of --url.
func (c Config) validate() (signer.ServiceURL, error) {
	var none signer.ServiceURL
	if !strings.Contains(c.URL, "://") {
		return none, fmt.Errorf("bench: --url %q: want http(s)://host[:port]%s", c.URL, hint.Scheme(c.URL))
	}
	svc, err := signer.ParseServiceURL(c.URL)
	if err != nil {
		return none, fmt.Errorf("bench: --url: %s", strings.TrimPrefix(err.Error(), "signer: "))
	}
	if c.Duration < 0 || c.Requests < 0 {
		return none, errors.New("bench: --duration and --requests must not be negative")
	}
	if c.Duration == 0 && c.Requests == 0 {
		return none, errors.New("bench: give --duration or --requests (a run must be bounded)")
	}
	if c.Concurrency < 1 || c.Concurrency > 10000 {
		return none, fmt.Errorf("bench: --concurrency %d: want 1 to 10000", c.Concurrency)
	}
	if c.Timeout <= 0 {
		return none, errors.New("bench: --timeout must be positive")
	}
	if c.Agents < 0 || c.Agents > MaxAgents {
		return none, fmt.Errorf("bench: --agents %d: want 1 to %d", c.Agents, MaxAgents)
	}
	if c.Agents > 1 && !slices.Contains(c.Targets, Whoami) {
		return none, errors.New("bench: --agents spreads the whoami target: run it (--target whoami or all)")
	}
	if c.Rate < 0 || c.Rate > 1e6 {
		return none, fmt.Errorf("bench: --rate %g: want 0 (closed loop) or up to 1000000 requests per second", c.Rate)
	}
	return svc, nil
}

// PresignSpan is how far into an open-loop run the last presigned /whoami
// request is due; 0 in the closed loop, whose pace is not known ahead. A
// signature made before the run expires signer.DefaultTTL after it is
// made.
func (c Config) PresignSpan() time.Duration {
	if c.Presign <= 0 || c.Rate <= 0 {
		return 0
	}
	n := min(int64(c.Presign), c.openLoopCount())
	return time.Duration(float64(n) / c.Rate * float64(time.Second))
}
