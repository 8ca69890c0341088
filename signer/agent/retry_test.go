package agent_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer/agent"
	"github.com/agentid/agentid/signer/signertest"
)

// TestClientRetriesOnChallenge: the agent's client passes a verifier that
// requires components the default profile does not sign, on its first
// call, with one re-signed retry that sends the body again.
func TestClientRetriesOnChallenge(t *testing.T) {
	t.Parallel()
	k := signertest.Key(0x39)
	c := agent.Credentials{UID: "agent-0123456789abcdef01234567", Key: k, Hostname: "https://agentid.example"}
	origin, err := c.Origin()
	if err != nil {
		t.Fatal(err)
	}
	keys := middleware.NewStaticKeys()
	keys.Add(origin, k.Public)
	v, err := middleware.New(middleware.Config{Keys: keys, AnyAuthority: true, RequiredComponents: []string{"@method", "@path", "content-digest"}})
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got.Store(string(b))
		})).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	resp, err := c.Client(nil).Post(srv.URL+"/jobs", "text/plain", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || n.Load() != 2 || got.Load() != "payload" {
		t.Errorf("%s after %d requests, body %q; want 200 after 2 with the payload", resp.Status, n.Load(), got.Load())
	}
}
