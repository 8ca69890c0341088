package proxy_test

import (
	"net/http"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/proxy"
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

// TestMetadataUncoveredMemberAttack: the signature covers only the purpose
// member of Signed-Agent-Metadata; a role member added after signing
// verifies (the covered member is unchanged) but is not the agent's word,
// so it never reaches upstream, in the reverse proxy or in a forward-auth
// answer.
func TestMetadataUncoveredMemberAttack(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	px := newProxy(t, middleware.Required, up, nil)
	fa := startProxyConfig(t, middleware.Required, proxy.Config{ForwardAuth: proxy.FrontTraefik}, nil)
	sign := func(base string) *http.Request {
		r, err := http.NewRequest(http.MethodGet, base+"/things", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Host = "api.example.com"
		r.Header.Set(signer.MetadataHeader, `purpose="search"`)
		if err := signer.Sign(r, key, signer.Options{SignatureAgent: testOrigin, Now: clock,
			Components: []string{"@authority", `"signed-agent-metadata";key="purpose"`}}); err != nil {
			t.Fatal(err)
		}
		r.Header.Set(signer.MetadataHeader, `purpose="search", role="admin"`) // added after signing
		return r
	}
	resp, body := do(t, sign(px.URL))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reverse proxy: %d %s", resp.StatusCode, body)
	}
	seen := up.requests()
	if len(seen) != 1 {
		t.Fatalf("upstream saw %d requests, want 1", len(seen))
	}
	if h := seen[0]; h.Get("X-Agent-Metadata-Purpose") != "search" || len(h.Values("X-Agent-Metadata-Role")) != 0 {
		t.Errorf("reverse proxy: upstream got %v, want X-Agent-Metadata-Purpose only", agentHeaderNames(h))
	}

	orig := sign("https://api.example.com")
	extra := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Host": "api.example.com", "X-Forwarded-Uri": orig.URL.RequestURI(), "X-Forwarded-For": "192.0.2.7"}
	resp, body = do(t, subrequest(t, fa.URL, orig.Header, extra))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("forward-auth: %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Agent-Metadata-Purpose") != "search" || len(resp.Header.Values("X-Agent-Metadata-Role")) != 0 {
		t.Errorf("forward-auth: answer %v, want X-Agent-Metadata-Purpose only", agentHeaderNames(resp.Header))
	}
}
