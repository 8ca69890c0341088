package refserver_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/dunglas/httpsfv"
)

// TestSignatureError: the reference server's refusals (its serve path)
// carry Signature-Error, Date and Vary, and Problem Details when asked;
// an answer of its own (agent_not_found) has no Signature-Error and an
// about:blank problem.
func TestSignatureError(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		key := signertest.Key(71)
		uid := e.register(key)
		problem := func(r *http.Request) *http.Request {
			r.Header.Set("Accept", "application/problem+json")
			return r
		}
		tests := []struct {
			name   string
			req    *http.Request
			status int
			sig    string // the error member, "" for no Signature-Error
			code   string
		}{
			{"unknown key", e.whoamiReq(http.MethodGet, uid, signertest.Key(72)), 401, "unknown_key", "unknown_key"},
			{"created ahead", e.sign(e.request(http.MethodGet, e.base+"/whoami", nil), key,
				signer.Options{SignatureAgent: e.origin(uid), Created: time.Now().Add(10 * time.Minute)}), 401, "clock_skew", "signature_not_yet_valid"},
			{"rotation covering @authority only", func() *http.Request {
				r := e.request(http.MethodPut, e.base+"/agents/"+uid+"/keys", jwkBody(signertest.Key(73).Public.JWK))
				return e.sign(r, key, signer.Options{SignatureAgent: e.origin(uid), Components: []string{"@authority"}})
			}(), 401, "invalid_input", "missing_components"},
			{"unsigned whoami", e.request(http.MethodGet, e.base+"/whoami", nil), 401, "invalid_signature", "missing_signature"},
			{"no such agent", e.request(http.MethodGet, e.directoryURL("agent-ffffffffffffffffffffffff"), nil), 404, "", "agent_not_found"},
		}
		for _, tt := range tests {
			resp := e.send(problem(tt.req))
			var p struct {
				Type   string `json:"type"`
				Title  string `json:"title"`
				Status int    `json:"status"`
				Code   string `json:"code"`
			}
			if resp.status != tt.status || resp.header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(resp.body, &p) != nil {
				t.Errorf("%s: %d %s %s, want %d and Problem Details", tt.name, resp.status, resp.header.Get("Content-Type"), resp.body, tt.status)
				continue
			}
			wantType := "about:blank"
			if tt.sig != "" {
				wantType = "urn:ietf:params:sig-error:" + tt.sig
			}
			if p.Type != wantType || p.Code != tt.code || p.Status != tt.status || (tt.sig == "" && p.Title != http.StatusText(tt.status)) {
				t.Errorf("%s: problem %s, want type %s, code %s", tt.name, resp.body, wantType, tt.code)
			}
			if resp.header.Get("Vary") == "" || resp.header.Get("Date") == "" {
				t.Errorf("%s: Vary %q, Date %q", tt.name, resp.header.Get("Vary"), resp.header.Get("Date"))
			}
			vals := resp.header.Values("Signature-Error")
			if tt.sig == "" {
				if len(vals) != 0 {
					t.Errorf("%s: Signature-Error %q, want none", tt.name, vals)
				}
				continue
			}
			d, err := httpsfv.UnmarshalDictionary(vals)
			if err != nil {
				t.Fatalf("%s: Signature-Error %q: %v", tt.name, vals, err)
			}
			m, _ := d.Get("error")
			if it, ok := m.(httpsfv.Item); !ok || it.Value != httpsfv.Token(tt.sig) {
				t.Errorf("%s: Signature-Error %q, want error=%s", tt.name, vals, tt.sig)
			}
			if tt.sig == "invalid_input" {
				in, _ := d.Get("required_input")
				l, ok := in.(httpsfv.InnerList)
				if !ok || len(l.Items) < 2 || l.Items[0].Value != "@authority" {
					t.Errorf("%s: Signature-Error %q, want required_input listing the write components", tt.name, vals)
				}
			}
		}
	})
}
