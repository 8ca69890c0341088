package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestProxyRegistry: an agent whose host --trust does not name is verified
// once a --registry (on a trusted host) lists its Signature Agent Card; a
// proxy without the registry refuses it as untrusted.
func TestProxyRegistry(t *testing.T) {
	t.Parallel()
	key := signertest.Key(0x52)
	jwks := map[string]any{"keys": []any{json.RawMessage(key.Public.JWK.MarshalPublic())}}
	agents := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case signer.DirectoryPath:
			w.Header().Set("Content-Type", signer.DirectoryMediaType)
			json.NewEncoder(w).Encode(jwks)
		case "/card.json":
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"client_name": "Registry Bot", "jwks": jwks})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(agents.Close)
	registry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("# test registry\n" + agents.URL + "/card.json\n"))
	}))
	t.Cleanup(registry.Close)
	regHost := strings.TrimPrefix(registry.URL, "http://")
	up := newEchoUpstream(t)
	common := []string{"--upstream", up.URL, "--trust", regHost, "--allow-http", "--allow-private", "--access-log", "off"}

	get := func(base string) *http.Response {
		t.Helper()
		req := signedGet(t, base+"/x", key, agents.URL, signer.Options{})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	with, _ := startProxy(t, append(common, "--registry", registry.URL+"/list.txt")...)
	status := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if status = get(with).StatusCode; status == http.StatusOK {
			break
		}
	}
	if status != http.StatusOK {
		t.Errorf("with --registry: status %d, want 200 once the registry is read", status)
	}
	without, _ := startProxy(t, common...)
	if status := get(without).StatusCode; status != http.StatusUnauthorized {
		t.Errorf("without --registry: status %d, want 401 (untrusted host)", status)
	}

	// The registry's own host must be trusted.
	r := runCLI(t.Context(), t.TempDir(), nil, "proxy", "--listen", "127.0.0.1:0", "--forward-auth", "--front", "nginx", "--authority", "api.example.com", "--trust", "*.agentid.example",
		"--registry", "https://registry.example/list.txt")
	if r.err == nil || !strings.Contains(r.err.Error(), `--registry "https://registry.example/list.txt": the registry itself must be trusted`) {
		t.Errorf("untrusted --registry: %v, want an error naming the registry", r.err)
	}
}
