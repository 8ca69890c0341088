package redislimit_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware/agentlimit/redislimit"
	"github.com/redis/go-redis/v9"
)

// need finds a binary the cluster test needs: missing, it fails the test
// under CI and skips it otherwise.
func need(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed: %v", name, err)
		}
		t.Skipf("%s is not installed, Redis Cluster test skipped", name)
	}
	return p
}

// clusterPort returns a free loopback port whose bus port (+10000) is free.
func clusterPort(t *testing.T) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		l.Close()
		if err == nil {
			bus.Close()
			return port
		}
	}
	t.Fatal("no free port pair")
	return 0
}

// threeMasters starts a three-master Redis Cluster on loopback (killed at
// cleanup) and returns its addresses.
func threeMasters(t *testing.T) []string {
	t.Helper()
	server, cli := need(t, "redis-server"), need(t, "redis-cli")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var addrs []string
	for i := range 3 {
		port := clusterPort(t)
		dir := filepath.Join(t.TempDir(), "n"+strconv.Itoa(i))
		os.Mkdir(dir, 0o755)
		cmd := exec.Command(server, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
			"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", "redis.log")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		t.Cleanup(func() { cmd.Process.Kill(); <-done })
		addr := "127.0.0.1:" + strconv.Itoa(port)
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		for c.Ping(ctx).Err() != nil {
			if ctx.Err() != nil {
				t.Fatalf("redis-server %s did not start", addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.Close()
		addrs = append(addrs, addr)
	}
	out, err := exec.CommandContext(ctx, cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		for {
			info, _ := c.ClusterInfo(ctx).Result()
			if strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("cluster not ready on %s", a)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	return addrs
}

// TestCluster: two stores, each with its own client of a three-master
// Redis Cluster, share every bucket; the buckets spread over the masters.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	addrs := threeMasters(t)
	var stores [2]*redislimit.Store
	for i := range stores {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { c.Close() })
		stores[i], _ = redislimit.New(redislimit.Config{Client: c})
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
