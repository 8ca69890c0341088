// Package ratelimit is the one token bucket of the module. Buckets holds
// buckets in memory, bounded in number and fixed in size whatever their
// keys; agentlimit's MemoryStore keeps its budgets in one. Limiter limits
// requests per client address (middleware/clientaddr) with it, answering
// 429 rate_limited with Retry-After: the reference server puts it in front
// of registration (POST /agents).
//
//	lim, err := ratelimit.New(ratelimit.Config{Rate: 1, Burst: 20})
//	router.Handle("/agents", lim.Middleware(register)).Methods("POST")
package ratelimit

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/clientaddr"
)

// CodeRateLimited is the error code of a request over its limit (429),
// shared with the per-agent limits of middleware/agentlimit.
const CodeRateLimited = middleware.CodeRateLimited

// Defaults applied by New.
const (
	// DefaultRate is one token per second per client.
	DefaultRate = 1.0
	// DefaultBurst is the bucket size: a fresh client may make this many
	// requests at once.
	DefaultBurst = 20
	// DefaultMaxClients bounds the number of buckets kept in memory.
	DefaultMaxClients = 100_000
)

// Config configures a Limiter.
type Config struct {
	// Rate is the sustained number of requests per second allowed per
	// client. If 0, DefaultRate (1/s).
	Rate float64
	// Burst is the bucket size. If 0, DefaultBurst (20).
	Burst int
	// TrustedProxies lists the reverse proxies (CIDRs such as "10.0.0.0/8",
	// or single addresses) whose ClientAddrHeader is believed. If empty,
	// the header is never read.
	TrustedProxies []string
	// ClientAddrHeader is the header the trusted proxies append the client
	// address to. If "", X-Forwarded-For.
	ClientAddrHeader string
	// MaxClients bounds the buckets held. When full, buckets that have
	// refilled are dropped first, then an arbitrary one. If 0,
	// DefaultMaxClients.
	MaxClients int
	// IdleTimeout is how long an unused bucket that has refilled is kept
	// (buckets are swept once per IdleTimeout). If 0, the time a bucket
	// takes to refill completely (Burst/Rate), but at least a minute.
	// Dropping a full bucket changes nothing.
	IdleTimeout time.Duration
	// Now is the clock. If nil, time.Now is used.
	Now func() time.Time
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		return fmt.Errorf("ratelimit: Config.Rate %v must be a positive number", c.Rate)
	}
	if c.Burst < 0 || c.MaxClients < 0 || c.IdleTimeout < 0 {
		return errors.New("ratelimit: Config.Burst, MaxClients and IdleTimeout must not be negative")
	}
	_, err := parsePrefixes(c.TrustedProxies)
	return err
}

func (c Config) withDefaults() Config {
	c.Rate = cmp.Or(c.Rate, DefaultRate)
	c.Burst = cmp.Or(c.Burst, DefaultBurst)
	c.MaxClients = cmp.Or(c.MaxClients, DefaultMaxClients)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, max(time.Duration(float64(c.Burst)/c.Rate*float64(time.Second)), time.Minute))
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// parsePrefixes reads TrustedProxies (empty entries skipped).
func parsePrefixes(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		if strings.TrimSpace(s) == "" {
			continue
		}
		p, err := clientaddr.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("ratelimit: trusted proxy %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// Limiter holds one token bucket per client address. It is safe for
// concurrent use.
type Limiter struct {
	cfg     Config
	client  *clientaddr.Reader
	buckets *Buckets
}

// New validates cfg and returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	trusted, _ := parsePrefixes(cfg.TrustedProxies)
	buckets := NewBuckets(BucketsConfig{MaxKeys: cfg.MaxClients, Idle: cfg.IdleTimeout, Now: cfg.Now})
	return &Limiter{cfg: cfg, client: clientaddr.New(trusted, cfg.ClientAddrHeader), buckets: buckets}, nil
}

// Allow takes a token from key's bucket. It reports whether one was
// available and, when not, how long until one is.
func (l *Limiter) Allow(key string) (bool, time.Duration) {
	ok, tokens := l.buckets.Take(key, l.cfg.Burst, l.cfg.Rate)
	if ok {
		return true, 0
	}
	return false, time.Duration((1 - tokens) / l.cfg.Rate * float64(time.Second))
}

// Len returns the number of buckets held.
func (l *Limiter) Len() int { return l.buckets.Len() }

// ClientAddr returns the address r is limited by (clientaddr.Reader.Key).
func (l *Limiter) ClientAddr(r *http.Request) string { return l.client.Key(r) }

// Check takes a token from the bucket of r's client. When none is left it
// sets a Retry-After header on w, in whole seconds (at least 1), and returns
// the 429 rate_limited *middleware.Error for the caller to write; else nil.
func (l *Limiter) Check(w http.ResponseWriter, r *http.Request) error {
	ok, wait := l.Allow(l.ClientAddr(r))
	if ok {
		return nil
	}
	secs := max(int64(math.Ceil(wait.Seconds())), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	return &middleware.Error{
		Code:    CodeRateLimited,
		Message: fmt.Sprintf("too many requests from this address; retry after %d s", secs),
	}
}

// Middleware limits next per client address. A client over its limit gets
// 429 with the JSON error body (code rate_limited) and a Retry-After header
// in whole seconds (at least 1): see Check.
func (l *Limiter) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := l.Check(w, r); err != nil {
			middleware.WriteError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ParseRate parses a limit written as "N/s", "N/m" or "N/h" (N a positive
// number, e.g. "10/s", "600/m") into requests per second. "off", "0" and ""
// return 0 with ok false: no limiting.
func ParseRate(s string) (perSecond float64, ok bool, err error) {
	s = strings.TrimSpace(strings.ToLower(s))
	if s == "" || s == "off" || s == "0" || s == "none" {
		return 0, false, nil
	}
	num, unit, found := strings.Cut(s, "/")
	if !found {
		unit = "s"
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n <= 0 || math.IsInf(n, 0) || math.IsNaN(n) {
		return 0, false, fmt.Errorf("ratelimit: rate %q: want N/s, N/m, N/h or off", s)
	}
	switch unit {
	case "s", "sec", "second":
		return n, true, nil
	case "m", "min", "minute":
		return n / 60, true, nil
	case "h", "hour":
		return n / 3600, true, nil
	}
	return 0, false, fmt.Errorf("ratelimit: rate %q: unknown unit %q (want s, m or h)", s, unit)
}
