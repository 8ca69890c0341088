// Package redisreplay is a middleware.ReplayStore on Redis, for API owners who
// run the verification middleware on several machines: a nonce accepted by
// one instance is then rejected as replayed by every other.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	store, err := redisreplay.New(redisreplay.Config{Client: rdb})
//	mw := middleware.New(middleware.Config{Keys: keys, Replay: store})
//
// It lives in its own package so that the core middleware does not pull in
// a Redis client.
package redisreplay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the key prefix used when Config.Prefix is "".
const DefaultPrefix = "agentid:replay:"

// MinTTL is the shortest time a key is kept: an expiry closer than this (or
// in the past) is moved to now+MinTTL, as the in-memory store does.
const MinTTL = time.Second

// Client is the part of a go-redis client the store uses. *redis.Client,
// *redis.ClusterClient, *redis.Ring and redis.UniversalClient satisfy it.
type Client interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// Config configures a Store.
type Config struct {
	// Client talks to Redis. Required.
	Client Client
	// Prefix is prepended to every key. If "", DefaultPrefix.
	Prefix string
	// Now is the clock. If nil, time.Now is used.
	Now func() time.Time
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Client == nil {
		return errors.New("redisreplay: Config.Client is required")
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
	cfg Config
}

var _ middleware.ReplayStore = (*Store)(nil)

// New validates cfg and returns a Store.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{cfg: cfg.withDefaults()}, nil
}

// Seen implements middleware.ReplayStore with one round trip:
//
//	SET <prefix><key> 1 NX PXAT <expiry in unix ms>
//
// SET NX is atomic in Redis: of concurrent calls with one key exactly one
// creates it (and reports false); Redis drops the key at expiry. Errors
// (Redis down, ctx done) wrap middleware.ErrReplayStore.
func (s *Store) Seen(ctx context.Context, key string, expiry time.Time) (bool, error) {
	if min := s.cfg.Now().Add(MinTTL); expiry.Before(min) {
		expiry = min
	}
	err := s.cfg.Client.Do(ctx, "SET", s.cfg.Prefix+key, "1", "NX", "PXAT", expiry.UnixMilli()).Err()
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, redis.Nil):
		return true, nil
	}
	return false, fmt.Errorf("%w: redisreplay: %w", middleware.ErrReplayStore, err)
}
