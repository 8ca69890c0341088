package refserver_test

import (
	"net/http"
	"testing"

	"github.com/agentid/agentid/signer/signertest"
)

// The agent origin, the URL agents send in Signature-Agent, serves the same
// key set as the well-known path: a protocol-01 verifier fetches it as
// sent.
func TestKeySetAtAgentOrigin(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		uid := e.register(signertest.Key(7))
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			wk := e.send(e.request(method, e.directoryURL(uid), nil))
			root := e.send(e.request(method, e.origin(uid)+"/", nil))
			if root.status != http.StatusOK || wk.status != http.StatusOK {
				t.Fatalf("%s: status at / = %d (%s), at the well-known path %d; want 200 at both", method, root.status, root.body, wk.status)
			}
			if string(root.body) != string(wk.body) {
				t.Errorf("%s: body at / = %q, want the well-known body %q", method, root.body, wk.body)
			}
			for _, h := range []string{"Content-Type", "Cache-Control", "ETag", "Access-Control-Allow-Origin", "Access-Control-Expose-Headers", "Content-Length"} {
				if got, want := root.header.Get(h), wk.header.Get(h); got != want || want == "" {
					t.Errorf("%s: %s at / = %q, want %q (as at the well-known path)", method, h, got, want)
				}
			}
		}
		// Conditional GET and the CORS preflight behave as at the well-known path.
		req := e.request(http.MethodGet, e.origin(uid)+"/", nil)
		req.Header.Set("If-None-Match", e.send(e.request(http.MethodGet, e.directoryURL(uid), nil)).header.Get("ETag"))
		if r := e.send(req); r.status != http.StatusNotModified {
			t.Errorf("conditional GET /: status = %d, want 304", r.status)
		}
		if r := e.send(e.request(http.MethodOptions, e.origin(uid)+"/", nil)); r.status != http.StatusNoContent || r.header.Get("Access-Control-Allow-Methods") != "GET, HEAD" {
			t.Errorf("OPTIONS /: %d %v, want 204 with Access-Control-Allow-Methods GET, HEAD", r.status, r.header)
		}
		// An unknown agent is 404 there too; other paths stay unserved.
		if r := e.send(e.request(http.MethodGet, e.origin("agent-000000000000000000000000")+"/", nil)); r.status != http.StatusNotFound || r.errorCode(t) != "agent_not_found" {
			t.Errorf("GET / of an unknown agent: %d %s, want 404 agent_not_found", r.status, r.body)
		}
		if r := e.send(e.request(http.MethodGet, e.origin(uid)+"/keys", nil)); r.status != http.StatusNotFound {
			t.Errorf("GET /keys on an agent host: %d, want 404", r.status)
		}
	})
}
