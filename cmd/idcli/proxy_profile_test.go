package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// idcli proxy --profile strict-01 verifies agentid's default headers and
// refuses --legacy ones with 403, naming the member in Accept-Signature.
func TestProxyStrictProfile(t *testing.T) {
	t.Parallel()
	key := signertest.Key(0x33)
	uid, origin := localAgent(t, key)
	up := newEchoUpstream(t)
	proxyURL, _ := startProxy(t, append([]string{"--upstream", up.URL, "--profile", "strict-01", "--refusal-status", "403"}, localTrust...)...)

	if a := clitest.MustSend(t, http.DefaultClient, signedGet(t, proxyURL+"/default", key, origin, signer.Options{})); a.Status != http.StatusOK {
		t.Errorf("strict-01 proxy on the default headers: %d %s, want 200", a.Status, a.Body)
	} else if seen := up.got("/default"); len(seen) != 1 || seen[0].Get("X-Agent-Uid") != uid || seen[0].Get("X-Agent-Id") != origin+"/" {
		t.Errorf("strict-01 proxy forwarded %v, want uid %s and identity %s/ (the URL as fetched)", seen, uid, origin)
	}
	req := signedGet(t, proxyURL+"/legacy", key, origin, signer.Options{Legacy: true})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(resp.Header.Get("Accept-Signature"), `"signature-agent";key="sig1"`) {
		t.Errorf("strict-01 proxy on --legacy headers: %d, Accept-Signature %q; want 403 asking for the member", resp.StatusCode, resp.Header.Get("Accept-Signature"))
	}
	if r := runCLI(t.Context(), t.TempDir(), nil, "proxy", "--upstream", up.URL, "--trust", "*.localhost", "--profile", "loose"); r.err == nil || !strings.Contains(r.err.Error(), "--profile") {
		t.Errorf("idcli proxy --profile loose: %v, want an error naming --profile", r.err)
	}
}
