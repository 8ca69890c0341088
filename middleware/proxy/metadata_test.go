package proxy_test

import (
	"net/http"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

// A covered Signed-Agent-Metadata reaches upstream as X-Agent-Metadata-<key>
// headers; a client's own X-Agent-Metadata-* headers never do.
func TestProxyPassesSignedAgentMetadata(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	px := newProxy(t, middleware.Required, up, nil)
	r := signed(t, px.URL, func(o *signer.Options) {
		o.Metadata = map[string]string{"operator": "Example Corp", "purpose": "search"}
	})
	r.Header.Set("X-Agent-Metadata-Spoofed", "yes")
	r.Header.Set("x_agent_metadata_operator", "Mallory")
	resp, body := do(t, r)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("signed request with metadata: %d %s", resp.StatusCode, body)
	}
	seen := up.requests()
	if len(seen) != 1 {
		t.Fatalf("upstream saw %d requests, want 1", len(seen))
	}
	h := seen[0]
	if h.Get("X-Agent-Metadata-Operator") != "Example Corp" || h.Get("X-Agent-Metadata-Purpose") != "search" || h.Get("X-Agent-Verdict") != "verified" {
		t.Errorf("upstream headers %v, want X-Agent-Metadata-Operator and -Purpose from the signed field", h)
	}
	if h.Get("X-Agent-Metadata-Spoofed") != "" || len(h.Values("X-Agent-Metadata-Operator")) != 1 {
		t.Errorf("a client-sent X-Agent-Metadata-* header reached upstream: %v", h)
	}
}
