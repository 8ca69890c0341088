package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/redisreplay"
)

// proxyRedisTimeout bounds the first contact with Redis at start-up.
const proxyRedisTimeout = 5 * time.Second

// proxyReplayStore returns the replay store --redis-url names: nil (the
// verifier's in-memory store) when it is "", else a redisreplay.Store on a
// client that answered a PING. name describes the store for the banner
// (never with a password); closeFn releases it.
func proxyReplayStore(ctx context.Context, redisURL string) (store middleware.ReplayStore, name string, closeFn func(), err error) {
	if redisURL == "" {
		return nil, "memory (this process only; --redis-url shares them)", func() {}, nil
	}
	client, name, err := redisClient(redisURL)
	if err != nil {
		return nil, "", nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, proxyRedisTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		return nil, "", nil, fmt.Errorf("--redis-url %s: Redis does not answer: %v", name, err)
	}
	s, err := redisreplay.New(redisreplay.Config{Client: client})
	if err != nil {
		client.Close()
		return nil, "", nil, fmt.Errorf("--redis-url: %w", err)
	}
	return s, "Redis " + name, func() { client.Close() }, nil
}

// redisClient reads --redis-url: a redis:// or rediss:// URL (one server),
// or a comma-separated list of host:port addresses (one: a single server;
// several: the masters of a Redis Cluster). name is the value without its
// password.
func redisClient(s string) (client redis.UniversalClient, name string, err error) {
	if strings.Contains(s, "://") {
		u, perr := url.Parse(s)
		if perr != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			return nil, "", fmt.Errorf("--redis-url: want redis://HOST:PORT[/DB], rediss://… or HOST:PORT,HOST:PORT,… (got a %q URL)", schemeOf(s))
		}
		opts, perr := redis.ParseURL(s)
		if perr != nil {
			return nil, "", fmt.Errorf("--redis-url %s: %v", u.Redacted(), perr)
		}
		return redis.NewClient(opts), u.Redacted(), nil
	}
	var addrs []string
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, "", fmt.Errorf("--redis-url: %q is not host:port (want redis://HOST:PORT[/DB] or HOST:PORT,HOST:PORT,…)", a)
		}
		addrs = append(addrs, a)
	}
	name = strings.Join(addrs, ",")
	if len(addrs) > 1 {
		name = "Cluster " + name
	}
	return redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs}), name, nil
}

func schemeOf(s string) string {
	scheme, _, _ := strings.Cut(s, "://")
	return scheme
}
