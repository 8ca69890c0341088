package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// signedHeaders signs method url with key as an agent whose origin is agent,
// created at created.
func signedHeaders(t *testing.T, method, url string, key signer.PrivateKey, agent string, created time.Time, standards bool) signer.SignatureHeaders {
	t.Helper()
	// standards false is the legacy shape (Signature-Agent not covered);
	// true is what agentid signs by default (protocol-01).
	h, err := signer.Headers(method, url, key, signer.Options{
		SignatureAgent: agent, Created: created, Legacy: !standards,
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// tamper flips one bit of the signature value in a `label=:base64:` field.
func tamper(t *testing.T, field string) string {
	t.Helper()
	label, rest, ok := strings.Cut(field, "=:")
	if !ok {
		t.Fatalf("signature %q has no byte sequence", field)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(rest, ":"))
	if err != nil {
		t.Fatal(err)
	}
	raw[10] ^= 1
	return label + "=:" + base64.StdEncoding.EncodeToString(raw) + ":"
}

func sigArgs(h signer.SignatureHeaders) []string {
	args := []string{"--signature", h.Signature, "--signature-input", h.SignatureInput}
	if h.SignatureAgent != "" {
		args = append(args, "--signature-agent", h.SignatureAgent)
	}
	return args
}

func TestToolVerify(t *testing.T) {
	t.Parallel()
	key, other := signertest.Key(1), signertest.Key(2)
	ts, hits := serveDirectory(t, directoryResponse{header: goodDirectoryHeader(), body: directoryBody(t, key)})
	host := strings.TrimPrefix(ts.URL, "http://")
	created := time.Unix(1767225600, 0) // 2026-01-01T00:00:00Z
	at := strconv.FormatInt(created.Unix()+10, 10)
	const url = "https://api.example/whoami"
	h := signedHeaders(t, "GET", url, key, ts.URL, created, false)
	bound := signedHeaders(t, "GET", url, key, ts.URL, created, true)
	byOther := signedHeaders(t, "GET", url, other, ts.URL, created, false)
	local := []string{"--allow-http", "--allow-private", "--now", at}

	tests := []struct {
		name       string
		method     string   // default GET
		url        string   // default url
		args       []string // after METHOD URL
		wantExit   int
		wantOut    []string
		wantNotOut []string
		wantFetch  bool
	}{
		{
			name: "verified",
			args: append(sigArgs(h), local...),
			wantOut: []string{
				"• trusting " + host + " (the Signature-Agent host); use --trust to choose",
				"✔ verified kid              " + key.KeyID(),
				"✔ verified signature agent  " + ts.URL,
				"✔ verified directory        " + ts.URL + "/.well-known/http-message-signatures-directory",
				"✔ verified uid              -",
				"✔ verified created          2026-01-01T00:00:00Z (1767225600)",
				"✔ verified expires          2026-01-01T00:05:00Z (1767225900)",
				`✔ verified components       "@authority"`,
				"✔ verified bound            false",
			},
			wantFetch: true,
		},
		{
			name:      "standards profile is bound",
			args:      append(sigArgs(bound), local...),
			wantOut:   []string{`✔ verified components       "@authority" "signature-agent";key="sig1"`, "✔ verified bound            true"},
			wantFetch: true,
		},
		{
			name:       "explicit trust pattern",
			args:       append(sigArgs(h), append([]string{"--trust", "127.0.0.1:*"}, local...)...),
			wantOut:    []string{"✔ verified kid"},
			wantNotOut: []string{"• trusting"},
			wantFetch:  true,
		},
		{
			name:       "tampered signature",
			args:       append([]string{"--signature", tamper(t, h.Signature), "--signature-input", h.SignatureInput, "--signature-agent", h.SignatureAgent}, local...),
			wantExit:   1,
			wantOut:    []string{"✘ invalid_signature: the signature does not verify with key " + strconv.Quote(key.KeyID())},
			wantNotOut: []string{"✔ verified"},
			wantFetch:  true,
		},
		{
			name:      "request sent to another host",
			url:       "https://evil.example/whoami",
			args:      append(sigArgs(h), local...),
			wantExit:  1,
			wantOut:   []string{"✘ invalid_signature:"},
			wantFetch: true,
		},
		{
			name:      "another method still verifies: only @authority is covered",
			method:    "DELETE",
			args:      append(sigArgs(h), local...),
			wantOut:   []string{"✔ verified kid"},
			wantFetch: true,
		},
		{
			name:      "key not in the directory",
			args:      append(sigArgs(byOther), local...),
			wantExit:  1,
			wantOut:   []string{"✘ unknown_key: key " + strconv.Quote(other.KeyID()) + " is not published by " + ts.URL},
			wantFetch: true,
		},
		{
			name:     "expired",
			args:     append(sigArgs(h), "--allow-http", "--allow-private", "--now", strconv.FormatInt(created.Unix()+300+61, 10)),
			wantExit: 1,
			wantOut:  []string{"✘ expired_signature: signature expired at 2026-01-01T00:05:00Z", "hint: use --now UNIX"},
		},
		{
			name:     "not yet valid",
			args:     append(sigArgs(h), "--allow-http", "--allow-private", "--now", strconv.FormatInt(created.Unix()-61, 10)),
			wantExit: 1,
			wantOut:  []string{"✘ signature_not_yet_valid:"},
		},
		{
			name:     "expired by the real clock",
			args:     append(sigArgs(h), "--allow-http", "--allow-private"),
			wantExit: 1,
			wantOut:  []string{"✘ expired_signature:"},
		},
		{
			name:     "untrusted host: nothing fetched",
			args:     append(sigArgs(h), append([]string{"--trust", "*.agents.example"}, local...)...),
			wantExit: 1,
			wantOut:  []string{"✘ untrusted_signature_agent: signature agent " + ts.URL + " is not trusted", "hint: add --trust HOST"},
		},
		{
			name:     "http agent without --allow-http",
			args:     append(sigArgs(h), "--allow-private", "--now", at),
			wantExit: 1,
			wantOut:  []string{"✘ untrusted_signature_agent:", "http scheme refused", "hint: the key set is a local development one (" + ts.URL + "/.well-known/http-message-signatures-directory): add --allow-http; run: idcli tool verify ", "--now " + at + " --allow-http\n"},
		},
		{
			name:     "local agent without either flag: both named at once",
			args:     append(sigArgs(h), "--now", at),
			wantExit: 1,
			wantOut:  []string{"✘ untrusted_signature_agent:", "hint: the key set is a local development one (" + ts.URL + "/.well-known/http-message-signatures-directory): add --allow-http --allow-private; run: idcli tool verify ", " --now " + at + " --allow-http --allow-private\n"},
		},
		{
			name:     "loopback without --allow-private",
			args:     append(sigArgs(h), "--allow-http", "--now", at),
			wantExit: 1,
			wantOut:  []string{"✘ key_fetch_failed: the key set of " + ts.URL + " could not be fetched", "non-public address", "hint: the key set is a local development one (" + ts.URL + "/.well-known/http-message-signatures-directory): add --allow-private; run: idcli tool verify ", "--allow-http --now " + at + " --allow-private\n"},
		},
		{
			name:     "no Signature-Agent",
			args:     append([]string{"--signature", h.Signature, "--signature-input", h.SignatureInput}, local...),
			wantExit: 1,
			wantOut:  []string{"✘ invalid_signature_agent: the Signature-Agent header is required"},
		},
		{
			name:     "no tag",
			args:     append([]string{"--signature", h.Signature, "--signature-input", strings.Replace(h.SignatureInput, `;tag="web-bot-auth"`, "", 1), "--signature-agent", h.SignatureAgent}, local...),
			wantExit: 1,
			wantOut:  []string{`✘ invalid_signature_input: no signature has tag="web-bot-auth"`},
		},
		{
			name:      "signature headers given with -H",
			args:      append([]string{"-H", "Signature: " + h.Signature, "-H", "Signature-Input: " + h.SignatureInput, "-H", "Signature-Agent: " + h.SignatureAgent}, local...),
			wantOut:   []string{"✔ verified kid"},
			wantFetch: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: the cases share the directory's hit counter.
			method, u := tt.method, tt.url
			if method == "" {
				method = "GET"
			}
			if u == "" {
				u = url
			}
			before := hits.Load()
			res := runCLI(t.Context(), t.TempDir(), nil, append([]string{"tool", "verify", method, u}, tt.args...)...)
			res.wantExit(t, tt.wantExit)
			checkStdout(t, res.stdout, tt.wantOut, tt.wantNotOut)
			if fetched := hits.Load() > before; fetched != tt.wantFetch {
				t.Errorf("directory fetched = %v, want %v", fetched, tt.wantFetch)
			}
		})
	}
}

func TestToolVerifyBody(t *testing.T) {
	t.Parallel()
	key := signertest.Key(1)
	ts, _ := serveDirectory(t, directoryResponse{header: goodDirectoryHeader(), body: directoryBody(t, key)})
	created := time.Unix(1767225600, 0)
	body := []byte(`{"public_jwk":{"kty":"OKP"}}`)
	req, err := http.NewRequest("POST", "https://api.example/agents", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := signer.Sign(req, key, signer.Options{Components: signer.WriteComponents, SignatureAgent: ts.URL, Created: created}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "body.json"), body, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other.json"), []byte(`{"public_jwk":{"kty":"RSA"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		extra    []string
		wantExit int
		wantOut  string
	}{
		{"body matches", []string{"--body-file", "body.json"}, 0, `✔ verified components       "@method" "@authority" "@path" "content-digest"`},
		{"other body", []string{"--body-file", "other.json"}, 1, "✘ content_digest_mismatch: Content-Digest does not match the body"},
		{"no body", nil, 1, "✘ content_digest_mismatch:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"tool", "verify", "POST", "https://api.example/agents",
				"--signature", req.Header.Get("Signature"), "--signature-input", req.Header.Get("Signature-Input"),
				"--signature-agent", req.Header.Get("Signature-Agent"),
				"-H", "Content-Digest: " + req.Header.Get("Content-Digest"),
				"--allow-http", "--allow-private", "--now", strconv.FormatInt(created.Unix(), 10)}
			res := runCLI(t.Context(), dir, nil, append(args, tt.extra...)...)
			res.wantExit(t, tt.wantExit)
			checkStdout(t, res.stdout, []string{tt.wantOut}, nil)
		})
	}
}

func TestToolVerifyJWK(t *testing.T) {
	t.Parallel()
	key, other := signertest.Key(1), signertest.Key(2)
	// The agent's origin does not resolve: with --jwk nothing is fetched.
	const agent = "https://agent-0123456789abcdef01234567.agents.invalid"
	created := time.Unix(1767225600, 0)
	h := signedHeaders(t, "GET", "https://api.example/whoami", key, agent, created, false)
	at := strconv.FormatInt(created.Unix(), 10)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "key.json"), key.Public.JWK.MarshalPublic(), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		jwk      string
		wantExit int
		wantOut  []string
		wantErr  string
	}{
		{
			name: "public JWK",
			jwk:  string(key.Public.JWK.MarshalPublic()),
			wantOut: []string{
				"✔ verified uid              agent-0123456789abcdef01234567",
				"✔ verified kid              " + key.KeyID(),
				"✔ verified signature agent  " + agent,
			},
		},
		{name: "public JWK from a file", jwk: "@key.json", wantOut: []string{"✔ verified kid              " + key.KeyID()}},
		{name: "another key", jwk: string(other.Public.JWK.MarshalPublic()), wantExit: 1, wantOut: []string{"✘ unknown_key:"}},
		{name: "private JWK refused", jwk: string(key.MarshalPrivateJWK()), wantErr: "must not carry private key material"},
		{name: "not JSON", jwk: "kid", wantErr: "--jwk: not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := runCLI(t.Context(), dir, nil, append([]string{"tool", "verify", "GET", "https://api.example/whoami", "--jwk", tt.jwk, "--now", at}, sigArgs(h)...)...)
			if tt.wantErr != "" {
				if res.err == nil || !strings.Contains(res.err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", res.err, tt.wantErr)
				}
				if d := key.JWK().D; strings.Contains(res.err.Error()+res.stdout+res.stderr, d) {
					t.Errorf("output carries the private key")
				}
				return
			}
			res.wantExit(t, tt.wantExit)
			checkStdout(t, res.stdout, tt.wantOut, nil)
		})
	}
}

// rfc9421B26 is cmd/idcli/testdata/rfc9421_b26.json.
type rfc9421B26 struct {
	PublicJWK json.RawMessage `json:"public_jwk"`
	Request   struct {
		Method  string            `json:"method"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
	} `json:"request"`
	SignatureInput string `json:"signature_input"`
	Signature      string `json:"signature"`
}

func TestToolVerifyRelaxedRFC9421Vector(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("testdata", "rfc9421_b26.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v rfc9421B26
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "body"), []byte(v.Request.Body), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"tool", "verify", v.Request.Method, v.Request.URL,
		"--signature", v.Signature, "--signature-input", v.SignatureInput,
		"--jwk", string(v.PublicJWK), "--body-file", "body"}
	for name, value := range v.Request.Headers {
		base = append(base, "-H", name+": "+value)
	}
	tests := []struct {
		name     string
		args     []string
		wantExit int
		wantOut  []string
	}{
		{
			name: "relaxed",
			args: []string{"--relaxed"},
			wantOut: []string{
				"✔ verified kid              test-key-ed25519",
				"✔ verified signature agent  -",
				"✔ verified created          2021-04-20T02:07:53Z (1618884473)",
				"✔ verified expires          -",
				`✔ verified components       "date" "@method" "@path" "@authority" "content-type" "content-length"`,
			},
		},
		{name: "relaxed, long after", args: []string{"--relaxed", "--now", "4102444800"}, wantOut: []string{"✔ verified kid              test-key-ed25519"}},
		{name: "strict profile refuses it", wantExit: 1, wantOut: []string{`✘ invalid_signature_input: no signature has tag="web-bot-auth"`}},
		{name: "relaxed, date changed", args: []string{"--relaxed", "-H", "Date: Tue, 20 Apr 2021 02:07:56 GMT"}, wantExit: 1, wantOut: []string{"✘ invalid_signature:"}},
		{name: "relaxed, other host", args: []string{"--relaxed", "-H", "Host: example.org"}, wantExit: 1, wantOut: []string{"✘ invalid_signature:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := runCLI(t.Context(), dir, nil, append(append([]string{}, base...), tt.args...)...)
			res.wantExit(t, tt.wantExit)
			checkStdout(t, res.stdout, tt.wantOut, nil)
		})
	}
}

func TestToolVerifyJSON(t *testing.T) {
	t.Parallel()
	key := signertest.Key(1)
	ts, _ := serveDirectory(t, directoryResponse{header: goodDirectoryHeader(), body: directoryBody(t, key)})
	created := time.Unix(1767225600, 0)
	h := signedHeaders(t, "GET", "https://api.example/whoami", key, ts.URL, created, true)
	tests := []struct {
		name     string
		sig      string
		wantExit int
		want     verifyResult
	}{
		{"verified", h.Signature, 0, verifyResult{Verified: true, KeyID: key.KeyID(), SignatureAgent: ts.URL}},
		{"tampered", tamper(t, h.Signature), 1, verifyResult{Error: &verifyFailed{Code: "invalid_signature", Status: http.StatusUnauthorized}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := runCLI(t.Context(), t.TempDir(), nil, "tool", "verify", "GET", "https://api.example/whoami", "--json",
				"--signature", tt.sig, "--signature-input", h.SignatureInput, "--signature-agent", h.SignatureAgent,
				"--allow-http", "--allow-private", "--now", strconv.FormatInt(created.Unix(), 10))
			res.wantExit(t, tt.wantExit)
			var got verifyResult
			if err := json.Unmarshal([]byte(res.stdout), &got); err != nil {
				t.Fatalf("stdout is not one JSON document: %v\n%s", err, res.stdout)
			}
			if got.Verified != tt.want.Verified || got.KeyID != tt.want.KeyID || got.SignatureAgent != tt.want.SignatureAgent {
				t.Errorf("verified=%v kid=%q agent=%q, want %v %q %q", got.Verified, got.KeyID, got.SignatureAgent, tt.want.Verified, tt.want.KeyID, tt.want.SignatureAgent)
			}
			if tt.want.Error != nil {
				if got.Error == nil || got.Error.Code != tt.want.Error.Code || got.Error.Status != tt.want.Error.Status {
					t.Errorf("error = %+v, want code %q status %d", got.Error, tt.want.Error.Code, tt.want.Error.Status)
				}
				return
			}
			if got.Bound == nil || !*got.Bound || got.Created == nil || !got.Created.Equal(created) || got.PublicJWK == nil || got.PublicJWK.X != key.Public.JWK.X {
				t.Errorf("identity = %+v, want bound, created %v and the key's JWK", got, created)
			}
			if !strings.Contains(res.stderr, "• trusting 127.0.0.1:") {
				t.Errorf("stderr = %q, want the trust note there (stdout holds JSON)", res.stderr)
			}
		})
	}
}

func TestToolVerifyUsage(t *testing.T) {
	t.Parallel()
	checkUsage(t, t.TempDir(), []string{"tool", "verify"}, []usageCase{
		{"no arguments", nil, "want METHOD and URL"},
		{"URL only", []string{"https://a.example/"}, "want METHOD and URL"},
		{"no signature", []string{"GET", "https://a.example/"}, "--signature and --signature-input are required"},
		{"no signature input", []string{"GET", "https://a.example/", "--signature", "sig1=:AA==:"}, "tool verify: --signature-input is required"},
		{"bad URL", []string{"GET", "a.example/", "--signature", "x", "--signature-input", "y"}, "invalid URL"},
		{"bad method", []string{"G T", "https://a.example/", "--signature", "x", "--signature-input", "y"}, "invalid method"},
		{"bad header", []string{"GET", "https://a.example/", "-H", "nocolon", "--signature", "x", "--signature-input", "y"}, "want 'Name: value'"},
		{"bad now", []string{"GET", "https://a.example/", "--now", "yesterday", "--signature", "x", "--signature-input", "y"}, "--now"},
		{"bad trust", []string{"GET", "https://a.example/", "--trust", "https://a.example", "--signature", "x", "--signature-input", "y"}, "--trust"},
		{"relaxed without any key", []string{"GET", "https://a.example/", "--relaxed", "--signature", "x", "--signature-input", "y"}, "give the key with --jwk"},
	})
}

// TestToolVerifyKeySets verifies requests whose Signature-Agent names each
// kind of key set (a direct key-set URL, a JWKS, a Signature Agent Card
// with inline keys or a jwks_uri elsewhere), signed with Ed25519,
// RSA-PSS-SHA512 and ECDSA P-256 under published kids.
func TestToolVerifyKeySets(t *testing.T) {
	t.Parallel()
	sets := serveKeySets(t)
	ed, rsaKey, ecKey, ks := sets.ed, sets.rsa, sets.ec, sets.ks
	created := int64(1767225600)
	params := func(keyid, alg, nonce string) string {
		return `("@authority" "signature-agent";key="sig1");created=1767225600;keyid="` + keyid + `";alg="` + alg +
			`";expires=1767225900;nonce="` + nonce + `";tag="web-bot-auth"`
	}
	const target = "https://api.example/things"
	edSign := func(b []byte) ([]byte, error) { return ed25519.Sign(ed.Key, b), nil }
	local := []string{"--allow-http", "--allow-private", "--now", strconv.FormatInt(created, 10)}

	tests := []struct {
		name     string
		agent    string // Signature-Agent
		keyid    string
		alg      string
		sign     func([]byte) ([]byte, error)
		extra    []string
		wantExit int
		wantOut  []string
	}{
		{
			name: "direct key-set URL, a kid that is not the thumbprint", agent: `sig1="` + ks.URL + `/keys/directory.json"`,
			keyid: "ed-1", alg: "ed25519", sign: edSign,
			wantOut: []string{"✔ verified identity         " + ks.URL + "/keys/directory.json", "✔ verified kid              ed-1", "✔ verified algorithm        ed25519", "✔ verified bound            true"},
		},
		{
			name: "JWKS member, RSA-PSS-SHA512", agent: `sig1="` + ks.URL + `/jwks.json";type=jwks_uri`,
			keyid: "rsa-1", alg: "rsa-pss-sha512", sign: clitest.RSAPSS(rsaKey),
			wantOut: []string{"✔ verified identity         " + ks.URL + "/jwks.json", "✔ verified algorithm        rsa-pss-sha512"},
		},
		{
			name: "Signature Agent Card with inline keys, ECDSA P-256", agent: `sig1="` + ks.URL + `/agent-card.json";type=cimd`,
			keyid: sets.ecThumb, alg: "ecdsa-p256-sha256", sign: clitest.ECDSAP256(ecKey),
			wantOut: []string{"✔ verified identity         " + ks.URL + "/agent-card.json", "✔ verified algorithm        ecdsa-p256-sha256"},
		},
		{
			name: "card naming a jwks_uri on an untrusted host", agent: `sig1="` + ks.URL + `/remote-card.json";type=cimd`,
			keyid: "rsa-1", alg: "rsa-pss-sha512", sign: clitest.RSAPSS(rsaKey), wantExit: 1,
			wantOut: []string{"✘ untrusted_signature_agent:", "card jwks_uri", "hint: the Signature Agent Card names its keys at another host: add --trust 127.0.0.1"},
		},
		{
			name: "card naming a jwks_uri, both hosts trusted", agent: `sig1="` + ks.URL + `/remote-card.json";type=cimd`,
			keyid: "rsa-1", alg: "rsa-pss-sha512", sign: clitest.RSAPSS(rsaKey), extra: []string{"--trust", "127.0.0.1:*"},
			wantOut: []string{"✔ verified identity         " + ks.URL + "/remote-card.json", "✔ verified algorithm        rsa-pss-sha512"},
		},
		{
			name: "RSA signature under an Ed25519 kid", agent: `sig1="` + ks.URL + `/keys/directory.json"`,
			keyid: "ed-1", alg: "rsa-pss-sha512", sign: clitest.RSAPSS(rsaKey), wantExit: 1,
			wantOut: []string{"✘ unsupported_algorithm:"},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := clitest.SignedWith(t, "GET", target, tt.agent, params(tt.keyid, tt.alg, "n-"+strconv.Itoa(i)), tt.sign)
			args := append([]string{"tool", "verify", "GET", target,
				"--signature", h["Signature"], "--signature-input", h["Signature-Input"], "--signature-agent", h["Signature-Agent"]}, local...)
			res := runCLI(t.Context(), t.TempDir(), nil, append(args, tt.extra...)...)
			res.wantExit(t, tt.wantExit)
			checkStdout(t, res.stdout, tt.wantOut, nil)
		})
	}
}

// TestToolVerifyJWKAlgorithms: --jwk takes an RSA or a P-256 public key,
// found by its published kid at a key set, by its thumbprint at an
// origin's well-known directory.
func TestToolVerifyJWKAlgorithms(t *testing.T) {
	t.Parallel()
	rsaKey, ecKey := clitest.RSAKey(t), clitest.ECKey(t, 9)
	rsaPub := clitest.PublicJWK(t, &rsaKey.PublicKey, "rsa-1", "PS512")
	ecPub := clitest.PublicJWK(t, &ecKey.PublicKey, "ec-1", "ES256")
	rsaThumb, ecThumb := clitest.Thumbprint(t, rsaPub), clitest.Thumbprint(t, ecPub)
	jwk := func(m map[string]any) string {
		b, _ := json.Marshal(m)
		return string(b)
	}
	const (
		target = "https://api.example/things"
		origin = `sig1="https://agent-0123456789abcdef01234567.agents.invalid"`
		jwks   = `sig1="https://keys.agents.invalid/jwks.json";type=jwks_uri`
	)
	params := func(keyid, alg string) string {
		return `("@authority");created=1767225600;keyid="` + keyid + `";alg="` + alg + `";expires=1767225900;nonce="n1";tag="web-bot-auth"`
	}
	tests := []struct {
		name, agent, keyid, alg, jwk string
		sign                         func([]byte) ([]byte, error)
		wantExit                     int
		wantOut                      string
	}{
		{"RSA at an origin, keyid the thumbprint", origin, rsaThumb, "rsa-pss-sha512", jwk(rsaPub), clitest.RSAPSS(rsaKey), 0, "✔ verified algorithm        rsa-pss-sha512"},
		{"RSA at a JWKS, keyid the kid", jwks, "rsa-1", "rsa-pss-sha512", jwk(rsaPub), clitest.RSAPSS(rsaKey), 0, "✔ verified kid              rsa-1"},
		{"RSA at an origin, keyid the kid", origin, "rsa-1", "rsa-pss-sha512", jwk(rsaPub), clitest.RSAPSS(rsaKey), 1, "✘ unknown_key:"},
		{"P-256 at an origin", origin, ecThumb, "ecdsa-p256-sha256", jwk(ecPub), clitest.ECDSAP256(ecKey), 0, "✔ verified algorithm        ecdsa-p256-sha256"},
		{"P-256 key, RSA signature", origin, ecThumb, "rsa-pss-sha512", jwk(ecPub), clitest.RSAPSS(rsaKey), 1, "✘ unsupported_algorithm:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := clitest.SignedWith(t, "GET", target, tt.agent, params(tt.keyid, tt.alg), tt.sign)
			res := runCLI(t.Context(), t.TempDir(), nil, "tool", "verify", "GET", target, "--jwk", tt.jwk, "--now", "1767225600",
				"--signature", h["Signature"], "--signature-input", h["Signature-Input"], "--signature-agent", h["Signature-Agent"])
			res.wantExit(t, tt.wantExit)
			checkStdout(t, res.stdout, []string{tt.wantOut}, nil)
		})
	}
}
