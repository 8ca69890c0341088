package redisreplay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/redisreplay"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/redis/go-redis/v9"
)

// clusterNode is one redis-server process of a test cluster.
type clusterNode struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// kill stops the node at once (SIGKILL) and waits for it to exit.
func (n *clusterNode) kill() {
	n.cmd.Process.Kill()
	<-n.done
}

// lookBin finds a binary the cluster test needs: missing, it fails the test
// under CI and skips it (with the reason) otherwise.
func lookBin(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed: %v (the Redis Cluster test needs it under CI)", name, err)
		}
		t.Skipf("%s is not installed, Redis Cluster test skipped: %v", name, err)
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

// startCluster starts a Redis Cluster of three masters (no replicas) on
// loopback, from redis-server processes in temporary directories joined
// with redis-cli --cluster create. The processes are killed at cleanup.
// A master that goes down leaves the other masters serving their slots
// (cluster-require-full-coverage no), so a test can tell the keys of a dead
// master from the others.
func startCluster(t *testing.T) []*clusterNode {
	t.Helper()
	server, cli := lookBin(t, "redis-server"), lookBin(t, "redis-cli")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	nodes := make([]*clusterNode, 3)
	for i := range nodes {
		port := freeClusterPort(t)
		n := &clusterNode{addr: "127.0.0.1:" + strconv.Itoa(port), dir: filepath.Join(t.TempDir(), "node"+strconv.Itoa(i)), done: make(chan struct{})}
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
		t.Cleanup(n.kill)
		nodes[i] = n
	}
	dumpLogs := func() {
		for _, n := range nodes {
			b, _ := os.ReadFile(filepath.Join(n.dir, "redis.log"))
			t.Logf("%s log:\n%s", n.addr, b)
		}
	}
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1})
		for c.Ping(ctx).Err() != nil {
			if ctx.Err() != nil {
				dumpLogs()
				t.Fatalf("redis-server %s did not answer within 60 s", n.addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.Close()
	}

	args := []string{"--cluster", "create"}
	for _, n := range nodes {
		args = append(args, n.addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		dumpLogs()
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1})
		for {
			info, _ := c.ClusterInfo(ctx).Result()
			if strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if ctx.Err() != nil {
				dumpLogs()
				t.Fatalf("cluster not ready on %s within 60 s:\n%s", n.addr, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	return nodes
}

// lastKey records the replay key of the latest Seen call (the test sends
// one request at a time), so the test can find the master holding it.
type lastKey struct {
	middleware.ReplayStore
	mu  sync.Mutex
	key string
}

func (l *lastKey) Seen(ctx context.Context, key string, expiry time.Time) (bool, error) {
	l.mu.Lock()
	l.key = key
	l.mu.Unlock()
	return l.ReplayStore.Seen(ctx, key, expiry)
}

func (l *lastKey) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.key
}

// TestCluster runs two middleware instances, each with its own client of
// one three-master Redis Cluster: a nonce accepted through one is refused
// through the other; with one master killed, the requests whose keys live
// on it fail closed (503 database_unavailable), the others are still
// answered, and no request is ever let through unchecked.
func TestCluster(t *testing.T) {
	nodes := startCluster(t)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.addr
	}

	const agent = "https://agent.example"
	key := signertest.Key(7)
	keys := middleware.NewStaticKeys()
	keys.Add(agent, key.Public)

	type instance struct {
		handler http.Handler
		store   *redisreplay.Store
		rec     *lastKey
	}
	newInstance := func() instance {
		rdb := redis.NewUniversalClient(&redis.UniversalOptions{
			Addrs:         addrs,
			DialTimeout:   time.Second,
			ReadTimeout:   time.Second,
			WriteTimeout:  time.Second,
			MaxRedirects:  1,
			DialerRetries: 1,
		})
		t.Cleanup(func() { rdb.Close() })
		if _, ok := rdb.(*redis.ClusterClient); !ok {
			t.Fatalf("NewUniversalClient with %d addresses = %T, want a cluster client", len(addrs), rdb)
		}
		store, err := redisreplay.New(redisreplay.Config{Client: rdb})
		if err != nil {
			t.Fatal(err)
		}
		rec := &lastKey{ReplayStore: store}
		v, err := middleware.NewVerifier(middleware.Config{Keys: keys, Replay: rec, Authorities: []string{"api.example"}})
		if err != nil {
			t.Fatal(err)
		}
		ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
		return instance{handler: v.Middleware(ok), store: store, rec: rec}
	}
	a, b := newInstance(), newInstance()

	sign := func() http.Header {
		req := httptest.NewRequest(http.MethodGet, "https://api.example/resource", nil)
		if err := signer.Sign(req, key, signer.Options{SignatureAgent: agent}); err != nil {
			t.Fatal(err)
		}
		return req.Header
	}
	// send serves a request carrying h through in and returns the status,
	// the error code ("" for 2xx) and the replay key the store was asked.
	send := func(in instance, h http.Header) (int, string, string) {
		req := httptest.NewRequest(http.MethodGet, "https://api.example/resource", nil)
		req.Header = h.Clone()
		rr := httptest.NewRecorder()
		in.handler.ServeHTTP(rr, req)
		var body struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if rr.Code >= 300 {
			json.Unmarshal(rr.Body.Bytes(), &body)
		}
		return rr.Code, body.Error.Code, in.rec.last()
	}

	// Which master holds each slot, from the cluster itself.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := redis.NewClient(&redis.Options{Addr: nodes[1].addr, MaxRetries: -1})
	defer admin.Close()
	shards, err := admin.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER SHARDS: %v", err)
	}
	owner := func(storedKey string) string {
		slot, err := admin.ClusterKeySlot(ctx, storedKey).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start > slot || slot > r.End {
					continue
				}
				for _, n := range sh.Nodes {
					if n.Role == "master" {
						return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
					}
				}
			}
		}
		t.Fatalf("slot %d has no master", slot)
		return ""
	}

	const n = 30
	signed := make([]http.Header, n)
	perMaster := map[string]int{}
	for i := range signed {
		signed[i] = sign()
		status, code, k := send(a, signed[i])
		if status != http.StatusOK {
			t.Fatalf("request %d through instance A = %d %s, want 200", i, status, code)
		}
		perMaster[owner(a.store.Key(k))]++
		if status, code, _ := send(b, signed[i]); status != http.StatusUnauthorized || code != string(middleware.CodeReplayedNonce) {
			t.Errorf("request %d replayed through instance B = %d %s, want 401 %s", i, status, code, middleware.CodeReplayedNonce)
		}
	}
	if len(perMaster) < 2 {
		t.Errorf("%d nonces landed on %d master(s) %v, want them spread over the cluster", n, len(perMaster), perMaster)
	}

	victim := nodes[0]
	victim.kill()
	t.Logf("killed master %s; nonces per master before: %v", victim.addr, perMaster)

	var closed, answered int
	check := func(what string, h http.Header, in instance, wantLive int, wantLiveCode middleware.Code) {
		status, code, k := send(in, h)
		if status >= 200 && status < 300 && wantLive != status {
			t.Errorf("%s = %d: let through", what, status)
		}
		if owner(in.store.Key(k)) == victim.addr {
			closed++
			if status != http.StatusServiceUnavailable || code != string(middleware.CodeDatabaseUnavailable) {
				t.Errorf("%s (key on the killed master) = %d %s, want 503 %s", what, status, code, middleware.CodeDatabaseUnavailable)
			}
			return
		}
		answered++
		if status != wantLive || code != string(wantLiveCode) {
			t.Errorf("%s (key on a live master) = %d %s, want %d %s", what, status, code, wantLive, wantLiveCode)
		}
	}
	for i, h := range signed {
		check(fmt.Sprintf("replay %d through instance B", i), h, b, http.StatusUnauthorized, middleware.CodeReplayedNonce)
	}
	for i := range n {
		check(fmt.Sprintf("fresh request %d through instance A", i), sign(), a, http.StatusOK, "")
	}
	if closed == 0 || answered == 0 {
		t.Errorf("after the kill: %d requests on the dead master, %d on live ones; want some of each", closed, answered)
	}
}
