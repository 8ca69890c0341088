package redistest

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentid/agentid/signer/signertest/testenv"
)

// ClusterNode is one redis-server process of a test cluster.
type ClusterNode struct {
	Addr string // host:port on loopback
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// Kill stops the node at once (SIGKILL) and waits for it to exit.
func (n *ClusterNode) Kill() {
	n.cmd.Process.Kill()
	<-n.done
}

// lookBin finds a binary the cluster test needs: missing, it fails the test
// under CI and skips it (with the reason) otherwise.
func lookBin(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testenv.SkipOrFail(t, "%s is not installed, Redis Cluster test skipped: %v", name, err)
	}
	return p
}

// freeClusterPort returns a free loopback port whose cluster bus port
// (port+10000) is free too.
func freeClusterPort(t *testing.T) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if port+10000 > 65535 {
			l.Close()
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		l.Close()
		if err != nil {
			continue
		}
		bus.Close()
		return port
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}

// StartCluster starts a Redis Cluster of three masters (no replicas) on
// loopback, from redis-server processes in temporary directories joined
// with redis-cli --cluster create. The processes are killed at cleanup.
// A master that goes down leaves the other masters serving their slots
// (cluster-require-full-coverage no), so a test can tell the keys of a dead
// master from the others.
func StartCluster(t *testing.T) []*ClusterNode {
	t.Helper()
	server, cli := lookBin(t, "redis-server"), lookBin(t, "redis-cli")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	nodes := make([]*ClusterNode, 3)
	for i := range nodes {
		port := freeClusterPort(t)
		n := &ClusterNode{Addr: "127.0.0.1:" + strconv.Itoa(port), dir: filepath.Join(t.TempDir(), "node"+strconv.Itoa(i)), done: make(chan struct{})}
		if err := os.Mkdir(n.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		n.cmd = exec.Command(server,
			"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no",
			"--save", "", "--appendonly", "no", "--daemonize", "no",
			"--dir", n.dir, "--logfile", "redis.log")
		n.cmd.Dir = n.dir
		if err := n.cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		go func() { n.cmd.Wait(); close(n.done) }()
		t.Cleanup(n.Kill)
		nodes[i] = n
	}
	dumpLogs := func() {
		for _, n := range nodes {
			b, _ := os.ReadFile(filepath.Join(n.dir, "redis.log"))
			t.Logf("%s log:\n%s", n.Addr, b)
		}
	}
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		for c.Ping(ctx).Err() != nil {
			if ctx.Err() != nil {
				dumpLogs()
				t.Fatalf("redis-server %s did not answer within 60 s", n.Addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.Close()
	}

	args := []string{"--cluster", "create"}
	for _, n := range nodes {
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		dumpLogs()
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		for {
			info, _ := c.ClusterInfo(ctx).Result()
			if strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if ctx.Err() != nil {
				dumpLogs()
				t.Fatalf("cluster not ready on %s within 60 s:\n%s", n.Addr, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	return nodes
}
