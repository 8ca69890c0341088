package redisstore

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

// Conn is a Redis client Dial made, for the stores of this package and
// other users of the same Redis.
type Conn struct {
	client redis.UniversalClient
	name   string
}

// Dial connects to the Redis that spec names, once Redis answered a PING
// (within DialTimeout). spec is a redis:// or rediss:// URL (one server),
// or a comma-separated list of host:port addresses: one address is a
// single server, several are the masters of a Redis Cluster.
func Dial(ctx context.Context, spec string) (*Conn, error) {
	client, name, err := dialClient(spec)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("redisstore: %s: Redis does not answer: %v", name, err)
	}
	return &Conn{client: client, name: name}, nil
}

// Name describes the Redis without its secrets: its URL as redact.URL
// writes it, or its address list.
func (c *Conn) Name() string { return c.name }

// Client returns the client, for Config.Client.
func (c *Conn) Client() redis.UniversalClient { return c.client }

// Close releases the client.
func (c *Conn) Close() error { return c.client.Close() }

func dialClient(spec string) (redis.UniversalClient, string, error) {
	if strings.Contains(spec, "://") {
		u, err := url.Parse(spec)
		if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			scheme, _, _ := strings.Cut(spec, "://")
			return nil, "", fmt.Errorf("redisstore: want redis://HOST:PORT[/DB], rediss://… or HOST:PORT,HOST:PORT,… (got a %q URL)", scheme)
		}
		opts, err := redis.ParseURL(spec)
		if err != nil {
			return nil, "", fmt.Errorf("redisstore: %s: %v", redact.URL(spec), err)
		}
		return redis.NewClient(opts), redact.URL(spec), nil
	}
	var addrs []string
	for _, a := range strings.Split(spec, ",") {
		a = strings.TrimSpace(a)
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, "", fmt.Errorf("redisstore: %q is not host:port (want redis://HOST:PORT[/DB] or HOST:PORT,HOST:PORT,…)", a)
		}
		addrs = append(addrs, a)
	}
	name := strings.Join(addrs, ",")
	if len(addrs) > 1 {
		name = "Cluster " + name
	}
	return redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs}), name, nil
}
