package main

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// directoryResponse is what a test key directory answers.
type directoryResponse struct {
	status int               // 0 → 200
	header map[string]string // response headers
	body   string
}

// goodDirectoryHeader are the headers agentid's reference server sends.
func goodDirectoryHeader() map[string]string {
	return map[string]string{
		"Content-Type":  signer.DirectoryMediaType,
		"Cache-Control": "max-age=60",
		"ETag":          `"v1"`,
	}
}

// directoryBody is {"keys":[…]} holding the public JWKs of keys.
func directoryBody(t *testing.T, keys ...signer.PrivateKey) string {
	t.Helper()
	jwks := make([]json.RawMessage, len(keys))
	for i, k := range keys {
		jwks[i] = k.Public.JWK.MarshalPublic()
	}
	b, err := json.Marshal(map[string]any{"keys": jwks})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// serveDirectory starts a loopback server answering resp at the well-known
// directory path (404 elsewhere) and counts the requests it receives.
func serveDirectory(t *testing.T, resp directoryResponse) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != signer.DirectoryPath {
			http.NotFound(w, r)
			return
		}
		for k, v := range resp.header {
			w.Header().Set(k, v)
		}
		status := resp.status
		if status == 0 {
			status = http.StatusOK
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(resp.body))
	}))
	t.Cleanup(ts.Close)
	return ts, &hits
}

// keySets are the key sets a Signature-Agent member can name, served on
// loopback by ks: an Ed25519 key published as kid "ed-1" in a directory at
// /keys/directory.json, an RSA key ("rsa-1", PS512) in the JWKS /jwks.json,
// a P-256 key (ES256, kid its thumbprint) inline in the Signature Agent Card
// /agent-card.json, and the card /remote-card.json whose jwks_uri is the
// RSA JWKS on another host, remote.
type keySets struct {
	ed                signer.PrivateKey
	rsa               *rsa.PrivateKey
	ec                *ecdsa.PrivateKey
	rsaThumb, ecThumb string
	ks, remote        *httptest.Server
}

func serveKeySets(t *testing.T) keySets {
	t.Helper()
	s := keySets{ed: signertest.Key(5), rsa: clitest.RSAKey(t), ec: clitest.ECKey(t, 9)}
	edPub := clitest.PublicJWKMap(t, s.ed)
	edPub["kid"] = "ed-1"
	rsaPub := clitest.PublicJWK(t, &s.rsa.PublicKey, "rsa-1", "PS512")
	ecPub := clitest.PublicJWK(t, &s.ec.PublicKey, "", "ES256")
	s.rsaThumb, s.ecThumb = clitest.Thumbprint(t, rsaPub), clitest.Thumbprint(t, ecPub)
	jwks := clitest.Doc{ContentType: "application/jwk-set+json", Body: map[string]any{"keys": []any{rsaPub}}}
	s.remote = clitest.ServeJSON(t, map[string]clitest.Doc{"/jwks.json": jwks})
	s.ks = clitest.ServeJSON(t, map[string]clitest.Doc{
		"/keys/directory.json": {ContentType: signer.DirectoryMediaType, Body: map[string]any{"keys": []any{edPub}}},
		"/jwks.json":           jwks,
		"/agent-card.json":     {ContentType: "application/json", Body: map[string]any{"client_name": "test agent", "jwks": map[string]any{"keys": []any{ecPub}}}},
		"/remote-card.json":    {ContentType: "application/json", Body: map[string]any{"client_name": "test agent", "jwks_uri": s.remote.URL + "/jwks.json"}},
	})
	return s
}

func TestDirectoryCheck(t *testing.T) {
	t.Parallel()
	key, other := signertest.Key(1), signertest.Key(2)
	good := directoryBody(t, key, other)
	badKid := strings.Replace(directoryBody(t, key), key.KeyID(), other.KeyID(), 1)
	withD := `{"keys":[` + string(key.MarshalPrivateJWK()) + `]}`
	local := []string{"--allow-http", "--allow-private"}
	tests := []struct {
		name       string
		resp       directoryResponse
		path       string   // appended to the server URL
		flags      []string // after the URL
		wantExit   int
		wantOut    []string // substrings of stdout
		wantNotOut []string
	}{
		{
			name:  "good directory by origin",
			resp:  directoryResponse{header: goodDirectoryHeader(), body: good},
			flags: local,
			wantOut: []string{"(key directory at the well-known path: keyids must be thumbprints)", "• status 200",
				"✔ key " + key.KeyID() + " (ed25519, kid = thumbprint)", "✔ key " + other.KeyID() + " (ed25519, kid = thumbprint)",
				"• response unsigned", "✔ directory OK: 2 keys, cached for 1m0s"},
			wantNotOut: []string{"!", "✘"},
		},
		{
			name:    "good directory by full URL",
			resp:    directoryResponse{header: goodDirectoryHeader(), body: good},
			path:    signer.DirectoryPath,
			flags:   local,
			wantOut: []string{"• GET http://127.0.0.1:", signer.DirectoryPath, "✔ directory OK: 2 keys"},
		},
		{
			name: "plain JSON media type is a warning",
			resp: directoryResponse{header: map[string]string{
				"Content-Type": "application/json", "Cache-Control": "max-age=60", "ETag": `"v1"`,
			}, body: good},
			flags:   local,
			wantOut: []string{`! media type "application/json" accepted`, "✔ directory usable: 2 keys, cached for 1m0s (1 warning)"},
		},
		{
			name: "wrong media type",
			resp: directoryResponse{header: map[string]string{
				"Content-Type": "text/plain; charset=utf-8", "Cache-Control": "max-age=60",
			}, body: good},
			flags:      local,
			wantExit:   1,
			wantOut:    []string{`✘ keyfetch: fetch http://127.0.0.1:`, `media type "text/plain; charset=utf-8" is not`, "✘ directory has 1 problem"},
			wantNotOut: []string{"✔ key"},
		},
		{
			name:    "missing cache headers",
			resp:    directoryResponse{header: map[string]string{"Content-Type": signer.DirectoryMediaType}, body: good},
			flags:   local,
			wantOut: []string{"Cache-Control (none), ETag (none)", "! no ETag", "! cache lifetime: no max-age: default 5m0s", "✔ directory usable: 2 keys, cached for 5m0s (2 warnings)"},
		},
		{
			name: "no-store",
			resp: directoryResponse{header: map[string]string{
				"Content-Type": signer.DirectoryMediaType, "Cache-Control": "no-store", "ETag": `"v1"`,
			}, body: good},
			flags:   local,
			wantOut: []string{"! cache lifetime: Cache-Control no-store: minimum 30s"},
		},
		{
			name:       "kid is not the thumbprint: found by its thumbprint, with a warning",
			resp:       directoryResponse{header: goodDirectoryHeader(), body: badKid},
			flags:      local,
			wantExit:   0,
			wantOut:    []string{"✔ key", `is not the RFC 7638 thumbprint of its key`, "1 warning"},
			wantNotOut: []string{"✘"},
		},
		{
			name:       "private key published",
			resp:       directoryResponse{header: goodDirectoryHeader(), body: withD},
			flags:      local,
			wantExit:   1,
			wantOut:    []string{"✘ keys[0] skipped:", "must not carry private key material"},
			wantNotOut: []string{key.JWK().D},
		},
		{
			name:     "not found",
			resp:     directoryResponse{status: http.StatusNotFound, header: map[string]string{"Content-Type": "text/plain"}, body: "no such agent\n"},
			flags:    local,
			wantExit: 1,
			wantOut:  []string{"• status 404", "status 404: no directory", "✘ directory has 1 problem"},
		},
		{
			name:     "server error",
			resp:     directoryResponse{status: http.StatusInternalServerError},
			flags:    local,
			wantExit: 1,
			wantOut:  []string{"unexpected status 500"},
		},
		{
			name:     "redirect",
			resp:     directoryResponse{status: http.StatusFound, header: map[string]string{"Location": "https://elsewhere.example/keys"}},
			flags:    local,
			wantExit: 1,
			wantOut:  []string{`status 302: redirect to "https://elsewhere.example/keys" not followed`},
		},
		{
			name:     "not a directory",
			resp:     directoryResponse{header: goodDirectoryHeader(), body: `{"keyz":[]}`},
			flags:    local,
			wantExit: 1,
			wantOut:  []string{`directory has no "keys" array`},
		},
		{
			name:     "http refused without --allow-http",
			resp:     directoryResponse{header: goodDirectoryHeader(), body: good},
			flags:    []string{"--allow-private"},
			wantExit: 1,
			wantOut:  []string{"✘ keyfetch: untrusted signature agent: http scheme refused", " is a local development key set: it needs --allow-http; run: idcli directory check http://127.0.0.1:", " --allow-private --allow-http\n"},
		},
		{
			name:     "loopback refused without --allow-private",
			resp:     directoryResponse{header: goodDirectoryHeader(), body: good},
			flags:    []string{"--allow-http"},
			wantExit: 1,
			wantOut:  []string{"refusing to connect to a non-public address", " is a local development key set: it needs --allow-private; run: idcli directory check http://127.0.0.1:", " --allow-http --allow-private\n"},
		},
		{
			name:       "a local server without either flag: both named at once",
			resp:       directoryResponse{header: goodDirectoryHeader(), body: good},
			wantExit:   1,
			wantOut:    []string{"http scheme refused (no --allow-http)", "signatures-directory is a local development key set: it needs --allow-http and --allow-private; run: idcli directory check http://127.0.0.1:", " --allow-http --allow-private\n"},
			wantNotOut: []string{"add --allow", "AllowHTTP"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts, _ := serveDirectory(t, tt.resp)
			args := append([]string{"directory", "check", ts.URL + tt.path}, tt.flags...)
			res := runCLI(t.Context(), t.TempDir(), nil, args...)
			res.wantExit(t, tt.wantExit)
			checkStdout(t, res.stdout, tt.wantOut, tt.wantNotOut)
		})
	}
}

func TestDirectoryCheckJSON(t *testing.T) {
	t.Parallel()
	key := signertest.Key(1)
	tests := []struct {
		name         string
		resp         directoryResponse
		wantExit     int
		wantOK       bool
		wantKeys     int
		wantProblems int
		wantWarnings int
	}{
		{"good", directoryResponse{header: goodDirectoryHeader(), body: directoryBody(t, key)}, 0, true, 1, 0, 0},
		{"missing cache headers", directoryResponse{header: map[string]string{"Content-Type": signer.DirectoryMediaType}, body: directoryBody(t, key)}, 0, true, 1, 0, 2},
		{"not found", directoryResponse{status: http.StatusNotFound}, 1, false, 0, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts, _ := serveDirectory(t, tt.resp)
			res := runCLI(t.Context(), t.TempDir(), nil, "directory", "check", ts.URL, "--json", "--allow-http", "--allow-private")
			res.wantExit(t, tt.wantExit)
			var got directoryReport
			if err := json.Unmarshal([]byte(res.stdout), &got); err != nil {
				t.Fatalf("stdout is not JSON: %v\n%s", err, res.stdout)
			}
			if got.OK != tt.wantOK || len(got.Keys) != tt.wantKeys || len(got.Problems) != tt.wantProblems || len(got.Warnings) != tt.wantWarnings {
				t.Errorf("ok=%v keys=%d problems=%q warnings=%q, want ok=%v keys=%d problems=%d warnings=%d",
					got.OK, len(got.Keys), got.Problems, got.Warnings, tt.wantOK, tt.wantKeys, tt.wantProblems, tt.wantWarnings)
			}
			if tt.wantKeys > 0 && (got.Keys[0].Kid != key.KeyID() || got.Keys[0].Algorithm != "ed25519" || got.Keys[0].Thumbprint != key.KeyID() || got.Keys[0].PublicJWK.X != key.Public.JWK.X) {
				t.Errorf("keys[0] = %+v, want kid and thumbprint %q, alg ed25519 and the key's JWK", got.Keys[0], key.KeyID())
			}
			if got.Kind != "directory" || !got.WellKnown || got.Signed {
				t.Errorf("kind=%q well_known=%v signed=%v, want an unsigned well-known directory", got.Kind, got.WellKnown, got.Signed)
			}
			if want := ts.URL + signer.DirectoryPath; got.URL != want {
				t.Errorf("url = %q, want %q", got.URL, want)
			}
		})
	}
}

func TestDirectoryCheckUsage(t *testing.T) {
	t.Parallel()
	checkUsage(t, t.TempDir(), []string{"directory", "check"}, []usageCase{
		{"no URL", nil, "want exactly one URL"},
		{"two URLs", []string{"https://a.example", "https://b.example"}, "want exactly one URL"},
		{"not http", []string{"ftp://a.example"}, "invalid URL"},
		{"fragment", []string{"https://a.example/keys.json#k"}, "no fragment"},
		{"bad type", []string{"https://a.example/keys.json", "--type", "jwks"}, `--type "jwks": want directory, jwks_uri or cimd`},
		{"bad trust", []string{"https://a.example/", "--trust", "https://b.example"}, `--trust "https://b.example": want a host`},
	})
}

// TestDirectoryCheckKeySets checks each kind of key set a Signature-Agent
// member can name (--type), with Ed25519, RSA and P-256 keys under
// published kids, a card whose jwks_uri is on another host, and signed
// directory responses.
func TestDirectoryCheckKeySets(t *testing.T) {
	t.Parallel()
	sets := serveKeySets(t)
	ed, ks, remote := sets.ed, sets.ks, sets.remote
	// signed serves ed's directory with a directory signature (corrupted
	// when bad) over "@authority";req.
	signed := func(bad bool) *httptest.Server {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			now := time.Now().Unix()
			params := fmt.Sprintf(`("@authority";req);created=%d;keyid=%q;alg="ed25519";expires=%d;tag="http-message-signatures-directory"`, now, ed.KeyID(), now+300)
			sig := ed25519.Sign(ed.Key, []byte(`"@authority";req: `+r.Host+"\n\"@signature-params\": "+params))
			if bad {
				sig[0] ^= 1
			}
			w.Header().Set("Signature-Input", "binding0="+params)
			w.Header().Set("Signature", "binding0=:"+base64.StdEncoding.EncodeToString(sig)+":")
			for k, v := range goodDirectoryHeader() {
				w.Header().Set(k, v)
			}
			io.WriteString(w, directoryBody(t, ed))
		}))
		t.Cleanup(ts.Close)
		return ts
	}
	good, bad := signed(false), signed(true)
	local := []string{"--allow-http", "--allow-private"}

	tests := []struct {
		name       string
		url        string
		flags      []string
		wantExit   int
		wantOut    []string
		wantNotOut []string
	}{
		{
			name: "direct key-set URL", url: ks.URL + "/keys/directory.json",
			wantOut:    []string{"• GET " + ks.URL + "/keys/directory.json (key directory)\n", "✔ key ed-1 (ed25519, thumbprint " + ed.KeyID() + ")", "✔ directory OK: 1 key"},
			wantNotOut: []string{"is not the RFC 7638 thumbprint"},
		},
		{
			name: "JWKS", url: ks.URL + "/jwks.json", flags: []string{"--type", "jwks_uri"},
			wantOut: []string{"(JSON Web Key Set)", "✔ key rsa-1 (rsa-pss-sha512, thumbprint " + sets.rsaThumb + ")", "✔ JWKS OK: 1 key"},
		},
		{
			name: "card with inline keys", url: ks.URL + "/agent-card.json", flags: []string{"--type", "cimd"},
			wantOut: []string{"(Signature Agent Card)", "✔ key " + sets.ecThumb + " (ecdsa-p256-sha256, kid = thumbprint)", "✔ card OK: 1 key"},
		},
		{
			name: "card naming a jwks_uri on another host", url: ks.URL + "/remote-card.json", flags: []string{"--type", "cimd"}, wantExit: 1,
			wantOut: []string{"card jwks_uri", "hint: the Signature Agent Card names its keys at another host: add --trust " + strings.TrimPrefix(remote.URL, "http://") + " to fetch them", "✘ card has 1 problem"},
		},
		{
			name: "card naming a jwks_uri, its host trusted", url: ks.URL + "/remote-card.json", flags: []string{"--type", "cimd", "--trust", "127.0.0.1:*"},
			wantOut: []string{"• the card's keys are at jwks_uri " + remote.URL + "/jwks.json", "✔ key rsa-1 (rsa-pss-sha512", "✔ card OK: 1 key"},
		},
		{
			name: "card read as a directory", url: ks.URL + "/agent-card.json", wantExit: 1,
			wantOut: []string{`✘ directory has`},
		},
		{
			name: "signed directory", url: good.URL,
			wantOut: []string{"! response signed (http-message-signatures-directory) by " + ed.KeyID() + " over the authority only (keys not authenticated)", "✔ directory OK: 1 key"},
		},
		{
			name: "directory signature that fails", url: bad.URL, wantExit: 1,
			wantOut: []string{"✘ response signed (http-message-signatures-directory), but the signature does not verify", "✘ directory has"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := runCLI(t.Context(), t.TempDir(), nil, append(append([]string{"directory", "check", tt.url}, tt.flags...), local...)...)
			res.wantExit(t, tt.wantExit)
			checkStdout(t, res.stdout, tt.wantOut, tt.wantNotOut)
		})
	}
}
