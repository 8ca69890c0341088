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
	proxyURL, _ := startProxy(t, append([]string{"--upstream", up.URL, "--profile", "strict-01", "--refusal-status", "403", "--agentid-service", agentService(uid, origin)}, localTrust...)...)

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

// idcli tool verify --strict-01 accepts agentid's default headers and
// refuses --legacy ones, naming what protocol-01 requires.
func TestToolVerifyStrict01(t *testing.T) {
	t.Parallel()
	key := signertest.Key(0x34)
	pub := string(key.Public.JWK.MarshalPublic())
	const url = "https://api.example/whoami"
	for _, tc := range []struct {
		name    string
		legacy  bool
		wantErr string
	}{
		{"default", false, ""},
		{"legacy", true, `✘ missing_components: the signature must cover "signature-agent";key="sig1" (protocol-01)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := signer.Headers("GET", url, key, signer.Options{SignatureAgent: "https://agent.example", Legacy: tc.legacy})
			if err != nil {
				t.Fatal(err)
			}
			r := runCLI(t.Context(), t.TempDir(), nil, "tool", "verify", "GET", url, "--signature", h.Signature,
				"--signature-input", h.SignatureInput, "--signature-agent", h.SignatureAgent, "--jwk", pub, "--strict-01")
			if tc.wantErr == "" {
				if r.err != nil || !strings.Contains(r.stdout, "✔ verified identity         https://agent.example/") {
					t.Errorf("tool verify --strict-01 of the default headers: %v\n%s%s", r.err, r.stdout, r.stderr)
				}
				return
			}
			if r.err == nil || !strings.Contains(r.stdout, tc.wantErr) {
				t.Errorf("tool verify --strict-01 of --legacy headers: %v\n%s, want %q", r.err, r.stdout, tc.wantErr)
			}
		})
	}
}
