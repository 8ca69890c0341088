package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/redis/go-redis/v9"
)

// DefaultReplayPrefix is the replay store's key prefix when Config.Prefix
// is "".
const DefaultReplayPrefix = "agentid:replay:"

// MinTTL is the shortest time a replay key is kept: an expiry closer than
// this (or in the past) is moved to now+MinTTL, as the in-memory store
// does.
const MinTTL = time.Second

// Replay is a middleware.ReplayStore on Redis. It is safe for concurrent
// use.
type Replay struct {
	cfg Config
}

var _ middleware.ReplayStore = (*Replay)(nil)

// NewReplay validates cfg and returns a Replay.
func NewReplay(cfg Config) (*Replay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Replay{cfg: cfg.withDefaults(DefaultReplayPrefix)}, nil
}

// Key returns the Redis key that Seen stores for key.
func (s *Replay) Key(key string) string { return hashKey(s.cfg.Prefix, key) }

// Seen implements middleware.ReplayStore with one round trip:
//
//	SET <prefix><hex sha-256 of key> 1 NX PXAT <expiry in unix ms>
//
// SET NX is atomic in Redis: of concurrent calls with one key exactly one
// creates it (and reports false); Redis drops the key at expiry. Errors
// (Redis or the key's cluster master down, ctx done) wrap
// middleware.ErrReplayStore.
func (s *Replay) Seen(ctx context.Context, key string, expiry time.Time) (bool, error) {
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
	return false, fmt.Errorf("%w: redisstore: %w", middleware.ErrReplayStore, err)
}
