package refserver_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestMalformedRequests sends requests that are wrong in one way each and
// checks the documented 4xx status, the JSON error body and its code.
func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		keyA, keyB, fresh := signertest.Key(61), signertest.Key(62), signertest.Key(63)
		uidA, uidB := e.register(keyA), e.register(keyB)
		unknownUID := "agent-0123456789abcdef01234567"
		write := signer.WriteComponents

		post := func(body []byte, contentType string) *http.Request {
			req := e.request(http.MethodPost, e.base+"/agents", body)
			req.Header.Del("Content-Type")
			if contentType != "" {
				req.Header.Set("Content-Type", contentType)
			}
			return req
		}
		freshBody := jwkBody(fresh.Public.JWK)
		signedReg := func(opts signer.Options) *http.Request {
			if opts.Components == nil {
				opts.Components = write
			}
			return e.sign(post(freshBody, "application/json"), fresh, opts)
		}
		jwkWith := func(members map[string]any) []byte {
			m := map[string]any{"kty": "OKP", "crv": "Ed25519", "x": fresh.Public.JWK.X}
			for k, v := range members {
				if v == nil {
					delete(m, k)
				} else {
					m[k] = v
				}
			}
			b, _ := json.Marshal(map[string]any{"public_jwk": m})
			return b
		}
		whoami := func(key signer.PrivateKey, opts signer.Options) *http.Request {
			return e.sign(e.request(http.MethodGet, e.base+"/whoami", nil), key, opts)
		}
		rotate := func(uid string, body []byte, contentType string) *http.Request {
			req := e.request(http.MethodPut, e.base+"/agents/"+uid+"/keys", body)
			req.Header.Set("Content-Type", contentType)
			return req
		}
		big := bytes.Repeat([]byte(" "), 2<<20)

		tests := []struct {
			name       string
			req        func() *http.Request
			wantStatus int
			wantCode   string
		}{
			// POST /agents: content type, size, JSON, JWK.
			{"register text/plain", func() *http.Request { return post(freshBody, "text/plain") }, 415, "unsupported_media_type"},
			{"register without content type", func() *http.Request { return post(freshBody, "") }, 415, "unsupported_media_type"},
			{"register form encoded", func() *http.Request { return post(freshBody, "application/x-www-form-urlencoded") }, 415, "unsupported_media_type"},
			{"register garbled content type", func() *http.Request { return post(freshBody, "application/json; ;") }, 415, "unsupported_media_type"},
			{"register 2 MB body", func() *http.Request { return post(append(freshBody, big...), "application/json") }, 413, "payload_too_large"},
			{"register 2 MB chunked body", func() *http.Request {
				req := post(nil, "application/json")
				req.Body = io.NopCloser(io.MultiReader(bytes.NewReader(freshBody), bytes.NewReader(big)))
				req.ContentLength = -1
				return req
			}, 413, "payload_too_large"},
			{"register truncated JSON", func() *http.Request { return post([]byte(`{"public_jwk":`), "application/json") }, 400, "invalid_request"},
			{"register JSON array", func() *http.Request { return post([]byte(`[]`), "application/json") }, 400, "invalid_request"},
			{"register trailing data", func() *http.Request { return post(append(freshBody, []byte(` {}`)...), "application/json") }, 400, "invalid_request"},
			{"register stray }", func() *http.Request { return post(append(freshBody, '}'), "application/json") }, 400, "invalid_request"},
			{"register stray ] after white space", func() *http.Request { return post(append(freshBody, " \n]"...), "application/json") }, 400, "invalid_request"},
			{"register empty object", func() *http.Request { return post([]byte(`{}`), "application/json") }, 400, "invalid_request"},
			{"register null jwk", func() *http.Request { return post([]byte(`{"public_jwk":null}`), "application/json") }, 400, "invalid_request"},
			{"register empty body", func() *http.Request { return post([]byte{}, "application/json") }, 400, "invalid_request"},
			{"register jwk is a string", func() *http.Request { return post([]byte(`{"public_jwk":"abc"}`), "application/json") }, 400, "invalid_jwk"},
			{"register RSA key", func() *http.Request { return post(jwkWith(map[string]any{"kty": "RSA"}), "application/json") }, 400, "invalid_jwk"},
			{"register X25519 key", func() *http.Request { return post(jwkWith(map[string]any{"crv": "X25519"}), "application/json") }, 400, "invalid_jwk"},
			{"register x missing", func() *http.Request { return post(jwkWith(map[string]any{"x": nil}), "application/json") }, 400, "invalid_jwk"},
			{"register x too short", func() *http.Request { return post(jwkWith(map[string]any{"x": "AAAA"}), "application/json") }, 400, "invalid_jwk"},
			{"register x not base64url", func() *http.Request {
				return post(jwkWith(map[string]any{"x": strings.Repeat("!", 43)}), "application/json")
			}, 400, "invalid_jwk"},
			{"register x is a number", func() *http.Request { return post(jwkWith(map[string]any{"x": 42}), "application/json") }, 400, "invalid_jwk"},
			{"register jwk with d", func() *http.Request {
				return post(jwkWith(map[string]any{"d": fresh.JWK().D}), "application/json")
			}, 400, "invalid_jwk"},
			{"register kid not thumbprint", func() *http.Request { return post(jwkWith(map[string]any{"kid": "my-key"}), "application/json") }, 400, "invalid_jwk"},

			// POST /agents: signatures.
			{"register unsigned", func() *http.Request { return post(freshBody, "application/json") }, 401, "missing_signature"},
			{"register Signature without Signature-Input", func() *http.Request {
				req := signedReg(signer.Options{})
				req.Header.Del("Signature-Input")
				return req
			}, 401, "invalid_signature_input"},
			{"register garbled Signature-Input", func() *http.Request {
				req := signedReg(signer.Options{})
				req.Header.Set("Signature-Input", `sig1=("@authority" ;;; garbage`)
				return req
			}, 401, "invalid_signature_input"},
			{"register garbled Signature", func() *http.Request {
				req := signedReg(signer.Options{})
				req.Header.Set("Signature", "sig1=not-a-byte-sequence")
				return req
			}, 401, "invalid_signature_input"},
			{"register covers only @authority", func() *http.Request { return signedReg(signer.Options{Components: []string{"@authority"}}) }, 401, "missing_components"},
			{"register without content-digest", func() *http.Request {
				return signedReg(signer.Options{Components: []string{"@method", "@authority", "@path"}})
			}, 401, "missing_components"},
			{"register signed by another key", func() *http.Request {
				return e.sign(post(freshBody, "application/json"), signertest.Key(64), signer.Options{Components: write})
			}, 401, "unknown_key"},
			{"register tampered signature", func() *http.Request {
				req := signedReg(signer.Options{})
				sig := req.Header.Get("Signature")
				i := strings.Index(sig, ":") + 1
				flipped := byte('A')
				if sig[i] == 'A' {
					flipped = 'B'
				}
				req.Header.Set("Signature", sig[:i]+string(flipped)+sig[i+1:])
				return req
			}, 401, "invalid_signature"},
			{"register body changed after signing", func() *http.Request {
				req := signedReg(signer.Options{})
				changed := append(append([]byte(nil), freshBody...), '\n')
				req.Body = io.NopCloser(bytes.NewReader(changed))
				req.ContentLength = int64(len(changed))
				return req
			}, 401, "content_digest_mismatch"},
			{"register expired signature", func() *http.Request {
				return signedReg(signer.Options{Created: time.Now().Add(-time.Hour)})
			}, 401, "expired_signature"},
			{"register signature from the future", func() *http.Request {
				return signedReg(signer.Options{Created: time.Now().Add(time.Hour)})
			}, 401, "signature_not_yet_valid"},
			{"register window too long", func() *http.Request { return signedReg(signer.Options{TTL: time.Hour}) }, 401, "signature_window_too_long"},
			{"register without nonce", func() *http.Request { return signedReg(signer.Options{NoNonce: true}) }, 401, "missing_nonce"},
			{"register wrong tag", func() *http.Request { return signedReg(signer.Options{Tag: "something-else"}) }, 401, "invalid_signature_input"},

			// Routing.
			{"GET /agents", func() *http.Request { return e.request(http.MethodGet, e.base+"/agents", nil) }, 405, "method_not_allowed"},
			{"DELETE /whoami", func() *http.Request { return e.request(http.MethodDelete, e.base+"/whoami", nil) }, 405, "method_not_allowed"},
			{"POST /", func() *http.Request { return e.request(http.MethodPost, e.base+"/", []byte(`{}`)) }, 405, "method_not_allowed"},
			{"unknown path", func() *http.Request { return e.request(http.MethodGet, e.base+"/register", nil) }, 404, "not_found"},
			{"unclean path", func() *http.Request { return e.request(http.MethodGet, e.base+"//whoami", nil) }, 404, "not_found"},
			{"foreign host", func() *http.Request {
				req := e.request(http.MethodGet, e.base+"/", nil)
				req.Host = "evil-tool.example"
				return req
			}, 421, "misdirected_request"},
			{"service host with another port", func() *http.Request {
				req := e.request(http.MethodGet, e.base+"/whoami", nil)
				req.Host = "agentid.test:1"
				return req
			}, 421, "misdirected_request"},
			{"directory unknown agent", func() *http.Request { return e.request(http.MethodGet, e.directoryURL(unknownUID), nil) }, 404, "agent_not_found"},
			{"directory bad uid in host", func() *http.Request {
				return e.request(http.MethodGet, "http://agent-xyz."+e.host+"/.well-known/http-message-signatures-directory", nil)
			}, 404, "agent_not_found"},
			{"directory with a query on the base host", func() *http.Request {
				return e.request(http.MethodGet, e.base+"/.well-known/http-message-signatures-directory?x", nil)
			}, 404, "not_found"},
			{"POST to a directory", func() *http.Request { return e.request(http.MethodPost, e.directoryURL(uidA), []byte(`{}`)) }, 405, "method_not_allowed"},
			{"whoami on an agent host", func() *http.Request { return e.request(http.MethodGet, e.origin(uidA)+"/whoami", nil) }, 404, "not_found"},

			// /whoami.
			{"whoami unsigned", func() *http.Request { return e.request(http.MethodGet, e.base+"/whoami", nil) }, 401, "missing_signature"},
			{"whoami without Signature-Agent", func() *http.Request { return whoami(keyA, signer.Options{}) }, 401, "invalid_signature_agent"},
			{"whoami garbled Signature-Agent", func() *http.Request {
				req := whoami(keyA, signer.Options{})
				req.Header.Set("Signature-Agent", `sig1="ftp://x`)
				return req
			}, 401, "invalid_signature_agent"},
			{"whoami foreign Signature-Agent", func() *http.Request {
				return whoami(keyA, signer.Options{SignatureAgent: "https://" + uidA + ".evil.example"})
			}, 401, "untrusted_signature_agent"},
			{"whoami look-alike Signature-Agent", func() *http.Request {
				return whoami(keyA, signer.Options{SignatureAgent: "http://" + uidA + ".xagentid.test" + e.host[len("agentid.test"):]})
			}, 401, "untrusted_signature_agent"},
			{"whoami unregistered agent", func() *http.Request {
				return whoami(keyA, signer.Options{SignatureAgent: e.origin(unknownUID)})
			}, 401, "unknown_key"},
			{"whoami another agent's key", func() *http.Request {
				return whoami(keyB, signer.Options{SignatureAgent: e.origin(uidA)})
			}, 401, "unknown_key"},
			{"whoami unknown key", func() *http.Request {
				return whoami(fresh, signer.Options{SignatureAgent: e.origin(uidA)})
			}, 401, "unknown_key"},

			// PUT /agents/{uid}/keys.
			{"rotate bad uid", func() *http.Request {
				return rotate("bob", jwkBody(fresh.Public.JWK), "application/json")
			}, 404, "agent_not_found"},
			{"rotate wrong content type", func() *http.Request {
				return rotate(uidA, jwkBody(fresh.Public.JWK), "text/plain")
			}, 415, "unsupported_media_type"},
			{"rotate bad JSON", func() *http.Request { return rotate(uidA, []byte(`{`), "application/json") }, 400, "invalid_request"},
			{"rotate jwk with d", func() *http.Request {
				return rotate(uidA, jwkWith(map[string]any{"d": fresh.JWK().D}), "application/json")
			}, 400, "invalid_jwk"},
			{"rotate unsigned", func() *http.Request {
				return rotate(uidA, jwkBody(fresh.Public.JWK), "application/json")
			}, 401, "missing_signature"},
			{"rotate without sig2", func() *http.Request {
				req := rotate(uidA, jwkBody(fresh.Public.JWK), "application/json")
				return e.sign(req, keyA, signer.Options{Components: write, SignatureAgent: e.origin(uidA)})
			}, 401, "invalid_signature_input"},
			{"rotate sig2 by another key", func() *http.Request {
				req := rotate(uidA, jwkBody(fresh.Public.JWK), "application/json")
				e.sign(req, keyA, signer.Options{Components: write, SignatureAgent: e.origin(uidA)})
				return e.sign(req, signertest.Key(65), signer.Options{Label: "sig2", Tag: signer.KeyPossessionTag, Components: write})
			}, 401, "unknown_key"},
			{"rotate sig1 by the new key only", func() *http.Request {
				req := rotate(uidA, jwkBody(fresh.Public.JWK), "application/json")
				e.sign(req, fresh, signer.Options{Components: write, SignatureAgent: e.origin(uidA)})
				return e.sign(req, fresh, signer.Options{Label: "sig2", Tag: signer.KeyPossessionTag, Components: write})
			}, 401, "unknown_key"},
			{"rotate another agent", func() *http.Request {
				req := rotate(uidA, jwkBody(fresh.Public.JWK), "application/json")
				e.sign(req, keyB, signer.Options{Components: write, SignatureAgent: e.origin(uidB)})
				return e.sign(req, fresh, signer.Options{Label: "sig2", Tag: signer.KeyPossessionTag, Components: write})
			}, 403, "forbidden"},
			{"rotate to the current key", func() *http.Request { return e.rotateReq(uidA, keyA, keyA) }, 409, "key_conflict"},
			{"rotate to another agent's key", func() *http.Request { return e.rotateReq(uidA, keyA, keyB) }, 409, "key_conflict"},
		}
		if len(tests) < 30 {
			t.Fatalf("only %d cases, want at least 30", len(tests))
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				resp := e.send(tt.req())
				if resp.status != tt.wantStatus {
					t.Fatalf("status = %d, want %d (%s)", resp.status, tt.wantStatus, resp.body)
				}
				if code := resp.errorCode(t); code != tt.wantCode {
					t.Errorf("code = %s, want %s (%s)", code, tt.wantCode, resp.body)
				}
				if resp.status == http.StatusUnauthorized && resp.header.Get("Accept-Signature") == "" {
					t.Errorf("401 without Accept-Signature")
				}
				if resp.status == http.StatusMethodNotAllowed && resp.header.Get("Allow") == "" {
					t.Errorf("405 without Allow")
				}
			})
		}
		// None of this changed anything.
		wantRows(t, e.db, "after the malformed requests (active keys)", 2, 2, "revoked_at IS NULL")
	})
}

// TestInvalidAuthority: a Host that is not one host[:port] is refused with
// 400 invalid_authority before any route, rather than normalised into the
// service host (dropping a trailing ":80" from "agentid.test:<port>:80"
// would leave the service host) or an agent host.
func TestInvalidAuthority(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		key := signertest.Key(66)
		uid := e.register(key)
		port := e.host[len("agentid.test:"):]
		tests := []struct {
			name, url, host string
			wantStatus      int
			wantCode        middleware.Code
		}{
			{"two ports, the second the default", e.base + "/", e.host + ":80", 400, middleware.CodeInvalidAuthority},
			{"two ports", e.base + "/", e.host + ":" + port, 400, middleware.CodeInvalidAuthority},
			{"empty port", e.base + "/", "agentid.test:", 400, middleware.CodeInvalidAuthority},
			{"port not a number", e.base + "/", "agentid.test:http", 400, middleware.CodeInvalidAuthority},
			{"port of six digits", e.base + "/", "agentid.test:000080", 400, middleware.CodeInvalidAuthority},
			{"user info", e.base + "/", "user@" + e.host, 400, middleware.CodeInvalidAuthority},
			{"agent host with two ports", e.directoryURL(uid), uid + "." + e.host + ":80", 400, middleware.CodeInvalidAuthority},
			{"whoami with two ports", e.base + "/whoami", e.host + ":80", 400, middleware.CodeInvalidAuthority},
			// Still served: the same authorities, well formed.
			{"service host, uppercase", e.base + "/", "AGENTID.TEST:" + port, 200, ""},
			{"agent host", e.directoryURL(uid), "", 200, ""},
			{"another port of the service host", e.base + "/", "agentid.test:1", 421, middleware.CodeMisdirectedRequest},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				req := e.request(http.MethodGet, tt.url, nil)
				if tt.host != "" {
					req.Host = tt.host
				}
				resp := e.send(req)
				if resp.status != tt.wantStatus {
					t.Fatalf("Host %q: status = %d, want %d (%s)", tt.host, resp.status, tt.wantStatus, resp.body)
				}
				if tt.wantCode != "" {
					if code := resp.errorCode(t); code != string(tt.wantCode) {
						t.Errorf("Host %q: code = %s, want %s", tt.host, code, tt.wantCode)
					}
				}
			})
		}
	})
}
