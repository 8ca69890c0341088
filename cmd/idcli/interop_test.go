package main

// Interop suite: agentid against the published peers, npm
// `web-bot-auth` (Cloudflare) and npm `vestauth`, driven with node through the
// scripts in testdata/interop. It runs only when AGENTID_INTEROP_NODE_MODULES
// names the node_modules directory made by testdata/interop/install.sh:
//
//	cmd/idcli/testdata/interop/install.sh /tmp/agentid-interop
//	AGENTID_INTEROP_NODE_MODULES=/tmp/agentid-interop/node_modules go test -run Interop ./cmd/idcli
//
// No network besides loopback. Every failure names the peer, the request and
// the reason.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
	"github.com/agentid/agentid/signer/signertest"
)

// Fixed test identities (never real keys).
var (
	interopKey   = signertest.Key(0x42)
	interopOther = signertest.Key(0x17)
)

const (
	interopUID    = "agent-0123456789abcdef01234567"
	interopOrigin = "http://" + interopUID + ".localhost:3000"
	interopURL    = "http://localhost:3000/whoami"
)

// Group 1: requests signed by web-bot-auth verify in agentid's middleware.
func TestInteropWebBotAuthSignsAgentidVerifies(t *testing.T) {
	t.Parallel()
	peers := clitest.NeedPeers(t)
	tests := []struct {
		name, mode string
		// wantCode is "" when agentid must accept the request.
		wantCode  string
		wantBound bool
		why       string
	}{
		{name: "no Signature-Agent", mode: "none"},
		{name: "whole Signature-Agent field covered (web-bot-auth 0.1.3 default)", mode: "whole-field", wantBound: true},
		{name: `"signature-agent";key="sig1" covered`, mode: "member", wantBound: true},
		{name: `"signature-agent";key="sig1" with web-bot-auth 0.1.3's own base`, mode: "member-raw", wantCode: "invalid_signature",
			why: "web-bot-auth 0.1.3 signs the whole field as the value of the keyed component, which RFC 9421 §2.1.2 does not allow"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := map[string]any{"method": "GET", "url": interopURL, "private_jwk": clitest.PrivateJWKMap(t, interopKey), "mode": tc.mode}
			if tc.mode != "none" {
				args["signature_agent"] = interopOrigin
			}
			var signed struct {
				Headers map[string]string `json:"headers"`
				KeyID   string            `json:"keyid"`
				Base    string            `json:"base"`
			}
			if v := peers.Drive(t, "wba-sign.mjs", args, &signed); !v.OK {
				t.Fatalf("%s could not sign GET %s (mode %s): %s", v.Peer, interopURL, tc.mode, v.Error)
			}
			if signed.KeyID != interopKey.KeyID() {
				t.Errorf("web-bot-auth keyid = %q, want agentid's kid %q", signed.KeyID, interopKey.KeyID())
			}
			keys := middleware.NewStaticKeys()
			keys.Add(interopOrigin, interopKey.Public)
			if tc.mode == "none" {
				keys.Add("", interopKey.Public)
			}
			v, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{"localhost:3000"}, AllowMissingSignatureAgent: tc.mode == "none"})
			if err != nil {
				t.Fatal(err)
			}
			r := clitest.SignedRequest(http.MethodGet, interopURL, signed.Headers)

			// Same signature base, byte for byte (except where the peer is wrong).
			sigs, err := signer.ParseSignatures(r.Header.Values("Signature-Input"), r.Header.Values("Signature"))
			if err != nil || len(sigs) != 1 {
				t.Fatalf("agentid cannot parse web-bot-auth's headers %v: %v", signed.Headers, err)
			}
			ours, err := sigs[0].Base(r)
			if err != nil {
				t.Fatalf("agentid cannot build the base of web-bot-auth's GET %s: %v", interopURL, err)
			}
			if same := string(ours) == signed.Base; same != (tc.wantCode == "") {
				t.Errorf("signature base of GET %s (mode %s): agentid and web-bot-auth agree = %v, want %v\nagentid:\n%s\nweb-bot-auth:\n%s",
					interopURL, tc.mode, same, tc.wantCode == "", ours, signed.Base)
			}

			a, err := v.Verify(r)
			if tc.wantCode != "" {
				var me *middleware.Error
				if !errors.As(err, &me) || string(me.Code) != tc.wantCode {
					t.Fatalf("agentid on web-bot-auth's GET %s (mode %s): got %v, want error %s (%s)", interopURL, tc.mode, err, tc.wantCode, tc.why)
				}
				return
			}
			if err != nil {
				t.Fatalf("agentid rejected web-bot-auth's GET %s (mode %s, headers %v): %v", interopURL, tc.mode, signed.Headers, err)
			}
			if a.KeyID != interopKey.KeyID() || a.Bound != tc.wantBound {
				t.Errorf("agent = {KeyID:%q Bound:%v}, want {KeyID:%q Bound:%v}", a.KeyID, a.Bound, interopKey.KeyID(), tc.wantBound)
			}
			if tc.mode != "none" && (a.SignatureAgent != interopOrigin || a.UID != interopUID) {
				t.Errorf("agent = {SignatureAgent:%q UID:%q}, want {%q %q}", a.SignatureAgent, a.UID, interopOrigin, interopUID)
			}

			// The same peer-made headers, replayed, and moved to another host.
			if _, err := v.Verify(clitest.SignedRequest(http.MethodGet, interopURL, signed.Headers)); !isCode(err, "replayed_nonce") {
				t.Errorf("agentid on a replay of web-bot-auth's GET %s: got %v, want replayed_nonce", interopURL, err)
			}
			moved := clitest.SignedRequest(http.MethodGet, "http://evil-tool.example/whoami", signed.Headers)
			if _, err := v.Verify(moved); !isCode(err, "misdirected_request") {
				t.Errorf("agentid on web-bot-auth's headers for %s sent to evil-tool.example: got %v, want misdirected_request", interopURL, err)
			}
		})
	}
}

// Group 1b: web-bot-auth 0.1.3 signs with Ed25519 and with RSA-PSS-SHA512
// (its RSA JWK marked "alg":"PS512"); agentid verifies both with the keys
// published in a key directory: the middleware through idcli proxy over
// HTTP, and idcli tool verify, fetching the directory or given the public
// key with --jwk.
func TestInteropWebBotAuthAlgorithms(t *testing.T) {
	t.Parallel()
	peers := clitest.NeedPeers(t)
	rsaKey := clitest.RSAKey(t)
	edPub := clitest.PublicJWKMap(t, interopKey)
	rsaPub := clitest.PublicJWK(t, &rsaKey.PublicKey, "", "PS512")
	dir := clitest.ServeJSON(t, map[string]clitest.Doc{
		signer.DirectoryPath: {ContentType: signer.DirectoryMediaType, Body: map[string]any{"keys": []any{edPub, rsaPub}}},
	})
	origin := dir.URL // http://127.0.0.1:PORT: its well-known directory holds both keys
	up := newEchoUpstream(t)
	proxyURL, _ := startProxy(t, "--upstream", up.URL, "--trust", "127.0.0.1:*", "--allow-http", "--allow-private")

	tests := []struct {
		name            string
		private, public map[string]any
		alg             string
	}{
		{"Ed25519", clitest.PrivateJWKMap(t, interopKey), edPub, signer.AlgEd25519},
		{"RSA-PSS-SHA512", clitest.RSAPrivateJWK(t, rsaKey), rsaPub, signer.AlgRSAPSSSHA512},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := "/wba/" + tc.alg
			url := proxyURL + path
			var signed struct {
				Headers map[string]string `json:"headers"`
				KeyID   string            `json:"keyid"`
				Alg     string            `json:"alg"`
			}
			if v := peers.Drive(t, "wba-sign.mjs", map[string]any{"method": "GET", "url": url, "private_jwk": tc.private, "signature_agent": origin}, &signed); !v.OK {
				t.Fatalf("%s could not sign GET %s with its %s signer: %s", v.Peer, url, tc.name, v.Error)
			}
			kid := clitest.Thumbprint(t, tc.public)
			if signed.KeyID != kid || signed.Alg != tc.alg || !strings.Contains(signed.Headers["Signature-Input"], `alg="`+tc.alg+`"`) {
				t.Fatalf("web-bot-auth signed with keyid %q alg %q (Signature-Input %s), want the key's thumbprint %q and %s", signed.KeyID, signed.Alg, signed.Headers["Signature-Input"], kid, tc.alg)
			}

			// The middleware, through idcli proxy over HTTP.
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			for k, v := range signed.Headers {
				req.Header.Set(k, v)
			}
			if a := clitest.MustSend(t, http.DefaultClient, req); a.Status != http.StatusOK {
				t.Errorf("idcli proxy on web-bot-auth's %s GET %s: %d %s, want 200", tc.name, url, a.Status, a.Body)
			} else if seen := up.got(path); len(seen) != 1 || seen[0].Get("X-Agent-Verdict") != "verified" || seen[0].Get("X-Agent-Key-Id") != kid || seen[0].Get("X-Agent-Id") != origin {
				t.Errorf("behind idcli proxy, web-bot-auth's %s request arrived with %v, want verified, key %s, identity %s", tc.name, seen, kid, origin)
			}

			// idcli tool verify, fetching the directory, then with --jwk.
			args := []string{"tool", "verify", "GET", url, "--signature", signed.Headers["Signature"],
				"--signature-input", signed.Headers["Signature-Input"], "--signature-agent", signed.Headers["Signature-Agent"]}
			pub, _ := json.Marshal(tc.public)
			for _, extra := range [][]string{{"--allow-http", "--allow-private"}, {"--jwk", string(pub)}} {
				r := runCLI(t.Context(), t.TempDir(), nil, append(append([]string(nil), args...), extra...)...)
				if r.err != nil || !strings.Contains(r.stdout, "✔ verified algorithm        "+tc.alg) || !strings.Contains(r.stdout, "✔ verified kid              "+kid) {
					t.Errorf("idcli tool verify %s on web-bot-auth's %s GET %s: %v\n%s%s", strings.Join(extra, " "), tc.name, url, r.err, r.stdout, r.stderr)
				}
			}
		})
	}
}

// Group 2: requests signed by agentid verify with the peers' verifiers.
func TestInteropAgentidSignsPeersVerify(t *testing.T) {
	t.Parallel()
	peers := clitest.NeedPeers(t)
	type peerCheck struct {
		script string
		args   map[string]any
		// wantErr is "" when the peer must accept; else a substring of its refusal.
		wantErr string
		why     string
	}
	tests := []struct {
		name   string
		opts   signer.Options
		url    string // verified as this URL; "" = signed URL
		checks []peerCheck
	}{
		{
			name: "legacy profile (--legacy)",
			opts: signer.Options{SignatureAgent: interopOrigin, Legacy: true},
			checks: []peerCheck{
				{script: "vestauth-verify.mjs"},
				{script: "wba-verify.mjs"},
			},
		},
		{
			name: "default profile (protocol-01)",
			opts: signer.Options{SignatureAgent: interopOrigin},
			checks: []peerCheck{
				{script: "wba-verify.mjs", args: map[string]any{"member_adapter": true}},
				{script: "wba-verify.mjs", wantErr: "invalid signature",
					why: "web-bot-auth 0.1.3 rebuilds a keyed signature-agent component from the whole field; if this now passes, drop --legacy for it in docs/signature-agent.md"},
				{script: "vestauth-verify.mjs", wantErr: "INVALID_SIGNATURE",
					why: "vestauth 0.21.1 always rebuilds an @authority-only base"},
			},
		},
		{
			name: "default profile without Signature-Agent",
			opts: signer.Options{},
			checks: []peerCheck{
				{script: "vestauth-verify.mjs"},
				{script: "wba-verify.mjs"},
			},
		},
		{
			name: "standards profile (what the default now is)",
			opts: signer.Options{SignatureAgent: interopOrigin, Legacy: true, Standards: true},
			checks: []peerCheck{
				{script: "wba-verify.mjs", args: map[string]any{"member_adapter": true}},
				{script: "wba-verify.mjs", wantErr: "invalid signature",
					why: "web-bot-auth 0.1.3 rebuilds a keyed signature-agent component from the whole field; if this now passes, drop member_adapter"},
				{script: "vestauth-verify.mjs", wantErr: "INVALID_SIGNATURE",
					why: "vestauth 0.21.1 always rebuilds an @authority-only base"},
			},
		},
		{
			name: "whole Signature-Agent field covered",
			opts: signer.Options{SignatureAgent: interopOrigin, Components: []string{"@authority", "signature-agent"}},
			checks: []peerCheck{
				{script: "wba-verify.mjs"},
			},
		},
		{
			name: "legacy profile presented for another host",
			opts: signer.Options{SignatureAgent: interopOrigin, Legacy: true},
			url:  "http://evil-tool.example/whoami",
			checks: []peerCheck{
				{script: "vestauth-verify.mjs", wantErr: "INVALID_SIGNATURE", why: "the signature covers localhost:3000"},
				{script: "wba-verify.mjs", wantErr: "invalid signature", why: "the signature covers localhost:3000"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := signer.Headers(http.MethodGet, interopURL, interopKey, tc.opts)
			if err != nil {
				t.Fatalf("signer.Headers(GET %s): %v", interopURL, err)
			}
			url := tc.url
			if url == "" {
				url = interopURL
			}
			for _, pc := range tc.checks {
				args := map[string]any{"method": "GET", "url": url, "headers": clitest.HeaderMap(h), "public_jwk": clitest.PublicJWKMap(t, interopKey)}
				for k, v := range pc.args {
					args[k] = v
				}
				var got struct {
					KeyID        string `json:"keyid"`
					KeyIDMatches *bool  `json:"keyid_matches"`
					Result       struct {
						UID string `json:"uid"`
						Kid string `json:"kid"`
					} `json:"result"`
				}
				v := peers.Drive(t, pc.script, args, &got)
				req := fmt.Sprintf("GET %s with agentid headers %v", url, clitest.HeaderMap(h))
				if pc.wantErr != "" {
					if v.OK || !strings.Contains(v.Error, pc.wantErr) {
						t.Errorf("%s (%s) on %s: ok=%v error=%q, want a refusal containing %q (%s)", v.Peer, pc.script, req, v.OK, v.Error, pc.wantErr, pc.why)
					}
					continue
				}
				if !v.OK {
					t.Errorf("%s (%s) rejected %s: %s", v.Peer, pc.script, req, v.Error)
					continue
				}
				switch pc.script {
				case "vestauth-verify.mjs":
					wantUID := ""
					if tc.opts.SignatureAgent != "" {
						wantUID = interopUID
					}
					if got.Result.Kid != interopKey.KeyID() || got.Result.UID != wantUID || got.KeyIDMatches == nil || !*got.KeyIDMatches {
						t.Errorf("%s on %s: uid=%q kid=%q keyid_matches=%v, want uid=%q kid=%q true", v.Peer, req, got.Result.UID, got.Result.Kid, got.KeyIDMatches, wantUID, interopKey.KeyID())
					}
				case "wba-verify.mjs":
					if got.KeyID != interopKey.KeyID() {
						t.Errorf("%s on %s: keyid=%q, want %q", v.Peer, req, got.KeyID, interopKey.KeyID())
					}
				}
			}
		})
	}
}

// Group 5: every key in a directory served by agentid has the kid that
// web-bot-auth's jwkToKeyID computes, under the drafts' media type.
func TestInteropDirectoryKeyIDs(t *testing.T) {
	t.Parallel()
	peers := clitest.NeedPeers(t)
	clitest.EachServer(t, clitest.ServerOptions{}, func(t *testing.T, srv *clitest.Server) {
		ctx := context.Background()
		hostname := srv.URL
		dir := t.TempDir()
		res, err := agent.Init(ctx, agent.InitOptions{Dir: dir, Hostname: hostname, Getenv: noEnv})
		if err != nil {
			t.Fatalf("agent init against %s: %v", hostname, err)
		}
		peers.CheckDirectory(t, srv.WellKnownURL(res.UID), res.PublicJWK.Kid)

		rot, err := agent.Rotate(ctx, agent.RotateOptions{Dir: dir, Getenv: noEnv})
		if err != nil {
			t.Fatalf("agent rotate against %s: %v", hostname, err)
		}
		peers.CheckDirectory(t, srv.WellKnownURL(res.UID), rot.PublicJWK.Kid)
	})
}

// Groups 3 and 4, the parts that need no vestauth-compat routes: vestauth's
// CLI signs with credentials written by `idcli agent init`, and reads them
// back after `idcli agent rotate`; agentid's /whoami accepts its requests.
func TestInteropVestauthCLIUsesIdcliCredentials(t *testing.T) {
	t.Parallel()
	peers := clitest.NeedVestauthCLI(t)
	clitest.EachServer(t, clitest.ServerOptions{}, func(t *testing.T, srv *clitest.Server) {
		hostname := srv.URL
		dir := t.TempDir()
		if r := runCLI(t.Context(), dir, nil, "agent", "init", "--hostname", hostname); r.err != nil {
			t.Fatalf("idcli agent init --hostname %s: %v\n%s%s", hostname, r.err, r.stdout, r.stderr)
		}
		uid := clitest.EnvValue(t, dir, agent.EnvUID)
		pub, err := signer.ParsePublicJWK([]byte(clitest.EnvValue(t, dir, agent.EnvPublicJWK)))
		if err != nil {
			t.Fatalf("AGENT_PUBLIC_JWK written by idcli: %v", err)
		}
		peers.VestauthWhoami(t, dir, hostname, uid, pub.JWK.Kid)

		if r := runCLI(t.Context(), dir, nil, "agent", "rotate"); r.err != nil {
			t.Fatalf("idcli agent rotate: %v\n%s%s", r.err, r.stdout, r.stderr)
		}
		next, err := signer.ParsePublicJWK([]byte(clitest.EnvValue(t, dir, agent.EnvPublicJWK)))
		if err != nil {
			t.Fatalf("AGENT_PUBLIC_JWK after idcli agent rotate: %v", err)
		}
		if next.JWK.Kid == pub.JWK.Kid {
			t.Fatalf("idcli agent rotate kept kid %s", pub.JWK.Kid)
		}
		peers.VestauthWhoami(t, dir, hostname, uid, next.JWK.Kid)

		// vestauth's own reading of the rotated file: the key it signs with.
		out, errOut, err := peers.VestauthCLI(t, dir, "agent", "headers", "GET", hostname+"/whoami")
		if err != nil {
			t.Fatalf("vestauth agent headers after idcli agent rotate: %v\n%s%s", err, out, errOut)
		}
		var h map[string]string
		if err := json.Unmarshal([]byte(out), &h); err != nil {
			t.Fatalf("vestauth agent headers printed %q: %v", out, err)
		}
		if want := `keyid="` + next.JWK.Kid + `"`; !strings.Contains(h["Signature-Input"], want) {
			t.Errorf("vestauth agent headers after idcli agent rotate: Signature-Input %q, want %s", h["Signature-Input"], want)
		}
		if want := `sig1="http://` + uid + `.` + strings.TrimPrefix(hostname, "http://") + `"`; h["Signature-Agent"] != want {
			t.Errorf("vestauth agent headers: Signature-Agent %q, want %q", h["Signature-Agent"], want)
		}
	})
}

// The signatures vestauth's verifier wrongly accepts (a nonce replayed, a
// created time far in the future without expires, headers made for another
// host presented with that Host, a signature for one route reused on
// another), each shown accepted by vestauth 0.21.1's primitives.verify — the
// check its own server runs — and rejected by agentid's reference server.
func TestInteropAttacksVestauthAcceptsAgentidRejects(t *testing.T) {
	t.Parallel()
	peers := clitest.NeedPeers(t)
	clitest.EachServer(t, clitest.ServerOptions{}, func(t *testing.T, srv *clitest.Server) {
		hostname := srv.URL
		uid := clitest.Register(t, nil, hostname, interopKey)
		origin := srv.AgentOrigin(uid)
		whoami := hostname + "/whoami"
		serverURL := "http://127.0.0.1" + hostname[strings.LastIndex(hostname, ":"):]
		pub := clitest.PublicJWKMap(t, interopKey)

		vestauthSign := func(t *testing.T, method, url string) map[string]string {
			return peers.VestauthSign(t, method, url, uid, hostname, interopKey)
		}
		// vestauthAccepts shows the attack working against vestauth's verifier.
		vestauthAccepts := func(t *testing.T, method, url string, h map[string]string, attack string) {
			t.Helper()
			v := peers.Drive(t, "vestauth-verify.mjs", map[string]any{"method": method, "url": url, "headers": h, "public_jwk": pub}, nil)
			if !v.OK {
				t.Errorf("attack %q no longer works on %s: it rejects %s %s: %s", attack, v.Peer, method, url, v.Error)
			}
		}
		rejects := func(t *testing.T, got clitest.Answer, want int, codes ...string) {
			t.Helper()
			if got.Status != want || (len(codes) > 0 && !slices.Contains(codes, got.Code)) {
				t.Errorf("agentid answered %d %s, want %d %v", got.Status, got.Body, want, codes)
			}
		}

		t.Run("replayed nonce", func(t *testing.T) {
			h := vestauthSign(t, "GET", whoami)
			vestauthAccepts(t, "GET", whoami, h, "replay")
			vestauthAccepts(t, "GET", whoami, h, "replay")
			if got := clitest.MustDo(t, "GET", whoami, "", h, nil); got.Status != http.StatusOK {
				t.Fatalf("agentid rejected vestauth's first GET %s: %d %s", whoami, got.Status, got.Body)
			}
			rejects(t, clitest.MustDo(t, "GET", whoami, "", h, nil), http.StatusUnauthorized, "replayed_nonce")
		})

		t.Run("created far in the future without expires", func(t *testing.T) {
			params := `("@authority");created=9999999999;keyid="` + interopKey.KeyID() + `";alg="ed25519";nonce="future-1";tag="web-bot-auth"`
			h := clitest.HandSigned(t, whoami, params, origin, interopKey)
			vestauthAccepts(t, "GET", whoami, h, "created=9999999999, no expires")
			rejects(t, clitest.MustDo(t, "GET", whoami, "", h, nil), http.StatusUnauthorized, "invalid_signature_input", "signature_not_yet_valid")

			params = `("@authority");created=9999999999;keyid="` + interopKey.KeyID() + `";alg="ed25519";expires=10000000299;nonce="future-2";tag="web-bot-auth"`
			h = clitest.HandSigned(t, whoami, params, origin, interopKey)
			vestauthAccepts(t, "GET", whoami, h, "created=9999999999")
			rejects(t, clitest.MustDo(t, "GET", whoami, "", h, nil), http.StatusUnauthorized, "signature_not_yet_valid")
		})

		t.Run("Host header swap", func(t *testing.T) {
			// Headers the agent made for a third-party tool, replayed to the
			// service with that tool's name in Host.
			h := vestauthSign(t, "GET", "https://evil-tool.example/x")
			// vestauth's server rebuilds the URL from Host: http://evil-tool.example/rotate.
			vestauthAccepts(t, "POST", "http://evil-tool.example/rotate", h, "Host swap")
			rejects(t, clitest.MustDo(t, "PUT", serverURL+"/agents/"+uid+"/keys", "evil-tool.example", h, clitest.JWKBody(interopOther)), http.StatusMisdirectedRequest, "misdirected_request")
			rejects(t, clitest.MustDo(t, "GET", serverURL+"/whoami", "evil-tool.example", h, nil), http.StatusMisdirectedRequest, "misdirected_request")
		})

		t.Run("signature for one route reused on another", func(t *testing.T) {
			h := vestauthSign(t, "GET", whoami)
			vestauthAccepts(t, "POST", hostname+"/rotate", h, "route reuse")
			rejects(t, clitest.MustDo(t, "PUT", hostname+"/agents/"+uid+"/keys", "", h, clitest.JWKBody(interopOther)), http.StatusUnauthorized, "missing_components")
			peers.CheckDirectory(t, srv.WellKnownURL(uid), interopKey.KeyID())
		})
	})
}

// vestauthAgent is an agent the vestauth CLI created (`vestauth agent
// init`) on a reference server serving the vestauth-compat routes.
type vestauthAgent struct {
	peers   *clitest.Peers
	srv     *clitest.Server
	dir     string // the agent's folder, holding the .env vestauth wrote
	initOut string // what vestauth agent init printed
}

// eachVestauthAgent runs fn with a new vestauthAgent per database backend.
func eachVestauthAgent(t *testing.T, fn func(t *testing.T, va vestauthAgent)) {
	t.Helper()
	peers := clitest.NeedVestauthCLI(t)
	clitest.EachServer(t, clitest.ServerOptions{VestauthCompat: true}, func(t *testing.T, srv *clitest.Server) {
		dir := t.TempDir()
		out, errOut, err := peers.VestauthCLI(t, dir, "agent", "init", "--hostname", srv.URL)
		if err != nil {
			t.Fatalf("vestauth agent init --hostname %s (POST %s/register): %v\nstdout: %s\nstderr: %s", srv.URL, srv.URL, err, out, errOut)
		}
		fn(t, vestauthAgent{peers: peers, srv: srv, dir: dir, initOut: out})
	})
}

// Group 3: the vestauth CLI works against agentid with the vestauth-compat
// routes: init (twice), curl /whoami, rotate, curl again; the directory then
// lists only the new key and the old key is refused.
func TestInteropVestauthCLIAgainstCompat(t *testing.T) {
	t.Parallel()
	eachVestauthAgent(t, func(t *testing.T, va vestauthAgent) {
		peers, srv, dir, out := va.peers, va.srv, va.dir, va.initOut
		hostname := srv.URL
		uid := clitest.EnvValue(t, dir, agent.EnvUID)
		if !signer.ValidUID(uid) {
			t.Fatalf("vestauth agent init wrote AGENT_UID=%q, want agent-<24 hex>", uid)
		}
		for _, want := range []string{"✔ agent created (.env/AGENT_UID=" + uid + ")", "⮕ next run: [vestauth agent curl " + hostname + "/whoami]"} {
			if !strings.Contains(out, want) {
				t.Errorf("vestauth agent init printed %q, want a line %q", out, want)
			}
		}
		out, errOut, err := peers.VestauthCLI(t, dir, "agent", "init", "--hostname", hostname)
		if want := "• agent exists (.env/AGENT_UID=" + uid + ")"; err != nil || !strings.Contains(out, want) {
			t.Errorf("second vestauth agent init (POST %s/register, same key): err=%v stdout=%q stderr=%q, want a line %q", hostname, err, out, errOut, want)
		}
		first, err := signer.ParsePublicJWK([]byte(clitest.EnvValue(t, dir, agent.EnvPublicJWK)))
		if err != nil {
			t.Fatalf("AGENT_PUBLIC_JWK written by vestauth: %v", err)
		}
		oldPriv := clitest.EnvValue(t, dir, agent.EnvPrivateJWK)
		peers.VestauthWhoami(t, dir, hostname, uid, first.JWK.Kid)

		out, errOut, err = peers.VestauthCLI(t, dir, "agent", "rotate")
		if err != nil {
			t.Fatalf("vestauth agent rotate (POST %s/rotate): %v\nstdout: %s\nstderr: %s", hostname, err, out, errOut)
		}
		if want := "✔ agent keys rotated (.env/AGENT_UID=" + uid + ")"; !strings.Contains(out, want) {
			t.Errorf("vestauth agent rotate printed %q, want a line %q", out, want)
		}
		next, err := signer.ParsePublicJWK([]byte(clitest.EnvValue(t, dir, agent.EnvPublicJWK)))
		if err != nil || next.JWK.Kid == first.JWK.Kid {
			t.Fatalf("AGENT_PUBLIC_JWK after vestauth agent rotate: kid %q (was %q), err %v", next.JWK.Kid, first.JWK.Kid, err)
		}
		peers.VestauthWhoami(t, dir, hostname, uid, next.JWK.Kid)
		peers.CheckDirectory(t, srv.WellKnownURL(uid), next.JWK.Kid)

		// The old key is refused now.
		var oldJWK map[string]any
		if err := json.Unmarshal([]byte(oldPriv), &oldJWK); err != nil {
			t.Fatal(err)
		}
		var signed struct {
			Headers map[string]string `json:"headers"`
		}
		if v := peers.Drive(t, "vestauth-sign.mjs", map[string]any{"method": "GET", "url": hostname + "/whoami", "uid": uid, "private_jwk": oldJWK, "hostname": hostname}, &signed); !v.OK {
			t.Fatalf("%s could not sign with the old key: %s", v.Peer, v.Error)
		}
		if got := clitest.MustDo(t, "GET", hostname+"/whoami", "", signed.Headers, nil); got.Status != http.StatusUnauthorized || got.Code != "revoked_key" {
			t.Errorf("agentid on vestauth's GET %s/whoami signed by the rotated-out key: %d %s, want 401 revoked_key", hostname, got.Status, got.Body)
		}
	})
}

// Group 4: a .env written by the vestauth CLI is used unchanged by `idcli
// agent curl`; after `idcli agent rotate` on it, vestauth reads it back
// (curl and a further vestauth rotate), and idcli reads vestauth's rewrite.
func TestInteropEnvFileSharedWithVestauth(t *testing.T) {
	t.Parallel()
	eachVestauthAgent(t, func(t *testing.T, va vestauthAgent) {
		peers, dir, hostname := va.peers, va.dir, va.srv.URL
		envPath := filepath.Join(dir, ".env")
		written, err := os.ReadFile(envPath)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(written, []byte(`AGENT_PUBLIC_JWK="{"`)) {
			t.Fatalf("vestauth wrote an unexpected .env format (want JSON in double quotes, unescaped):\n%s", written)
		}
		uid := clitest.EnvValue(t, dir, agent.EnvUID)
		first, err := signer.ParsePublicJWK([]byte(clitest.EnvValue(t, dir, agent.EnvPublicJWK)))
		if err != nil {
			t.Fatalf("AGENT_PUBLIC_JWK written by vestauth, as idcli reads it: %v", err)
		}

		idcliWhoami := func(t *testing.T, kid string) {
			t.Helper()
			r := runCLI(t.Context(), dir, nil, "agent", "curl", hostname+"/whoami")
			var got clitest.Whoami
			if r.err != nil || json.Unmarshal([]byte(r.stdout), &got) != nil || got.UID != uid || got.Kid != kid {
				t.Errorf("idcli agent curl %s/whoami with vestauth's .env: err=%v stdout=%q stderr=%q, want uid %s kid %s", hostname, r.err, r.stdout, r.stderr, uid, kid)
			}
		}
		idcliWhoami(t, first.JWK.Kid)
		if after, _ := os.ReadFile(envPath); !bytes.Equal(after, written) {
			t.Errorf("idcli agent curl changed vestauth's .env:\nbefore:\n%s\nafter:\n%s", written, after)
		}

		if r := runCLI(t.Context(), dir, nil, "agent", "rotate"); r.err != nil {
			t.Fatalf("idcli agent rotate on vestauth's .env (PUT %s/agents/%s/keys): %v\n%s%s", hostname, uid, r.err, r.stdout, r.stderr)
		}
		second, err := signer.ParsePublicJWK([]byte(clitest.EnvValue(t, dir, agent.EnvPublicJWK)))
		if err != nil || second.JWK.Kid == first.JWK.Kid {
			t.Fatalf("after idcli agent rotate: kid %q (was %q), err %v", second.JWK.Kid, first.JWK.Kid, err)
		}
		peers.VestauthWhoami(t, dir, hostname, uid, second.JWK.Kid)

		out, errOut, err := peers.VestauthCLI(t, dir, "agent", "rotate")
		if err != nil {
			t.Fatalf("vestauth agent rotate after idcli agent rotate (POST %s/rotate): %v\nstdout: %s\nstderr: %s", hostname, err, out, errOut)
		}
		third, err := signer.ParsePublicJWK([]byte(clitest.EnvValue(t, dir, agent.EnvPublicJWK)))
		if err != nil || third.JWK.Kid == second.JWK.Kid {
			t.Fatalf("after vestauth agent rotate: kid %q (was %q), err %v", third.JWK.Kid, second.JWK.Kid, err)
		}
		idcliWhoami(t, third.JWK.Kid)
	})
}

// The compat routes keep the native protections against what vestauth's
// own server accepts: a captured rotation cannot be replayed, and headers
// made for another host cannot be presented with that Host.
func TestInteropCompatAttacksRejected(t *testing.T) {
	t.Parallel()
	peers := clitest.NeedPeers(t)
	clitest.EachServer(t, clitest.ServerOptions{VestauthCompat: true}, func(t *testing.T, srv *clitest.Server) {
		hostname := srv.URL
		uid := clitest.Register(t, nil, hostname, interopKey)
		serverURL := "http://127.0.0.1" + hostname[strings.LastIndex(hostname, ":"):]
		sign := func(t *testing.T, method, url string) map[string]string {
			return peers.VestauthSign(t, method, url, uid, hostname, interopKey)
		}

		t.Run("Host header swap on /rotate", func(t *testing.T) {
			h := sign(t, "GET", "https://evil-tool.example/x")
			got := clitest.MustDo(t, "POST", serverURL+"/rotate", "evil-tool.example", h, clitest.JWKBody(interopOther))
			if got.Status != http.StatusMisdirectedRequest {
				t.Errorf("agentid on vestauth headers for evil-tool.example sent to POST /rotate with Host evil-tool.example: %d %s, want 421", got.Status, got.Body)
			}
			peers.CheckDirectory(t, srv.WellKnownURL(uid), interopKey.KeyID())
		})

		t.Run("one captured /rotate sent three times at once", func(t *testing.T) {
			h := sign(t, "POST", hostname+"/rotate")
			keys := make([]signer.PrivateKey, 3)
			answers := make([]clitest.Answer, 3)
			errs := make([]error, 3)
			var wg sync.WaitGroup
			for i := range keys {
				keys[i] = signertest.Key(byte(0x51 + i))
				wg.Add(1)
				go func() {
					defer wg.Done()
					answers[i], errs[i] = clitest.Do("POST", hostname+"/rotate", "", h, clitest.JWKBody(keys[i]))
				}()
			}
			wg.Wait()
			won := -1
			for i, a := range answers {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				switch {
				case a.Status == http.StatusOK && won < 0:
					won = i
				case a.Status == http.StatusOK:
					t.Errorf("agentid accepted vestauth's captured POST %s/rotate twice (answers %d and %d)", hostname, won, i)
				case a.Status != http.StatusUnauthorized && a.Status != http.StatusConflict:
					t.Errorf("agentid on a concurrent copy of vestauth's POST %s/rotate: %d %s, want 401 or 409", hostname, a.Status, a.Body)
				}
			}
			if won < 0 {
				t.Fatalf("agentid accepted no copy of vestauth's POST %s/rotate: %+v", hostname, answers)
			}
			peers.CheckDirectory(t, srv.WellKnownURL(uid), keys[won].KeyID())
		})

		t.Run("a /whoami request already served cannot rotate", func(t *testing.T) {
			key := signertest.Key(0x61)
			uid := clitest.Register(t, nil, hostname, key)
			var out struct {
				Headers map[string]string `json:"headers"`
			}
			if v := peers.Drive(t, "vestauth-sign.mjs", map[string]any{"method": "GET", "url": hostname + "/whoami", "uid": uid,
				"private_jwk": clitest.PrivateJWKMap(t, key), "hostname": hostname}, &out); !v.OK {
				t.Fatalf("%s could not sign GET %s/whoami: %s", v.Peer, hostname, v.Error)
			}
			if got := clitest.MustDo(t, "GET", hostname+"/whoami", "", out.Headers, nil); got.Status != http.StatusOK {
				t.Fatalf("agentid on vestauth's GET %s/whoami: %d %s, want 200", hostname, got.Status, got.Body)
			}
			got := clitest.MustDo(t, "POST", hostname+"/rotate", "", out.Headers, clitest.JWKBody(interopOther))
			if got.Status != http.StatusUnauthorized || got.Code != "replayed_nonce" {
				t.Errorf("agentid on vestauth's headers of a served GET %s/whoami replayed to POST /rotate: %d %s, want 401 replayed_nonce", hostname, got.Status, got.Body)
			}
			peers.CheckDirectory(t, srv.WellKnownURL(uid), key.KeyID())
		})
	})
}

// isCode reports whether err is a middleware error with code.
func isCode(err error, code string) bool {
	var me *middleware.Error
	return errors.As(err, &me) && string(me.Code) == code
}
