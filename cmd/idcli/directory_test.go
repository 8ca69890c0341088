package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer"
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

func TestDirectoryCheck(t *testing.T) {
	t.Parallel()
	key, other := clitest.Key(1), clitest.Key(2)
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
			name:       "good directory by origin",
			resp:       directoryResponse{header: goodDirectoryHeader(), body: good},
			flags:      local,
			wantOut:    []string{"• status 200", "✔ key " + key.KeyID(), "✔ key " + other.KeyID(), "✔ directory OK: 2 keys, cached for 1m0s"},
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
			wantOut:  []string{"✘ keyfetch: untrusted signature agent: http scheme refused", "hint: the URL uses http://; add --allow-http"},
		},
		{
			name:     "loopback refused without --allow-private",
			resp:     directoryResponse{header: goodDirectoryHeader(), body: good},
			flags:    []string{"--allow-http"},
			wantExit: 1,
			wantOut:  []string{"refusing to connect to a non-public address", "hint: the host is on a private address; add --allow-private"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts, _ := serveDirectory(t, tt.resp)
			args := append([]string{"directory", "check", ts.URL + tt.path}, tt.flags...)
			res := runCLI(t.Context(), t.TempDir(), nil, args...)
			if got := exitOf(t, res.err); got != tt.wantExit {
				t.Fatalf("exit = %d, want %d; stdout:\n%s\nstderr:\n%s", got, tt.wantExit, res.stdout, res.stderr)
			}
			checkStdout(t, res.stdout, tt.wantOut, tt.wantNotOut)
		})
	}
}

func TestDirectoryCheckJSON(t *testing.T) {
	t.Parallel()
	key := clitest.Key(1)
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
			if got := exitOf(t, res.err); got != tt.wantExit {
				t.Fatalf("exit = %d, want %d; stdout:\n%s", got, tt.wantExit, res.stdout)
			}
			var got directoryReport
			if err := json.Unmarshal([]byte(res.stdout), &got); err != nil {
				t.Fatalf("stdout is not JSON: %v\n%s", err, res.stdout)
			}
			if got.OK != tt.wantOK || len(got.Keys) != tt.wantKeys || len(got.Problems) != tt.wantProblems || len(got.Warnings) != tt.wantWarnings {
				t.Errorf("ok=%v keys=%d problems=%q warnings=%q, want ok=%v keys=%d problems=%d warnings=%d",
					got.OK, len(got.Keys), got.Problems, got.Warnings, tt.wantOK, tt.wantKeys, tt.wantProblems, tt.wantWarnings)
			}
			if tt.wantKeys > 0 && got.Keys[0].Kid != key.KeyID() {
				t.Errorf("keys[0].kid = %q, want %q", got.Keys[0].Kid, key.KeyID())
			}
			if want := ts.URL + signer.DirectoryPath; got.URL != want {
				t.Errorf("url = %q, want %q", got.URL, want)
			}
		})
	}
}

func TestDirectoryCheckUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no URL", nil, "want exactly one URL"},
		{"two URLs", []string{"https://a.example", "https://b.example"}, "want exactly one URL"},
		{"not http", []string{"ftp://a.example"}, "invalid URL"},
		{"other path", []string{"https://a.example/keys.json"}, "the path must be empty or"},
		{"query", []string{"https://a.example/?x=1"}, "no query or fragment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := runCLI(t.Context(), t.TempDir(), nil, append([]string{"directory", "check"}, tt.args...)...)
			if res.err == nil || !strings.Contains(res.err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want it to contain %q", res.err, tt.wantErr)
			}
		})
	}
}
