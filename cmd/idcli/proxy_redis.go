package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/redisreplay"
)

// proxyReplayStore returns the replay store --redis-url names: nil (the
// verifier's in-memory store) when it is "", else a redisreplay.Store on a
// Redis that answered a PING. name describes the store for the banner
// (never with a password); closeFn releases it.
func proxyReplayStore(ctx context.Context, redisURL string) (store middleware.ReplayStore, name string, closeFn func(), err error) {
	if redisURL == "" {
		return nil, "memory (this process only; --redis-url shares them)", func() {}, nil
	}
	s, err := redisreplay.Dial(ctx, redisURL)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "redisreplay: ")
		if strings.HasPrefix(msg, "redis") {
			return nil, "", nil, fmt.Errorf("--redis-url %s", msg) // names the URL first
		}
		return nil, "", nil, fmt.Errorf("--redis-url: %s", msg)
	}
	return s, "Redis " + s.Name(), func() { s.Close() }, nil
}
