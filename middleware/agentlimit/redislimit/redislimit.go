// Package redislimit is an agentlimit.Store on Redis, for API owners who run
// several instances: every instance spends from the same buckets.
//
//	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"10.0.0.1:6379"}})
//	store, err := redislimit.New(redislimit.Config{Client: rdb})
//	lim, err := agentlimit.New(agentlimit.Config{Agent: agentlimit.Limit{Quota: 100, Window: time.Minute}, Store: store})
//
// Each bucket is one Redis hash, named Prefix + the hex SHA-256 of the
// bucket key, updated by one Lua script that reads only that key: the
// script is atomic, and works on a Redis Cluster (no hash tag, no
// multi-key operation). The script reads the time from Redis (TIME), so
// the instances' clocks do not matter. A bucket expires once it would be
// full again.
//
// It lives in its own package so that agentlimit does not pull in a Redis
// client.
package redislimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the key prefix used when Config.Prefix is "".
const DefaultPrefix = "agentid:limit:"

// Config configures a Store.
type Config struct {
	// Client talks to Redis: a *redis.Client, a *redis.ClusterClient or a
	// redis.UniversalClient. Required.
	Client redis.Scripter
	// Prefix is prepended to every key. If "", DefaultPrefix. It must not
	// contain a hash tag ("{…}").
	Prefix string
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Client == nil {
		return errors.New("redislimit: Config.Client is required")
	}
	if strings.ContainsAny(c.Prefix, "{}") {
		return errors.New("redislimit: Config.Prefix must not contain a hash tag ({…}): every key would land in one cluster slot")
	}
	return nil
}

// Store is an agentlimit.Store on Redis. It is safe for concurrent use.
type Store struct {
	client redis.Scripter
	prefix string
}

var _ agentlimit.Store = (*Store)(nil)

// New validates cfg and returns a Store.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	return &Store{client: cfg.Client, prefix: cfg.Prefix}, nil
}

// Key returns the Redis key of bucket key.
func (s *Store) Key(key string) string {
	sum := sha256.Sum256([]byte(key))
	return s.prefix + hex.EncodeToString(sum[:])
}

// take refills and spends one token of the bucket KEYS[1] (a hash of t, the
// last update in ms, and n, the tokens then). ARGV: quota, window in ms.
// It returns {1 or 0, tokens left as a string}.
var take = redis.NewScript(`
local quota = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local rate = quota / window
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local v = redis.call('HMGET', KEYS[1], 't', 'n')
local tokens = quota
if v[1] and v[2] then
  local last = tonumber(v[1])
  tokens = tonumber(v[2])
  if now > last then tokens = math.min(quota, tokens + (now - last) * rate) end
end
local ok = 0
if tokens >= 1 then
  tokens = tokens - 1
  ok = 1
end
redis.call('HSET', KEYS[1], 't', now, 'n', string.format('%.6f', tokens))
redis.call('PEXPIRE', KEYS[1], math.ceil((quota - tokens) / rate) + 1000)
return {ok, string.format('%.6f', tokens)}
`)

// Take implements agentlimit.Store with one round trip (EVALSHA, falling
// back to EVAL the first time). Errors (Redis or the key's cluster master
// down, ctx done) are returned; the limiter then lets the request through.
func (s *Store) Take(ctx context.Context, key string, quota int, window time.Duration) (bool, float64, error) {
	out, err := take.Run(ctx, s.client, []string{s.Key(key)}, quota, window.Milliseconds()).Slice()
	if err != nil {
		return false, 0, fmt.Errorf("redislimit: %w", err)
	}
	if len(out) != 2 {
		return false, 0, fmt.Errorf("redislimit: unexpected script answer %v", out)
	}
	ok, _ := out[0].(int64)
	str, _ := out[1].(string)
	tokens, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return false, 0, fmt.Errorf("redislimit: unexpected script answer %v", out)
	}
	return ok == 1, tokens, nil
}
