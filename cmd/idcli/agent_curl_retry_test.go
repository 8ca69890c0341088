package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer/signertest"
)

// retryServer is a loopback server whose verifier requires @method, @path
// and content-digest, which idcli agent curl does not sign by default. It
// counts the requests it sees and writes the agent's .env into dir.
func retryServer(t *testing.T, dir string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	k := signertest.Key(20)
	uid := "agent-0123456789abcdef01234567"
	keys := middleware.NewStaticKeys()
	keys.Add("http://"+uid+".localhost:3000", k.Public)
	v := mustNew(t, middleware.Config{Keys: keys, AnyAuthority: true, RequiredComponents: []string{"@method", "@path", "content-digest"}})
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ag, _ := middleware.AgentFrom(r.Context())
			fmt.Fprintf(w, "hello %s\n", ag.UID)
		})).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	content := "AGENT_UID=" + uid + "\nAGENT_PRIVATE_JWK='" + string(k.MarshalPrivateJWK()) + "'\n"
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv, &n
}

// TestAgentCurlRetriesOnChallenge: the route's refusal names what to
// cover, and one re-signed retry passes; with --sign-when-challenged the
// first request goes unsigned.
func TestAgentCurlRetriesOnChallenge(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		args      []string
		wantFirst string // in stderr's first request
	}{
		{"signed first", nil, `> Signature-Input: sig1=("@authority" "signature-agent";key="sig1");`},
		{"--sign-when-challenged", []string{"--sign-when-challenged"}, "> Content-Type: application/json\n> Host: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			srv, n := retryServer(t, dir)
			args := append([]string{"agent", "curl", srv.URL + "/orders", "-d", `{"n":1}`, "-v"}, tt.args...)
			res := runCLI(t.Context(), dir, nil, args...)
			if res.err != nil {
				t.Fatalf("err = %v\nstdout %s\nstderr %s", res.err, res.stdout, res.stderr)
			}
			if res.stdout != "hello agent-0123456789abcdef01234567\n" || n.Load() != 2 {
				t.Errorf("stdout %q after %d requests, want hello after 2", res.stdout, n.Load())
			}
			reqs := strings.Split(res.stderr, "> POST /orders HTTP/1.1\n")
			if len(reqs) != 3 {
				t.Fatalf("stderr shows %d requests, want 2:\n%s", len(reqs)-1, res.stderr)
			}
			if !strings.Contains(reqs[1], tt.wantFirst) || !strings.Contains(reqs[1], "< HTTP/1.1 401") {
				t.Errorf("first request and answer:\n%s\nwant %q and a 401", reqs[1], tt.wantFirst)
			}
			if tt.args != nil && strings.Contains(reqs[1], "> Signature") {
				t.Errorf("the first request was signed:\n%s", reqs[1])
			}
			if !strings.Contains(reqs[2], `"@method"`) || !strings.Contains(reqs[2], `"content-digest"`) || !strings.Contains(reqs[2], "< HTTP/1.1 200") {
				t.Errorf("retry and answer:\n%s", reqs[2])
			}
		})
	}
}
