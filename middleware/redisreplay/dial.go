package redisreplay

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentid/agentid/signer/redact"
)

// DialTimeout bounds the first contact with Redis in Dial.
const DialTimeout = 5 * time.Second

// Dial connects to the Redis that spec names and returns a Store on it,
// after Redis answered a PING (within DialTimeout). spec is a redis:// or
// rediss:// URL (one server), or a comma-separated list of host:port
// addresses: one address is a single server, several are the masters of a
// Redis Cluster. Name describes it without its secrets; Close releases
// the client.
func Dial(ctx context.Context, spec string) (*Store, error) {
	client, name, err := dialClient(spec)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("redisreplay: %s: Redis does not answer: %v", name, err)
	}
	s, err := New(Config{Client: client})
	if err != nil {
		client.Close()
		return nil, err
	}
	s.name, s.owned = name, client
	return s, nil
}

// Name describes the Redis a Dial-made store uses ("" for a Store made with
// New): its URL as redact.URL writes it, or its address list.
func (s *Store) Name() string { return s.name }

// Client returns the client Dial made (nil for a Store made with New), for
// other users of the same Redis such as rate limits.
func (s *Store) Client() redis.UniversalClient { return s.owned }

// Close releases the client Dial made (a client passed to New is the
// caller's to close).
func (s *Store) Close() error {
	if s.owned == nil {
		return nil
	}
	return s.owned.Close()
}

func dialClient(spec string) (redis.UniversalClient, string, error) {
	if strings.Contains(spec, "://") {
		u, err := url.Parse(spec)
		if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			scheme, _, _ := strings.Cut(spec, "://")
			return nil, "", fmt.Errorf("redisreplay: want redis://HOST:PORT[/DB], rediss://… or HOST:PORT,HOST:PORT,… (got a %q URL)", scheme)
		}
		opts, err := redis.ParseURL(spec)
		if err != nil {
			return nil, "", fmt.Errorf("redisreplay: %s: %v", redact.URL(spec), err)
		}
		return redis.NewClient(opts), redact.URL(spec), nil
	}
	var addrs []string
	for _, a := range strings.Split(spec, ",") {
		a = strings.TrimSpace(a)
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, "", fmt.Errorf("redisreplay: %q is not host:port (want redis://HOST:PORT[/DB] or HOST:PORT,HOST:PORT,…)", a)
		}
		addrs = append(addrs, a)
	}
	name := strings.Join(addrs, ",")
	if len(addrs) > 1 {
		name = "Cluster " + name
	}
	return redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs}), name, nil
}
