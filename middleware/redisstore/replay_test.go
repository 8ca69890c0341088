package redisstore_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/internal/redistest"
	"github.com/agentid/agentid/middleware/redisstore"
	"github.com/redis/go-redis/v9"
)

// testURL is redistest.URL.
func testURL(t *testing.T) string { return redistest.URL(t) }

// testClient is redistest.Client.
func testClient(t *testing.T) *redis.Client { return redistest.Client(t) }

// newStore returns a store with a fresh random prefix whose keys are deleted
// at cleanup.
func newStore(t *testing.T, c *redis.Client, now func() time.Time) (*redisstore.Replay, string) {
	t.Helper()
	b := make([]byte, 8)
	rand.Read(b)
	prefix := "agentid:test:" + hex.EncodeToString(b) + ":"
	s, err := redisstore.NewReplay(redisstore.Config{Client: c, Prefix: prefix, Now: now})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := c.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
	return s, prefix
}

func TestSeen(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	s, _ := newStore(t, c, nil)
	exp := time.Now().Add(time.Hour)
	for i, want := range []bool{false, true, true} {
		got, err := s.Seen(ctx, "kid nonce-a", exp)
		if err != nil {
			t.Fatalf("Seen #%d: %v", i+1, err)
		}
		if got != want {
			t.Errorf("Seen #%d = %v, want %v", i+1, got, want)
		}
	}
	if got, err := s.Seen(ctx, "kid nonce-b", exp); err != nil || got {
		t.Errorf("Seen(other key) = %v, %v; want false, nil", got, err)
	}
	// The key carries the prefix and an expiry at most an hour away.
	ttl, err := c.PTTL(ctx, s.Key("kid nonce-a")).Result()
	if err != nil {
		t.Fatalf("PTTL: %v", err)
	}
	if ttl <= 0 || ttl > time.Hour {
		t.Errorf("PTTL = %v, want in (0, 1h]", ttl)
	}
}

func TestSeenConcurrent(t *testing.T) {
	c := testClient(t)
	s, _ := newStore(t, c, nil)
	const n = 50
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		unseen int
		errs   []error
	)
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			seen, err := s.Seen(context.Background(), "kid same-nonce", time.Now().Add(time.Minute))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if !seen {
				unseen++
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("Seen errors: %v", errs)
	}
	if unseen != 1 {
		t.Errorf("calls that saw the key first = %d, want 1", unseen)
	}
}

func TestSeenExpiry(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()

	t.Run("past expiry is gone at once", func(t *testing.T) {
		// With a clock two hours behind, an expiry an hour ago is not moved
		// forward, so Redis receives a PXAT in the past and drops the key.
		s, _ := newStore(t, c, func() time.Time { return time.Now().Add(-2 * time.Hour) })
		exp := time.Now().Add(-time.Hour)
		for i := range 2 {
			got, err := s.Seen(ctx, "kid old", exp)
			if err != nil {
				t.Fatalf("Seen #%d: %v", i+1, err)
			}
			if got {
				t.Errorf("Seen #%d of an expired key = true, want false", i+1)
			}
		}
		if n, err := c.Exists(ctx, s.Key("kid old")).Result(); err != nil || n != 0 {
			t.Errorf("Exists = %d, %v; want 0, nil", n, err)
		}
	})

	t.Run("key is forgotten after its expiry", func(t *testing.T) {
		s, _ := newStore(t, c, nil)
		exp := time.Now().Add(1100 * time.Millisecond)
		if got, err := s.Seen(ctx, "kid soon", exp); err != nil || got {
			t.Fatalf("Seen #1 = %v, %v; want false, nil", got, err)
		}
		if got, err := s.Seen(ctx, "kid soon", exp); err != nil || !got {
			t.Fatalf("Seen #2 = %v, %v; want true, nil", got, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, err := s.Seen(ctx, "kid soon", exp)
			if err != nil {
				t.Fatalf("Seen: %v", err)
			}
			if !got {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("key still present 10 s after its expiry %v", exp)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("near expiry is kept at least MinTTL", func(t *testing.T) {
		s, _ := newStore(t, c, nil)
		if _, err := s.Seen(ctx, "kid now", time.Now()); err != nil {
			t.Fatalf("Seen: %v", err)
		}
		ttl, err := c.PTTL(ctx, s.Key("kid now")).Result()
		if err != nil {
			t.Fatalf("PTTL: %v", err)
		}
		if ttl <= 0 {
			t.Errorf("PTTL = %v, want > 0 (expiry moved to now+MinTTL)", ttl)
		}
	})
}

func TestReplayUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	s, err := redisstore.NewReplay(redisstore.Config{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	seen, err := s.Seen(context.Background(), "kid n", time.Now().Add(time.Minute))
	if !errors.Is(err, middleware.ErrReplayStore) {
		t.Errorf("Seen error = %v, want one wrapping middleware.ErrReplayStore", err)
	}
	if seen {
		t.Errorf("Seen = true on error, want false")
	}
}

func TestNewValidates(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for name, cfg := range map[string]redisstore.Config{
		"no client":       {},
		"hash-tag prefix": {Client: c, Prefix: "replay:{x}:"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := redisstore.NewReplay(cfg); err == nil {
				t.Errorf("New error = nil, want an error")
			}
		})
	}
}

// TestKeysFixedSize: whatever the replay key's length (a 60 KB nonce
// here), Redis holds the prefix and 64 hex characters of its SHA-256.
func TestKeysFixedSize(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	s, prefix := newStore(t, c, nil)
	long := "https://agent.example kid " + strings.Repeat("n", 60_000)
	if seen, err := s.Seen(ctx, long, time.Now().Add(time.Minute)); err != nil || seen {
		t.Fatalf("Seen = %v, %v; want false, nil", seen, err)
	}
	if seen, err := s.Seen(ctx, long, time.Now().Add(time.Minute)); err != nil || !seen {
		t.Fatalf("Seen again = %v, %v; want true, nil", seen, err)
	}
	sum := sha256.Sum256([]byte(long))
	want := prefix + hex.EncodeToString(sum[:])
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != want {
		t.Errorf("stored keys = %.100q, want [%s]", keys, want)
	}
	if got := s.Key(long); got != want {
		t.Errorf("Key = %s, want %s", got, want)
	}
}
