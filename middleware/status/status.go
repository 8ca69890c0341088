// Package status is a status page for API owners: who is calling and what
// the verifier said, as server-rendered HTML with an inline SVG chart, no
// JavaScript and no external assets. The server (refserver) and the proxy
// (proxyconfig) both serve it, so it sits beside the verifier, not under
// either of them. It is fed by the verifier's Config.OnResult hook and
// keeps fixed memory: a per-minute ring buffer of outcomes over the last
// hour, a space-saving top-N sketch of agents, and counts by outcome and
// reason (docs/outcomes.md) of the requests not verified and of every
// refusal.
//
//	page := status.New(status.Config{})
//	v, _ := middleware.New(middleware.Config{Keys: keys, OnResult: page.Observe})
//	mux.Handle("/status", page) // on an internal listener
package status

import (
	"cmp"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/agentid/agentid/middleware"
)

// Defaults of Config.
const (
	// DefaultTopAgents is the number of agents the page lists.
	DefaultTopAgents = 10
	// DefaultSketchSize is the number of counters of the top-agents
	// sketch: an agent with more than 1/DefaultSketchSize of the traffic is
	// always in it.
	DefaultSketchSize = 100
	// Minutes is the span of the chart.
	Minutes = 60
)

// Config configures a Page.
type Config struct {
	// TopAgents is the number of agents listed. If 0, DefaultTopAgents.
	TopAgents int
	// SketchSize is the number of agents tracked (fixed memory). If 0,
	// DefaultSketchSize; at least TopAgents.
	SketchSize int
	// Title heads the page. If "", "agentid status".
	Title string
	// Now is the clock. If nil, time.Now is used.
	Now func() time.Time
	// AgentName, if set, names the listed agents next to their identity:
	// given an agent's key-set URL (middleware.Agent.DirectoryURL), it
	// returns its name, "" for none, such as the name its Signature Agent
	// Card gives ((*keyfetch.Fetcher).AgentName). It is called when a
	// snapshot is taken, for the listed agents only, and must be safe for
	// concurrent use.
	AgentName func(keySetURL string) (name, purpose string)
	// UID, if set, gives the uid of an agentid service's agent from its
	// identity, "" for other agents ((*proxy.Handler).UID, which knows the
	// services whose uids X-Agent-Uid carries); the page then names such
	// agents by uid. Like AgentName it is called for the listed agents
	// when a snapshot is taken, and must be safe for concurrent use.
	UID func(identity string) string
}

// outcomes are the outcomes in the order of counts arrays.
var outcomes = [4]middleware.Outcome{middleware.OutcomeVerified, middleware.OutcomeNotPresent, middleware.OutcomeUnverified, middleware.OutcomeInvalid}

// outcomeIndex numbers o in counts arrays; an outcome outside the four
// counts as invalid.
func outcomeIndex(o middleware.Outcome) int {
	for i, x := range outcomes {
		if o == x {
			return i
		}
	}
	return 3
}

// reasonKey is a row of the reason tables: bounded by the four outcomes
// and the fixed set of reasons.
type reasonKey struct {
	outcome middleware.Outcome
	reason  string
}

func keyOf(o middleware.Outcome, c middleware.Code) reasonKey {
	return reasonKey{outcomes[outcomeIndex(o)], c.Reason()}
}

// minute is one slot of the ring buffer.
type minute struct {
	at       int64 // unix minute the slot holds
	verdicts [4]uint64
	fetchErr uint64 // key_fetch_failed outcomes
}

// Page collects outcomes and serves the status page. It is safe for
// concurrent use.
type Page struct {
	cfg     Config
	started time.Time

	mu       sync.Mutex
	ring     [Minutes]minute
	sketch   sketch
	reasons  map[reasonKey]uint64 // requests not verified
	refusals map[reasonKey]uint64
	total    [4]uint64
	fetchOK  uint64 // verified outcomes (each used a key)
	fetchErr uint64
	lastErr  time.Time
}

// New returns an empty Page.
func New(cfg Config) *Page {
	if cfg.TopAgents <= 0 {
		cfg.TopAgents = DefaultTopAgents
	}
	if cfg.SketchSize <= 0 {
		cfg.SketchSize = DefaultSketchSize
	}
	cfg.SketchSize = max(cfg.SketchSize, cfg.TopAgents)
	if cfg.Title == "" {
		cfg.Title = "agentid status"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Page{cfg: cfg, started: cfg.Now(), sketch: newSketch(cfg.SketchSize), reasons: map[reasonKey]uint64{}, refusals: map[reasonKey]uint64{}}
}

// Observe records one outcome, and a refusal when the verifier refused
// the request (res.Passed false); install it as the verifier's
// Config.OnResult (or call it from there).
func (p *Page) Observe(res middleware.Result) {
	now := p.cfg.Now()
	m := now.Unix() / 60
	vi := outcomeIndex(res.Outcome)
	p.mu.Lock()
	defer p.mu.Unlock()
	slot := &p.ring[m%Minutes]
	if slot.at != m {
		*slot = minute{at: m}
	}
	slot.verdicts[vi]++
	p.total[vi]++
	if vi != 0 && res.Err != nil {
		k := keyOf(res.Outcome, res.Err.Code)
		p.reasons[k]++
		if !res.Passed {
			p.refusals[k]++
		}
		if res.Err.Code == middleware.CodeKeyFetchFailed {
			slot.fetchErr++
			p.fetchErr++
			p.lastErr = now
		}
	}
	if vi == 0 {
		p.fetchOK++
	}
	if id := res.Agent.ID; id != "" {
		p.sketch.add(id, res.Agent.DirectoryURL, vi)
	}
}

// ObserveRefusal counts a refusal the verifier did not make: by rules
// after verification (a verifier in Observe mode, such as 403 forbidden
// by an allow list, 429 rate_limited, or 401 missing_signature on a
// required route), or before it (a path that is not normal). outcome is
// the request's (the error's own, e.Outcome(), when it was not
// verified); the row is the reason of code. Observe counts the refusals
// the verifier makes itself.
func (p *Page) ObserveRefusal(outcome middleware.Outcome, code middleware.Code) {
	p.mu.Lock()
	p.refusals[keyOf(outcome, code)]++
	p.mu.Unlock()
}

// Snapshot is what the page shows.
type Snapshot struct {
	Title   string
	Now     time.Time
	Since   time.Time
	Minutes []MinuteCounts // oldest first, Minutes entries ending now
	Totals  VerdictCounts  // since start
	Hour    VerdictCounts  // over the chart's hour
	Agents  []AgentCounts  // top agents, most requests first
	// Reasons counts the requests not verified by outcome and reason,
	// Refusals every refusal; most frequent first.
	Reasons, Refusals []ReasonCount
	Fetch             FetchHealth
}

// VerdictCounts counts requests by outcome (docs/outcomes.md).
type VerdictCounts struct {
	Verified, NotPresent, Unverified, Invalid uint64
}

// Total is the sum of the counts.
func (c VerdictCounts) Total() uint64 { return c.Verified + c.NotPresent + c.Unverified + c.Invalid }

func countsOf(a [4]uint64) VerdictCounts {
	return VerdictCounts{Verified: a[0], NotPresent: a[1], Unverified: a[2], Invalid: a[3]}
}

// MinuteCounts is one minute of the chart.
type MinuteCounts struct {
	Start time.Time
	VerdictCounts
}

// AgentCounts is one row of the top agents. Requests may overcount by at
// most Error (the space-saving sketch's bound); the verdict counts are
// exact since the agent entered the sketch.
type AgentCounts struct {
	ID string
	// UID is what Config.UID says of the agent, "" without it.
	UID string
	// Name and Purpose are what Config.AgentName says of the agent, ""
	// without it.
	Name, Purpose string
	// KeySetURL is the key-set URL the agent's first counted request was
	// verified with.
	KeySetURL string
	Requests  uint64
	Error     uint64
	VerdictCounts
}

// ReasonCount is one row of a reason table: an outcome and a reason.
type ReasonCount struct {
	Outcome middleware.Outcome
	Reason  string
	Count   uint64
}

// FetchHealth summarises key fetches: verified requests (each found its
// key) against key_fetch_failed outcomes.
type FetchHealth struct {
	OK, Failed, FailedHour uint64
	LastFailure            time.Time
}

// Snapshot returns the current state.
func (p *Page) Snapshot() Snapshot {
	now := p.cfg.Now()
	cur := now.Unix() / 60
	s := Snapshot{Title: p.cfg.Title, Now: now, Since: p.started}
	p.mu.Lock()
	var hour [4]uint64
	for i := range Minutes {
		m := cur - Minutes + 1 + int64(i)
		mc := MinuteCounts{Start: time.Unix(m*60, 0).UTC()}
		if slot := p.ring[m%Minutes]; slot.at == m {
			mc.VerdictCounts = countsOf(slot.verdicts)
			for v := range hour {
				hour[v] += slot.verdicts[v]
			}
			s.Fetch.FailedHour += slot.fetchErr
		}
		s.Minutes = append(s.Minutes, mc)
	}
	s.Hour, s.Totals = countsOf(hour), countsOf(p.total)
	s.Agents = p.sketch.top(p.cfg.TopAgents)
	s.Reasons, s.Refusals = sortedCounts(p.reasons), sortedCounts(p.refusals)
	s.Fetch.OK, s.Fetch.Failed, s.Fetch.LastFailure = p.fetchOK, p.fetchErr, p.lastErr
	p.mu.Unlock()
	for i := range s.Agents { // outside the lock: Observe never waits for these
		a := &s.Agents[i]
		if p.cfg.AgentName != nil && a.KeySetURL != "" {
			a.Name, a.Purpose = p.cfg.AgentName(a.KeySetURL)
		}
		if p.cfg.UID != nil {
			a.UID = p.cfg.UID(a.ID)
		}
	}
	return s
}

// sortedCounts returns m's rows, most frequent first.
func sortedCounts(m map[reasonKey]uint64) []ReasonCount {
	out := make([]ReasonCount, 0, len(m))
	for k, n := range m {
		out = append(out, ReasonCount{k.outcome, k.reason, n})
	}
	slices.SortFunc(out, func(a, b ReasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Outcome, b.Outcome), cmp.Compare(a.Reason, b.Reason))
	})
	return out
}

// ContentSecurityPolicy is sent with the page: nothing may load, no script
// may run; only the inline styles and data: images are allowed.
const ContentSecurityPolicy = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

// ServeHTTP serves the page (GET and HEAD).
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		middleware.WriteError(w, r, middleware.Fail(middleware.CodeMethodNotAllowed, "use GET"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if r.Method == http.MethodHead {
		return
	}
	render(w, p.Snapshot())
}
