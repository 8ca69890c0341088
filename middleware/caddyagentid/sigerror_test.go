package caddyagentid_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestCaddySignatureError: the module's refusals, from a live Caddy, carry
// Signature-Error (none on a refusal by policy), Date, Vary: Accept and
// Problem Details when the client asks for them.
func TestCaddySignatureError(t *testing.T) {
	key := signertest.Key(0x45)
	const uid = "agent-0123456789abcdef0123456a"
	keyPort := agentKeys(t, key)
	up := newUpstream(t)
	port := freePort(t)
	host := "app.example.com:" + port
	startCaddy(t, port, fmt.Sprintf(`http://:%s {
	agentid {
		authorities %s
		trust *.localhost:*
		allow_http
		allow_private
		mode required
		deny hosts *.denied.localhost
	}
	reverse_proxy %s
}
`, port, host, strings.TrimPrefix(up.URL, "http://")))
	client := &http.Client{Timeout: 10 * time.Second}
	request := func(origin string, created time.Time) *http.Request {
		req, _ := http.NewRequest(http.MethodGet, "http://"+host+"/x", nil)
		if origin != "" {
			if err := signer.Sign(req, key, signer.Options{SignatureAgent: origin, Created: created}); err != nil {
				t.Fatal(err)
			}
		}
		req.URL.Host, req.Host = "127.0.0.1:"+port, host
		req.Header.Set("Accept", "application/problem+json, application/json;q=0.9")
		return req
	}
	tests := []struct {
		name   string
		req    *http.Request
		status int
		sig    string
		code   string
	}{
		{"unsigned", request("", time.Time{}), 401, "invalid_signature", "missing_signature"},
		{"created ahead", request("http://"+uid+".localhost:"+keyPort, time.Now().Add(10*time.Minute)), 401, "clock_skew", "signature_not_yet_valid"},
		{"denied by policy", request("http://"+uid+".denied.localhost:"+keyPort, time.Time{}), 403, "", "forbidden"},
	}
	for _, tt := range tests {
		resp, err := client.Do(tt.req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p struct {
			Type   string `json:"type"`
			Status int    `json:"status"`
			Code   string `json:"code"`
		}
		wantType, wantSig := "about:blank", ""
		if tt.sig != "" {
			wantType, wantSig = "urn:ietf:params:sig-error:"+tt.sig, "error="+tt.sig
		}
		if resp.StatusCode != tt.status || resp.Header.Get("Signature-Error") != wantSig ||
			resp.Header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(body, &p) != nil ||
			p.Type != wantType || p.Code != tt.code || p.Status != tt.status {
			t.Errorf("%s: %d Signature-Error %q %s, want %d %q and a problem of type %s, code %s",
				tt.name, resp.StatusCode, resp.Header.Get("Signature-Error"), body, tt.status, wantSig, wantType, tt.code)
		}
		if _, err := http.ParseTime(resp.Header.Get("Date")); err != nil || resp.Header.Get("Vary") != "Accept" {
			t.Errorf("%s: Date %q, Vary %q", tt.name, resp.Header.Get("Date"), resp.Header.Values("Vary"))
		}
	}
	if n := len(up.got("/x")); n != 0 {
		t.Errorf("the upstream saw %d refused requests", n)
	}
}
