package redisstore_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/middleware/redisstore"
)

// TestRespellingsShareOneRedisBucket: on Redis, two instances spend one
// budget for an agent of the configured service whatever form names its
// key set (queries, paths, ;type), and one for a host whose owner respells
// its key-set URL; an agent with a new covered key_header value per request
// opens at most its cap of Redis keys.
func TestRespellingsShareOneRedisBucket(t *testing.T) {
	c := testClient(t)
	p := prefix(t, c)
	var lims [2]*agentlimit.Limiter
	for i := range lims {
		s, err := redisstore.NewLimits(redisstore.Config{Client: c, Prefix: p})
		if err != nil {
			t.Fatal(err)
		}
		if lims[i], err = agentlimit.New(agentlimit.Config{Agent: agentlimit.Limit{Quota: 3, Window: time.Hour},
			Services: []string{"https://agentid.example"}, KeyHeader: "Signed-Agent-Metadata", Store: s}); err != nil {
			t.Fatal(err)
		}
	}
	const uidOrigin = "https://agent-aaaaaaaaaaaaaaaaaaaaaaaa.agentid.example"
	for _, base := range []string{uidOrigin, "https://bots.example.net"} {
		passed := 0
		for i := range 12 {
			id := fmt.Sprintf("%s/.well-known/http-message-signatures-directory?n=%d", base, i)
			if i%3 == 1 {
				id = fmt.Sprintf("%s/keys/%d.json", base, i)
			}
			a := &middleware.Result{Outcome: middleware.OutcomeVerified, Agent: middleware.Agent{ID: id}}
			if lims[i%2].Take(httptest.NewRequest("GET", "/", nil), a).Allowed {
				passed++
			}
		}
		if passed != 3 {
			t.Errorf("%s respelled 12 times on two instances: %d passed, want 3", base, passed)
		}
	}
	covered := &middleware.Result{Outcome: middleware.OutcomeVerified, Agent: middleware.Agent{ID: "https://ops.example", Components: []string{`"@authority"`, `"signed-agent-metadata"`}}}
	passed := 0
	for i := range 500 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Signed-Agent-Metadata", fmt.Sprintf("op=%d;", i)+strings.Repeat("x", 4096))
		if lims[i%2].Take(r, covered).Allowed {
			passed++
		}
	}
	keys, err := c.Keys(context.Background(), p+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Two respelled agents' buckets, plus the capped agent's.
	if n := len(keys) - 2; n > agentlimit.DefaultBucketsPerAgent || passed > 3*agentlimit.DefaultBucketsPerAgent {
		t.Errorf("500 new key_header values opened %d Redis buckets and passed %d times, want at most %d and %d", n, passed, agentlimit.DefaultBucketsPerAgent, 3*agentlimit.DefaultBucketsPerAgent)
	}
	for _, k := range keys {
		if len(k) != len(p)+64 {
			t.Errorf("Redis key %q is not the prefix and a SHA-256", k)
		}
	}
}
