// Package redisreplay is a middleware.ReplayStore on Redis, for API owners who
// run the verification middleware on several machines: a nonce accepted by
// one instance is then rejected as replayed by every other.
//
//	// One address: a single Redis. Several: a Redis Cluster (any of its masters).
//	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"}})
//	store, err := redisreplay.New(redisreplay.Config{Client: rdb})
//	v, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{"api.example.com"}, Replay: store})
//
// Each replay key is stored as Prefix + the hex SHA-256 of the key (64
// characters, whatever the nonce's length), with no hash tag, so the keys
// spread over every slot of a cluster. A master that is down makes the
// requests whose keys live on it fail closed (503 from the middleware),
// never accepted unchecked.
//
// It lives in its own package so that the core middleware does not pull in
// a Redis client.
package redisreplay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the key prefix used when Config.Prefix is "".
const DefaultPrefix = "agentid:replay:"

// MinTTL is the shortest time a key is kept: an expiry closer than this (or
// in the past) is moved to now+MinTTL, as the in-memory store does.
const MinTTL = time.Second

// Client is what a Store needs of a Redis client: every go-redis client
// (single node, cluster, ring, universal) has it.
type Client interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// Config configures a Store.
type Config struct {
	// Client talks to Redis: a *redis.Client, a *redis.ClusterClient, or
	// what redis.NewUniversalClient returns for an address list (one
	// address: a single node; several: a cluster). Required.
	Client Client
	// Prefix is prepended to every stored key. If "", DefaultPrefix. It
	// must not contain a hash tag ("{…}"), which would pin every key to
	// one cluster slot.
	Prefix string
	// Now is the clock. If nil, time.Now is used.
	Now func() time.Time
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Client == nil {
		return errors.New("redisreplay: Config.Client is required")
	}
	if strings.ContainsAny(c.Prefix, "{}") {
		return errors.New("redisreplay: Config.Prefix must not contain a hash tag ({…}): every key would land in one cluster slot")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Store is a middleware.ReplayStore on Redis. It is safe for concurrent use.
type Store struct {
	cfg   Config
	name  string                // Dial's description of the server
	owned redis.UniversalClient // the client Dial made, closed by Close
}

var _ middleware.ReplayStore = (*Store)(nil)

// New validates cfg and returns a Store.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{cfg: cfg.withDefaults()}, nil
}

// Key returns the Redis key that Seen stores for key: Prefix followed by
// the lowercase hex SHA-256 of key.
func (s *Store) Key(key string) string {
	sum := sha256.Sum256([]byte(key))
	b := make([]byte, len(s.cfg.Prefix)+hex.EncodedLen(len(sum)))
	n := copy(b, s.cfg.Prefix)
	hex.Encode(b[n:], sum[:])
	return string(b)
}

// Seen implements middleware.ReplayStore with one round trip:
//
//	SET <prefix><hex sha-256 of key> 1 NX PXAT <expiry in unix ms>
//
// SET NX is atomic in Redis: of concurrent calls with one key exactly one
// creates it (and reports false); Redis drops the key at expiry. Errors
// (Redis or the key's cluster master down, ctx done) wrap
// middleware.ErrReplayStore.
func (s *Store) Seen(ctx context.Context, key string, expiry time.Time) (bool, error) {
	if min := s.cfg.Now().Add(MinTTL); expiry.Before(min) {
		expiry = min
	}
	err := s.cfg.Client.Do(ctx, "SET", s.Key(key), "1", "NX", "PXAT", expiry.UnixMilli()).Err()
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, redis.Nil):
		return true, nil
	}
	return false, fmt.Errorf("%w: redisreplay: %w", middleware.ErrReplayStore, err)
}
