package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware/internal/redistest"
	"github.com/agentid/agentid/middleware/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestLimitsCluster: two stores, each with its own client of a three-master
// Redis Cluster, share every bucket; the buckets spread over the masters.
func TestLimitsCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	var addrs []string
	for _, n := range redistest.StartCluster(t) {
		addrs = append(addrs, n.Addr)
	}
	var stores [2]*redisstore.Limits
	for i := range stores {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { c.Close() })
		stores[i], _ = redisstore.NewLimits(redisstore.Config{Client: c})
	}
	ctx := context.Background()
	for k := range 60 {
		key := fmt.Sprintf("agent https://a%d.example", k)
		for i := range 3 {
			ok, _, err := stores[(k+i)%2].Take(ctx, key, 2, time.Hour)
			if err != nil {
				t.Fatalf("take %s: %v", key, err)
			}
			if want := i < 2; ok != want {
				t.Fatalf("%s, take %d: ok = %v, want %v (one budget across both clients)", key, i, ok, want)
			}
		}
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		n, err := c.DBSize(ctx).Result()
		c.Close()
		if err != nil || n == 0 {
			t.Errorf("master %s holds %d buckets (%v), want some: keys must spread over the slots", a, n, err)
		}
	}
}
