package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer/signertest"
)

// TestSigningRecipesRetry runs the Python and Node.js recipes against a
// verifier that requires @method and @path (which they do not sign at
// first), and against one 1.5 s behind their clock (its refusal carries
// Signature-Error: error=clock_skew and Date on the verifier's clock):
// each passes with exactly one retry.
func TestSigningRecipesRetry(t *testing.T) {
	t.Parallel()
	recipes, err := filepath.Abs("../../docs/recipes")
	if err != nil {
		t.Fatal(err)
	}
	k := signertest.Key(21)
	uid := "agent-0123456789abcdef01234567"
	progs := map[string]func(t *testing.T) []string{
		"python": func(t *testing.T) []string {
			py := pythonWithCryptography()
			if py == "" {
				needTool(t, "python3 with cryptography runs whoami.py", "python3-with-cryptography")
			}
			return []string{py, filepath.Join(recipes, "whoami.py")}
		},
		"node": func(t *testing.T) []string {
			return []string{needTool(t, "node runs whoami.mjs", "node"), filepath.Join(recipes, "whoami.mjs")}
		},
	}
	behind := func() time.Time { return time.Now().Add(-1500 * time.Millisecond) }
	servers := map[string]func(*middleware.Config){
		"required components": func(c *middleware.Config) { c.RequiredComponents = []string{"@method", "@path"} },
		"clock skew":          func(c *middleware.Config) { c.Now = behind; c.Skew = -1 },
	}
	for pname, prog := range progs {
		for sname, mod := range servers {
			t.Run(pname+"/"+sname, func(t *testing.T) {
				t.Parallel()
				argv := prog(t)
				var n atomic.Int32
				// The handler is registered on a mux after the server has
				// started (it needs the server's URL), so the mux's lock orders
				// that write before the requests that read it.
				mux := http.NewServeMux()
				srv := httptest.NewServer(mux)
				t.Cleanup(srv.Close)
				hostname := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
				keys := middleware.NewStaticKeys()
				keys.Add("http://"+uid+"."+strings.TrimPrefix(hostname, "http://"), k.Public)
				cfg := middleware.Config{Keys: keys, AnyAuthority: true}
				mod(&cfg)
				v := mustNew(t, cfg)
				whoami := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					a, _ := middleware.AgentFrom(r.Context())
					json.NewEncoder(w).Encode(map[string]string{"uid": a.UID})
				}))
				mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					n.Add(1)
					whoami.ServeHTTP(w, r)
				}))
				env := procEnv("AGENT_UID="+uid, "AGENT_PRIVATE_JWK="+string(k.MarshalPrivateJWK()), "AGENT_HOSTNAME="+hostname)
				out, errOut, code := runBin(t, t.TempDir(), env, argv[0], argv[1:]...)
				if code != 0 {
					t.Fatalf("exit %d after %d requests\nstdout:\n%s\nstderr:\n%s", code, n.Load(), out, errOut)
				}
				if !strings.Contains(out, uid) || n.Load() != 2 {
					t.Errorf("answer %q after %d requests, want the uid after 2", out, n.Load())
				}
			})
		}
	}
}
