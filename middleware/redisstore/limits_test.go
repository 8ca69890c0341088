package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/middleware/redisstore"
	"github.com/redis/go-redis/v9"
)

func prefix(t *testing.T, c *redis.Client) string {
	b := make([]byte, 8)
	rand.Read(b)
	p := "agentid:test:limit:" + hex.EncodeToString(b) + ":"
	t.Cleanup(func() {
		keys, _ := c.Keys(context.Background(), p+"*").Result()
		if len(keys) > 0 {
			c.Del(context.Background(), keys...)
		}
	})
	return p
}

// TestSharedBudget: two limiters (two instances) on one Redis spend one
// budget per agent; another agent is unaffected.
func TestSharedBudget(t *testing.T) {
	c := testClient(t)
	p := prefix(t, c)
	var lims [2]*agentlimit.Limiter
	for i := range lims {
		s, err := redisstore.NewLimits(redisstore.Config{Client: c, Prefix: p})
		if err != nil {
			t.Fatal(err)
		}
		if lims[i], err = agentlimit.New(agentlimit.Config{Agent: agentlimit.Limit{Quota: 4, Window: time.Hour}, Store: s}); err != nil {
			t.Fatal(err)
		}
	}
	a := &middleware.Result{Outcome: middleware.OutcomeVerified, Agent: middleware.Agent{ID: "https://a.example"}}
	b := &middleware.Result{Outcome: middleware.OutcomeVerified, Agent: middleware.Agent{ID: "https://b.example"}}
	r := httptest.NewRequest("GET", "/", nil)
	for i := range 4 {
		d := lims[i%2].Take(r, a)
		if !d.Allowed || d.Remaining != 3-i {
			t.Fatalf("request %d on instance %d: %+v, want allowed with %d left", i, i%2, d, 3-i)
		}
	}
	for i := range lims {
		d := lims[i].Take(r, a)
		if d.Allowed || d.RetryAfter < 890*time.Second || d.RetryAfter > 900*time.Second {
			t.Errorf("instance %d over budget: %+v, want refused with RetryAfter ~900s", i, d)
		}
	}
	if d := lims[1].Take(r, b); !d.Allowed || d.Remaining != 3 {
		t.Errorf("another agent: %+v, want allowed with 3 left", d)
	}
	n, err := c.Keys(context.Background(), p+"*").Result()
	if err != nil || len(n) != 2 {
		t.Errorf("keys %v (%v), want one per bucket (2)", n, err)
	}
	ttl, _ := c.PTTL(context.Background(), n[0]).Result()
	if ttl <= 0 || ttl > time.Hour+2*time.Second {
		t.Errorf("bucket TTL %v, want positive and at most the refill time", ttl)
	}
}

// TestAtomic: of 100 concurrent takes on a bucket of 30 across two stores,
// exactly 30 succeed.
func TestAtomic(t *testing.T) {
	c := testClient(t)
	p := prefix(t, c)
	s1, _ := redisstore.NewLimits(redisstore.Config{Client: c, Prefix: p})
	s2, _ := redisstore.NewLimits(redisstore.Config{Client: c, Prefix: p})
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := range 100 {
		s := s1
		if i%2 == 1 {
			s = s2
		}
		wg.Go(func() {
			got, _, err := s.Take(context.Background(), "k", 30, time.Hour)
			if err != nil {
				t.Error(err)
			}
			if got {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ok != 30 {
		t.Errorf("%d takes succeeded, want 30", ok)
	}
}

// TestRefill: a bucket refills at quota per window (Redis's clock).
func TestRefill(t *testing.T) {
	c := testClient(t)
	s, _ := redisstore.NewLimits(redisstore.Config{Client: c, Prefix: prefix(t, c)})
	ctx := context.Background()
	// 10 per second: one token every 100 ms.
	for range 10 {
		if ok, _, err := s.Take(ctx, "k", 10, time.Second); !ok || err != nil {
			t.Fatalf("take = %v, %v", ok, err)
		}
	}
	if ok, _, _ := s.Take(ctx, "k", 10, time.Second); ok {
		t.Fatal("11th take succeeded")
	}
	time.Sleep(250 * time.Millisecond)
	if ok, tokens, _ := s.Take(ctx, "k", 10, time.Second); !ok || tokens < 0.5 {
		t.Errorf("after 250 ms: ok %v, %v tokens left; want a token taken and about 1.5 left", ok, tokens)
	}
}

func TestLimitsValidate(t *testing.T) {
	if _, err := redisstore.NewLimits(redisstore.Config{}); err == nil {
		t.Error("no client: nil error")
	}
	if _, err := redisstore.NewLimits(redisstore.Config{Client: redis.NewClient(&redis.Options{}), Prefix: "a{b}"}); err == nil {
		t.Error("hash tag prefix: nil error")
	}
}

// TestLimitsUnavailable returns an error (the limiter then fails open).
func TestLimitsUnavailable(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	s, _ := redisstore.NewLimits(redisstore.Config{Client: c})
	if _, _, err := s.Take(context.Background(), "k", 1, time.Minute); err == nil {
		t.Error("Take on a closed port: nil error")
	}
}
