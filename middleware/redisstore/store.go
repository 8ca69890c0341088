// Package redisstore keeps the verifier's replay memory and agentlimit's
// token buckets in Redis, for API owners who run several instances: a nonce
// accepted by one is replayed at every other, and every instance spends
// from the same buckets. The proxy (proxyconfig's redis_url) uses both, on
// the one client Dial makes.
//
//	conn, err := redisstore.Dial(ctx, "redis://10.0.0.1:6379/0") // or "h1:6379,h2:6379,…": a cluster
//	replay, err := redisstore.NewReplay(redisstore.Config{Client: conn.Client()})
//	limits, err := redisstore.NewLimits(redisstore.Config{Client: conn.Client()})
//	v, err := middleware.New(middleware.Config{…, Replay: replay})
//	lim, err := agentlimit.New(agentlimit.Config{…, Store: limits})
//
// Every key is a prefix followed by the hex SHA-256 of the store's key, a
// fixed size whatever the key's length, with no hash tag, so keys spread
// over every slot of a cluster and each operation reads one key. A master
// that is down fails the requests whose keys live on it: the verifier
// closed (503), the limiter open. It lives apart from middleware and
// agentlimit so that they do not pull in a Redis client.
package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is what the stores need of a Redis client: every go-redis client
// (single node, cluster, ring, universal) has it.
type Client interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
	redis.Scripter
}

// Config configures a store.
type Config struct {
	// Client talks to Redis: a *redis.Client, a *redis.ClusterClient, or
	// what redis.NewUniversalClient returns for an address list (one
	// address: a single node; several: a cluster). Required.
	Client Client
	// Prefix is prepended to every stored key. If "", the store's default
	// (DefaultReplayPrefix, DefaultLimitPrefix). It must not contain a hash
	// tag ("{…}"), which would pin every key to one cluster slot.
	Prefix string
	// Now is the replay store's clock. If nil, time.Now is used.
	Now func() time.Time
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Client == nil {
		return errors.New("redisstore: Config.Client is required")
	}
	if strings.ContainsAny(c.Prefix, "{}") {
		return errors.New("redisstore: Config.Prefix must not contain a hash tag ({…}): every key would land in one cluster slot")
	}
	return nil
}

func (c Config) withDefaults(prefix string) Config {
	if c.Prefix == "" {
		c.Prefix = prefix
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// hashKey is the Redis key of key: prefix followed by the lowercase hex
// SHA-256 of key.
func hashKey(prefix, key string) string {
	sum := sha256.Sum256([]byte(key))
	b := make([]byte, len(prefix)+hex.EncodedLen(len(sum)))
	n := copy(b, prefix)
	hex.Encode(b[n:], sum[:])
	return string(b)
}
