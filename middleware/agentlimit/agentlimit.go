// Package agentlimit limits requests per verified agent with a token bucket:
// each agent identity (or, when configured, each value of a header its
// signature covers) gets its own budget, and traffic that is not verified is
// limited per client address. A request over its budget gets 429
// rate_limited with Retry-After; every limited answer carries the
// RateLimit-Policy and RateLimit fields of the IETF HTTPAPI draft
// (draft-ietf-httpapi-ratelimit-headers).
//
//	lim, err := agentlimit.New(agentlimit.Config{
//		Agent:   agentlimit.Limit{Quota: 100, Window: time.Minute},
//		Address: agentlimit.Limit{Quota: 20, Window: time.Minute},
//	})
//	http.Handle("/", verifier.Middleware(lim.Middleware(handler)))
//
// Buckets live in memory (one process) unless Config.Store names a shared
// store, such as middleware/redisstore's Limits for several instances.
package agentlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/clientaddr"
	"github.com/agentid/agentid/middleware/policy"
)

// Policy names, as sent in RateLimit-Policy and RateLimit.
const (
	// PolicyAgent is the per-agent budget of verified requests.
	PolicyAgent = "agent"
	// PolicyAddress is the per-address budget of requests that are not
	// verified (unsigned, or invalid where they are let through).
	PolicyAddress = "address"
)

// Limit is a budget: Quota requests per Window, refilled continuously
// (a token bucket of Quota tokens refilled at Quota/Window per second). The
// zero Limit means no limit.
type Limit struct {
	Quota  int
	Window time.Duration
}

// On reports whether l limits anything.
func (l Limit) On() bool { return l.Quota > 0 }

// Rate returns l's refill rate in tokens per second.
func (l Limit) Rate() float64 { return float64(l.Quota) / l.Window.Seconds() }

func (l Limit) validate(name string) error {
	if l.Quota < 0 {
		return fmt.Errorf("agentlimit: Config.%s.Quota %d must not be negative", name, l.Quota)
	}
	if l.Quota > 0 && l.Window < time.Second {
		return fmt.Errorf("agentlimit: Config.%s.Window %v must be at least one second", name, l.Window)
	}
	return nil
}

// Store holds token buckets. Implementations must be safe for concurrent
// use; Take must be atomic per key (two concurrent takes of a bucket holding
// one token cannot both succeed).
type Store interface {
	// Take refills the bucket named key (quota tokens at most, refilled at
	// quota per window) and takes one token from it if it holds one. It
	// returns whether a token was taken and the tokens left afterwards. A
	// bucket not seen before starts full.
	Take(ctx context.Context, key string, quota int, window time.Duration) (ok bool, tokens float64, err error)
}

// Config configures a Limiter.
type Config struct {
	// Agent is the budget of each verified agent. If zero, verified
	// requests are not limited.
	Agent Limit
	// Address is the budget of each client address for requests that are
	// not verified. If zero, they are not limited.
	Address Limit
	// KeyHeader, if set, splits an agent's budget by the value of this
	// request header when the agent's signature covers it (for example
	// "Signed-Agent-Metadata", naming the operator or product on whose
	// behalf the agent acts). A request whose signature does not cover the
	// header shares the agent's own budget. The value is the agent's own
	// choice, new with every request if it likes: it is hashed onto one of
	// BucketsPerAgent buckets of the agent, so an agent has at most that
	// many budgets whatever it sends, and two values may share one.
	KeyHeader string
	// BucketsPerAgent caps the KeyHeader buckets of one agent. If 0,
	// DefaultBucketsPerAgent.
	BucketsPerAgent int
	// Services are the base URLs of the agentid services whose agents
	// have a budget per uid (policy.Services); other agents have one
	// per key-set host (policy.Identity.Budget).
	Services []string
	// Store holds the buckets. If nil, a MemoryStore (this process only).
	Store Store
	// ClientAddr returns the address unsigned traffic is limited by. If
	// nil, the connection's peer address, with IPv6 grouped by /64; behind
	// load balancers, clientaddr.New(trusted, header).Key.
	ClientAddr func(*http.Request) string
	// Logger receives store failures (a request is then let through:
	// limits fail open). If nil, discard.
	Logger *slog.Logger
}

// DefaultBucketsPerAgent is the default of Config.BucketsPerAgent.
const DefaultBucketsPerAgent = 64

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.BucketsPerAgent < 0 {
		errs = append(errs, fmt.Errorf("agentlimit: Config.BucketsPerAgent %d must not be negative", c.BucketsPerAgent))
	}
	if _, err := policy.ParseServices(c.Services); err != nil {
		errs = append(errs, fmt.Errorf("agentlimit: Config.Services: %w", err))
	}
	return errors.Join(append(errs, c.Agent.validate("Agent"), c.Address.validate("Address"))...)
}

// Limiter applies per-agent and per-address budgets. It is safe for
// concurrent use.
type Limiter struct {
	cfg       Config
	keyHeader string // lowercase, as covered components are serialized
	services  policy.Services
}

// New validates cfg and returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Store == nil {
		cfg.Store = NewMemoryStore(MemoryConfig{})
	}
	if cfg.ClientAddr == nil {
		cfg.ClientAddr = clientaddr.New(nil, "").Key
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.BucketsPerAgent == 0 {
		cfg.BucketsPerAgent = DefaultBucketsPerAgent
	}
	services, _ := policy.ParseServices(cfg.Services)
	return &Limiter{cfg: cfg, keyHeader: strings.ToLower(strings.TrimSpace(cfg.KeyHeader)), services: services}, nil
}

// Decision is the outcome of one Take.
type Decision struct {
	// Limited reports whether a budget applied to the request; when false
	// the other fields are zero and no header is written.
	Limited bool
	// Allowed reports whether the request may go on.
	Allowed bool
	// Policy is PolicyAgent or PolicyAddress.
	Policy string
	// Limit is the budget that applied.
	Limit Limit
	// Remaining is the whole number of requests left in the bucket.
	Remaining int
	// Reset is how long until the bucket is full again.
	Reset time.Duration
	// RetryAfter is how long until the next request would be allowed
	// (zero when Allowed).
	RetryAfter time.Duration
}

// Key returns the bucket name and policy of a request with outcome res (nil
// or not verified: by client address). The bucket of a verified agent is
// named by what its owner cannot vary at will
// (policy.Identity.Budget: its uid for an agent of
// Config.Services, else the host of its key set), followed by one of
// BucketsPerAgent slots chosen by the KeyHeader value when the signature
// covers it. Every name is short (bounded whatever the request carries),
// and stores hash it to a fixed size.
func (l *Limiter) Key(r *http.Request, res *middleware.Result) (key, policy string) {
	if res != nil && res.Outcome == middleware.OutcomeVerified {
		// One allocation for the whole name: the buffer stays on the
		// stack unless a name outgrows it.
		var buf [96]byte
		b := l.services.Identity(res.Agent).AppendBudget(append(buf[:0], "agent "...))
		if l.keyHeader != "" {
			if v := r.Header.Get(l.keyHeader); v != "" && covers(res.Agent.Components, l.keyHeader) {
				b = strconv.AppendUint(append(b, " #"...), fnv64(v)%uint64(l.cfg.BucketsPerAgent), 10)
			}
		}
		key = string(b)
		return key, PolicyAgent
	}
	return "addr " + l.cfg.ClientAddr(r), PolicyAddress
}

// fnv64 is FNV-1a over s: the same in every instance (buckets in a shared
// store agree), without allocating whatever the length of s.
func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// covers reports whether the serialized component list names header name
// (bare or with parameters).
func covers(components []string, name string) bool {
	for _, c := range components {
		if len(c) >= len(name)+2 && c[0] == '"' && c[len(name)+1] == '"' && c[1:len(name)+1] == name {
			return true
		}
	}
	return false
}

// Take spends one request of r's budget: its agent's when res is verified,
// else its client address's. A store failure is logged and the request
// allowed (unlimited Decision).
func (l *Limiter) Take(r *http.Request, res *middleware.Result) Decision {
	key, policy := l.Key(r, res)
	lim := l.cfg.Address
	if policy == PolicyAgent {
		lim = l.cfg.Agent
	}
	if !lim.On() {
		return Decision{}
	}
	ok, tokens, err := l.cfg.Store.Take(r.Context(), key, lim.Quota, lim.Window)
	if err != nil {
		l.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn, "rate limit store failed; request let through",
			slog.String("policy", policy), slog.String("error", err.Error()))
		return Decision{}
	}
	d := Decision{Limited: true, Allowed: ok, Policy: policy, Limit: lim}
	tokens = max(0, min(tokens, float64(lim.Quota)))
	d.Remaining = int(math.Floor(tokens))
	rate := lim.Rate()
	d.Reset = time.Duration((float64(lim.Quota) - tokens) / rate * float64(time.Second))
	if !ok {
		d.RetryAfter = time.Duration((1 - tokens) / rate * float64(time.Second))
	}
	return d
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	return int64(math.Ceil(d.Seconds()))
}

// SetHeaders writes the RateLimit-Policy and RateLimit fields, and
// Retry-After (whole seconds, at least 1) when the request is refused:
//
//	RateLimit-Policy: "agent";q=100;w=60
//	RateLimit: "agent";r=42;t=10
//
// t is the number of seconds until the bucket is full again.
func (d Decision) SetHeaders(h http.Header) {
	if !d.Limited {
		return
	}
	h.Set("RateLimit-Policy", `"`+d.Policy+`";q=`+strconv.Itoa(d.Limit.Quota)+";w="+strconv.FormatInt(ceilSeconds(d.Limit.Window), 10))
	h.Set("RateLimit", `"`+d.Policy+`";r=`+strconv.Itoa(d.Remaining)+";t="+strconv.FormatInt(ceilSeconds(d.Reset), 10))
	if !d.Allowed {
		h.Set("Retry-After", strconv.FormatInt(max(ceilSeconds(d.RetryAfter), 1), 10))
	}
}

// Err returns the 429 rate_limited refusal of a request that is not
// allowed, else nil.
func (d Decision) Err() *middleware.Error {
	if !d.Limited || d.Allowed {
		return nil
	}
	who := "this agent"
	if d.Policy == PolicyAddress {
		who = "this address"
	}
	return middleware.Fail(middleware.CodeRateLimited, "too many requests from %s (%d per %s); retry after %d s",
		who, d.Limit.Quota, d.Limit.Window, max(ceilSeconds(d.RetryAfter), 1))
}

// Middleware limits next by the verification outcome the verifier's
// middleware stored in the request context (middleware.ResultFrom); put it
// inside the verifier. A request over its budget gets 429 with the JSON
// error body.
func (l *Limiter) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var res *middleware.Result
		if got, ok := middleware.ResultFrom(r.Context()); ok {
			res = &got
		}
		d := l.Take(r, res)
		d.SetHeaders(w.Header())
		if err := d.Err(); err != nil {
			middleware.WriteError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}
