package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultLimitPrefix is the limiter store's key prefix when Config.Prefix
// is "".
const DefaultLimitPrefix = "agentid:limit:"

// Limits is an agentlimit.Store on Redis: each bucket is one Redis hash
// updated by one Lua script that reads only that key, so it is atomic and
// works on a cluster; the script reads the time from Redis (TIME), so the
// instances' clocks do not matter. A bucket expires once it would be full
// again. It is safe for concurrent use.
type Limits struct {
	client redis.Scripter
	prefix string
}

// NewLimits validates cfg and returns a Limits.
func NewLimits(cfg Config) (*Limits, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults(DefaultLimitPrefix)
	return &Limits{client: cfg.Client, prefix: cfg.Prefix}, nil
}

// Key returns the Redis key of bucket key.
func (s *Limits) Key(key string) string { return hashKey(s.prefix, key) }

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
func (s *Limits) Take(ctx context.Context, key string, quota int, window time.Duration) (bool, float64, error) {
	out, err := take.Run(ctx, s.client, []string{s.Key(key)}, quota, window.Milliseconds()).Slice()
	if err != nil {
		return false, 0, fmt.Errorf("redisstore: %w", err)
	}
	if len(out) != 2 {
		return false, 0, fmt.Errorf("redisstore: unexpected script answer %v", out)
	}
	ok, _ := out[0].(int64)
	str, _ := out[1].(string)
	tokens, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return false, 0, fmt.Errorf("redisstore: unexpected script answer %v", out)
	}
	return ok == 1, tokens, nil
}
