package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// signedDirectoryServer serves body as a well-known key directory whose
// response carries a directory signature by key over components (a space
// separated list of `"@authority";req` and `"content-digest"`), signed the
// way a directory signs its response: the base lists each component with
// its value, then `"@signature-params"`.
func signedDirectoryServer(t *testing.T, key signer.PrivateKey, body, components string) *httptest.Server {
	t.Helper()
	digest, err := signer.ContentDigest([]byte(body), "sha-256")
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		params := fmt.Sprintf("(%s);created=%d;expires=%d;keyid=%q;alg=%q;tag=%q", components,
			now.Unix(), now.Add(5*time.Minute).Unix(), key.Public.Thumbprint, signer.AlgEd25519, keyfetch.DirectorySignatureTag)
		var base strings.Builder
		for _, c := range strings.Fields(components) {
			v := strings.ToLower(r.Host)
			if c == `"content-digest"` {
				v = digest
			}
			base.WriteString(c + ": " + v + "\n")
		}
		base.WriteString(`"@signature-params": ` + params)
		sig := ed25519.Sign(key.Key, []byte(base.String()))
		w.Header().Set("Signature-Input", "binding0="+params)
		w.Header().Set("Signature", "binding0=:"+base64.StdEncoding.EncodeToString(sig)+":")
		w.Header().Set("Content-Digest", digest)
		for k, v := range goodDirectoryHeader() {
			w.Header().Set(k, v)
		}
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(ts.Close)
	return ts
}

// TestDirectoryCheckAuthenticated: directory check says whether the
// directory's signature authenticated the keys: signed over the body
// (content-digest), signed over the authority only, or unsigned; the JSON
// report carries the same as "authenticated".
func TestDirectoryCheckAuthenticated(t *testing.T) {
	t.Parallel()
	key := signertest.Key(1)
	body := directoryBody(t, key)
	unsigned, _ := serveDirectory(t, directoryResponse{header: goodDirectoryHeader(), body: body})
	tests := []struct {
		name       string
		url        string
		wantAuth   bool
		wantOut    string
		notOut     []string
		wantSigned bool
	}{
		{"signed over the body", signedDirectoryServer(t, key, body, `"@authority";req "content-digest"`).URL, true,
			"✔ response signed (http-message-signatures-directory) by " + key.Public.Thumbprint + ", covers the body: the keys are authenticated",
			[]string{"authority only", "unsigned"}, true},
		{"signed over the authority only", signedDirectoryServer(t, key, body, `"@authority";req`).URL, false,
			"! response signed (http-message-signatures-directory) by " + key.Public.Thumbprint + " over the authority only (keys not authenticated)",
			[]string{"covers the body", "unsigned"}, true},
		{"unsigned", unsigned.URL, false, "• response unsigned", []string{"covers the body", "authority only"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := runCLI(t.Context(), t.TempDir(), nil, "directory", "check", tt.url, "--allow-http", "--allow-private")
			res.wantExit(t, 0)
			checkStdout(t, res.stdout, []string{tt.wantOut, "✔ directory OK: 1 key"}, tt.notOut)

			res = runCLI(t.Context(), t.TempDir(), nil, "directory", "check", tt.url, "--allow-http", "--allow-private", "--json")
			res.wantExit(t, 0)
			var got directoryReport
			if err := json.Unmarshal([]byte(res.stdout), &got); err != nil {
				t.Fatalf("stdout is not JSON: %v\n%s", err, res.stdout)
			}
			if got.Authentic != tt.wantAuth || got.Signed != tt.wantSigned || got.Verified != tt.wantSigned {
				t.Errorf("signed=%v verified=%v authenticated=%v, want signed=verified=%v authenticated=%v",
					got.Signed, got.Verified, got.Authentic, tt.wantSigned, tt.wantAuth)
			}
			// Cloudflare's rules: met per key when signed (the http:// URL
			// aside), with the body bound only over content-digest.
			cf := got.Cloudflare
			if cf == nil || len(cf.Keys) != 1 || cf.HTTPS {
				t.Fatalf("cloudflare = %+v, want one key over http", cf)
			}
			if k := cf.Keys[0]; k.Signed != tt.wantSigned || k.Verified != tt.wantSigned || k.OK() != tt.wantSigned || k.BindsBody != tt.wantAuth {
				t.Errorf("cloudflare key = %+v, want signed=verified=ok=%v binds_body=%v", k, tt.wantSigned, tt.wantAuth)
			}
		})
	}
}

// TestDirectoryCheckAuthenticatedBinary runs the built idcli binary
// against the same three directories: its output names the same verdicts.
func TestDirectoryCheckAuthenticatedBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the idcli binary")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "idcli")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	key := signertest.Key(1)
	body := directoryBody(t, key)
	unsigned, _ := serveDirectory(t, directoryResponse{header: goodDirectoryHeader(), body: body})
	for _, tc := range []struct{ url, want string }{
		{signedDirectoryServer(t, key, body, `"@authority";req "content-digest"`).URL, "covers the body: the keys are authenticated"},
		{signedDirectoryServer(t, key, body, `"@authority";req`).URL, "over the authority only (keys not authenticated)"},
		{unsigned.URL, "• response unsigned"},
	} {
		out, err := exec.Command(bin, "directory", "check", tc.url, "--allow-http", "--allow-private").CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("idcli directory check %s: %v, output:\n%s\nwant it to contain %q", tc.url, err, out, tc.want)
		}
	}
}
