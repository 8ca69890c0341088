// Package redistest gives the middleware's Redis-backed stores their test
// server: the one named by AGENTID_TEST_REDIS_URL.
package redistest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentid/agentid/signer/signertest/testenv"
)

// EnvVar names the variable holding the Redis test URL.
const EnvVar = "AGENTID_TEST_REDIS_URL"

// URL returns AGENTID_TEST_REDIS_URL (or redis://127.0.0.1:6379/0 when CI
// is set); it skips the test, naming the variable, when neither is set.
func URL(t *testing.T) string {
	t.Helper()
	u := os.Getenv(EnvVar)
	if u == "" {
		if !testenv.CI() {
			t.Skipf("%s is not set; Redis tests skipped (set it to a redis:// URL, e.g. redis://127.0.0.1:6379/0)", EnvVar)
		}
		u = "redis://127.0.0.1:6379/0"
	}
	return u
}

// Client returns a client on URL, with its database number, closed when
// the test ends. It skips the test when no URL is set, and when Redis does
// not answer (failing instead under CI).
func Client(t *testing.T) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(URL(t))
	if err != nil {
		t.Fatalf("parse %s: %v", EnvVar, err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		testenv.SkipOrFail(t, "Redis at %s (%s) is unreachable, skipped: %v", opts.Addr, EnvVar, err)
	}
	return c
}
