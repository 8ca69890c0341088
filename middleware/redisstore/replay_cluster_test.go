package redisstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/internal/redistest"
	"github.com/agentid/agentid/middleware/redisstore"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/redis/go-redis/v9"
)

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

// TestReplayCluster runs two middleware instances, each with its own client of
// one three-master Redis Cluster: a nonce accepted through one is refused
// through the other; with one master killed, the requests whose keys live
// on it fail closed (503 database_unavailable), the others are still
// answered, and no request is ever let through unchecked.
func TestReplayCluster(t *testing.T) {
	nodes := redistest.StartCluster(t)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}

	const agent = "https://agent.example"
	key := signertest.Key(7)
	keys := middleware.NewStaticKeys()
	keys.Add(agent, key.Public)

	type instance struct {
		handler http.Handler
		store   *redisstore.Replay
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
		store, err := redisstore.NewReplay(redisstore.Config{Client: rdb})
		if err != nil {
			t.Fatal(err)
		}
		rec := &lastKey{ReplayStore: store}
		v, err := middleware.New(middleware.Config{Keys: keys, Replay: rec, Authorities: []string{"api.example"}})
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
	admin := redis.NewClient(&redis.Options{Addr: nodes[1].Addr, MaxRetries: -1})
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
	victim.Kill()
	t.Logf("killed master %s; nonces per master before: %v", victim.Addr, perMaster)

	var closed, answered int
	check := func(what string, h http.Header, in instance, wantLive int, wantLiveCode middleware.Code) {
		status, code, k := send(in, h)
		if status >= 200 && status < 300 && wantLive != status {
			t.Errorf("%s = %d: let through", what, status)
		}
		if owner(in.store.Key(k)) == victim.Addr {
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
