package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/agentid/agentid/signer/signertest/testenv"
	"github.com/redis/go-redis/v9"
)

// TestProxyDenyAndLimitRespelled is the respelling attack end to end:
// `idcli proxy --config` with a deny list and a per-agent limit, in front
// of a real upstream, with agents of a real reference server. The denied
// agent sends its plain origin, then its directory URL with ?n=1 … ?n=10:
// all eleven are refused with 403 and none reaches the upstream (the
// reference server serves a directory only under its own forms, and the
// deny list keys on what the agent cannot vary). A limited agent gets its
// 3 requests in all, however it spells its key set.
func TestProxyDenyAndLimitRespelled(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, clitest.ServerOptions{})
	denied, limited := signertest.Key(0x61), signertest.Key(0x62)
	deniedUID := clitest.Register(t, nil, srv.URL, denied)
	deniedOrigin := srv.AgentOrigin(deniedUID)
	limitedOrigin := srv.AgentOrigin(clitest.Register(t, nil, srv.URL, limited))
	up := newEchoUpstream(t)
	cfg := writeConfig(t, `upstream: `+up.URL+`
trust:
  hosts: ["*.localhost:*"]
  allow_http: true
  allow_private: true
refusal_status: 403
deny:
  identities: ["`+deniedOrigin+`"]
limits:
  agent: 3/1h
access_log: "off"
`)
	p, _ := startProxy(t, "--config", cfg, "--agentid-service", agentService(deniedUID, deniedOrigin))
	send := func(path string, key signer.PrivateKey, signatureAgent string) (int, string) {
		t.Helper()
		resp, err := http.DefaultClient.Do(signedGet(t, p+path, key, signatureAgent, signer.Options{}))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var body struct {
			Error struct{ Code string } `json:"error"`
		}
		json.Unmarshal(b, &body)
		return resp.StatusCode, body.Error.Code
	}

	if status, code := send("/denied", denied, deniedOrigin); status != 403 || code != "forbidden" {
		t.Errorf("denied agent, plain origin: %d %s, want 403 forbidden", status, code)
	}
	for i := 1; i <= 10; i++ {
		sa := fmt.Sprintf("%s%s?n=%d", deniedOrigin, signer.DirectoryPath, i)
		if status, code := send("/denied", denied, sa); status != 403 {
			t.Errorf("denied agent as %s: %d %s, want 403", sa, status, code)
		}
	}
	if n := len(up.got("/denied")); n != 0 {
		t.Errorf("the upstream saw the denied agent %d times, want never", n)
	}

	passed := 0
	spellings := []string{limitedOrigin, limitedOrigin + signer.DirectoryPath, limitedOrigin + "/"}
	for i := 1; i <= 10; i++ {
		spellings = append(spellings, fmt.Sprintf("%s%s?n=%d", limitedOrigin, signer.DirectoryPath, i), limitedOrigin)
	}
	for _, sa := range spellings {
		switch status, code := send("/limited", limited, sa); {
		case status == 200:
			passed++
		case status != 403 && status != 429:
			t.Errorf("limited agent as %s: %d %s, want 200, 403 or 429", sa, status, code)
		}
	}
	if passed != 3 || len(up.got("/limited")) != 3 {
		t.Errorf("the limited agent passed %d times (the upstream saw %d), want 3", passed, len(up.got("/limited")))
	}
	if status, code := send("/limited", limited, limitedOrigin); status != 429 || code != "rate_limited" {
		t.Errorf("the limited agent after its budget: %d %s, want 429 rate_limited", status, code)
	}
}

// TestProxyBudgetsInRedis is the budget attacks end to end on Redis: two
// proxies sharing one Redis, with agents of a real reference server. An
// agent spelling its key set three ways spends one shared budget of 3; an
// agent sending a new covered key_header value with every request opens
// at most 64 Redis buckets, each a fixed-size hashed key.
func TestProxyBudgetsInRedis(t *testing.T) {
	t.Parallel()
	redisURL := os.Getenv("AGENTID_TEST_REDIS_URL")
	if redisURL == "" {
		testenv.SkipOrFail(t, "AGENTID_TEST_REDIS_URL is not set: the shared-limit test needs a Redis")
	}
	srv := clitest.StartServer(t, clitest.ServerOptions{})
	spelled, minting := signertest.Key(0x63), signertest.Key(0x64)
	spelledUID := clitest.Register(t, nil, srv.URL, spelled)
	spelledOrigin := srv.AgentOrigin(spelledUID)
	mintingOrigin := srv.AgentOrigin(clitest.Register(t, nil, srv.URL, minting))
	up := newEchoUpstream(t)
	prefix := "agentid:test:limit:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() {
		if keys, _ := rdb.Keys(context.Background(), prefix+"*").Result(); len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
		rdb.Close()
	})
	cfg := writeConfig(t, `upstream: `+up.URL+`
trust:
  hosts: ["*.localhost:*"]
  allow_http: true
  allow_private: true
limits:
  agent: 3/1h
  key_header: Signed-Agent-Metadata
  redis_prefix: "`+prefix+`"
redis_url: `+redisURL+`
access_log: "off"
`)
	service := "--agentid-service=" + agentService(spelledUID, spelledOrigin)
	p1, _ := startProxy(t, "--config", cfg, service)
	p2, _ := startProxy(t, "--config", cfg, service)
	send := func(p, path string, key signer.PrivateKey, signatureAgent string, opts signer.Options) int {
		t.Helper()
		resp, err := http.DefaultClient.Do(signedGet(t, p+path, key, signatureAgent, opts))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	passed := 0
	for _, sa := range []string{spelledOrigin, spelledOrigin + signer.DirectoryPath, spelledOrigin + "/", "HTTP://" + strings.ToUpper(spelledUID) + strings.TrimPrefix(spelledOrigin, "http://"+spelledUID)} {
		for _, p := range []string{p1, p2} {
			if send(p, "/spelled", spelled, sa, signer.Options{}) == 200 {
				passed++
			}
		}
	}
	if passed != 3 {
		t.Errorf("one agent in four spellings on two proxies passed %d times, want 3 (one budget in Redis)", passed)
	}

	passed = 0
	const values = 150
	for i := range values {
		md := signer.Options{Metadata: map[string]string{"operator": fmt.Sprintf("op-%d", i)}}
		if send([]string{p1, p2}[i%2], "/minting", minting, mintingOrigin, md) == 200 {
			passed++
		}
	}
	keys, err := rdb.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(keys) - 1; n > 64 || passed > 3*64 || passed < 3 {
		t.Errorf("%d new key_header values opened %d Redis buckets and passed %d times, want at most 64 buckets and 192 passes", values, n, passed)
	}
	for _, k := range keys {
		if len(k) != len(prefix)+64 {
			t.Errorf("Redis key %q is not the prefix and a SHA-256", k)
		}
	}
}
