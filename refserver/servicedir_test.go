package refserver_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
)

// TestServiceDirectory: the service host serves the service's own key
// directory, empty and unsigned until the service key exists (a GET
// never creates it), then the key, signed by it over the service host and
// the body, with the headers of an agent's directory; a verifier
// requiring signed directories takes the key from it; another instance
// serves the same bytes; a query or an escape is not the directory.
func TestServiceDirectory(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		url := e.base + signer.DirectoryPath
		r := e.send(e.request(http.MethodGet, url, nil))
		if r.status != http.StatusOK || string(r.body) != "{\"keys\":[]}\n" || r.header.Get("Signature") != "" {
			t.Fatalf("before the key: %d %q (Signature %q), want 200, an empty key set, unsigned", r.status, r.body, r.header.Get("Signature"))
		}
		db := store.New(e.db)
		if _, err := db.ServiceKey(context.Background()); !errors.Is(err, store.ErrNoServiceKey) {
			t.Fatalf("a GET of the directory created the service key (%v)", err)
		}

		key, err := db.EnsureServiceKey(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // the empty directory is not cached, but be safe past KeyCacheTTL
		r = e.send(e.request(http.MethodGet, url, nil))
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", url, r.status, r.body)
		}
		want := signer.DirectoryBody([]signer.JWK{key.Public.JWK})
		if string(r.body) != string(want) {
			t.Errorf("body = %s, want %s", r.body, want)
		}
		for name, want := range map[string]string{
			"Content-Type":           signer.DirectoryMediaType,
			"Cache-Control":          "max-age=60",
			"X-Content-Type-Options": "nosniff",
		} {
			if got := r.header.Get(name); got != want {
				t.Errorf("%s = %q, want %q", name, got, want)
			}
		}
		etag := r.header.Get("ETag")
		if etag == "" || r.header.Get("Signature") == "" || r.header.Get("Content-Digest") == "" {
			t.Errorf("ETag %q, Signature %q, Content-Digest %q: want all three", etag, r.header.Get("Signature"), r.header.Get("Content-Digest"))
		}
		req := e.request(http.MethodGet, url, nil)
		req.Header.Set("If-None-Match", etag)
		if r := e.send(req); r.status != http.StatusNotModified {
			t.Errorf("If-None-Match: %d, want 304", r.status)
		}
		other := e.sibling(e.db, nil)
		if r2 := other.send(other.request(http.MethodGet, url, nil)); r2.header.Get("ETag") != etag || string(r2.body) != string(r.body) {
			t.Errorf("another instance serves ETag %s, want %s (the same bytes)", r2.header.Get("ETag"), etag)
		}

		keys := keyfetch.New(keyfetch.Config{TrustedHosts: []string{e.host}, AllowHTTP: true, AllowPrivateNetworks: true,
			HTTPClient: e.client, RequireSignedDirectories: true})
		set, err := signer.ParseKeySetURL(e.base)
		if err != nil {
			t.Fatal(err)
		}
		pk, err := keys.Key(context.Background(), set, key.Public.Thumbprint)
		if err != nil || pk.Thumbprint != key.Public.Thumbprint {
			t.Errorf("a verifier requiring signed directories: %v, %v", pk.Thumbprint, err)
		}

		for _, u := range []string{url + "?x=1", url + "?", e.base + "/.well-known%2Fhttp-message-signatures-directory"} {
			if r := e.send(e.request(http.MethodGet, u, nil)); r.status != http.StatusNotFound {
				t.Errorf("GET %s: %d, want 404", u, r.status)
			}
		}
		if r := e.send(e.request(http.MethodPost, url, []byte("{}"))); r.status != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: %d, want 405", url, r.status)
		}
	})
}
