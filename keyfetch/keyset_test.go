package keyfetch_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
)

// jwkJSON is k's public JWK with extra members appended (`,"kid":"a"`).
func jwkJSON(k signer.PublicKey, extra string) string {
	return fmt.Sprintf(`{"kty":"OKP","crv":"Ed25519","x":%q%s}`, k.JWK.X, extra)
}

func keysJSON(keys ...string) string { return `{"keys":[` + strings.Join(keys, ",") + `]}` }

// TestKeySetForms looks keys up in each form of key set: a direct key-set
// URL (with a path, with a query), a JWKS (;type=jwks_uri), a Signature
// Agent Card (;type=cimd) with inline keys or a jwks_uri, and the
// well-known directory, where only thumbprints find keys.
func TestKeySetForms(t *testing.T) {
	t.Parallel()
	k1, k2 := testKey(1), testKey(2)
	const other = `,"kid":"2024-ed25519"` // a kid that is not the thumbprint, as 5 of 17 directories publish
	tests := []struct {
		name     string
		routes   map[string]http.HandlerFunc // path (or path?query) → handler
		path     string                      // of the Signature-Agent value
		typ      string                      // its ;type parameter
		kid      string
		want     string // ok, unknown, fetch, untrusted
		wantKey  signer.PublicKey
		wantHits int64
	}{
		{
			name:   "direct key-set URL, by a kid that is not the thumbprint",
			routes: map[string]http.HandlerFunc{"/keys/agent.json": serveBody(signer.DirectoryMediaType, "", "", keysJSON(jwkJSON(k1, other)))},
			path:   "/keys/agent.json", kid: "2024-ed25519", want: "ok", wantKey: k1, wantHits: 1,
		},
		{
			name:   "direct key-set URL, by thumbprint",
			routes: map[string]http.HandlerFunc{"/keys/agent.json": serveBody(signer.DirectoryMediaType, "", "", keysJSON(jwkJSON(k1, other)))},
			path:   "/keys/agent.json", kid: k1.Thumbprint, want: "ok", wantKey: k1, wantHits: 1,
		},
		{
			name:   "well-known directory ignores a kid that is not the thumbprint",
			routes: map[string]http.HandlerFunc{signer.DirectoryPath: serveBody(signer.DirectoryMediaType, "", "", keysJSON(jwkJSON(k1, other)))},
			path:   "", kid: "2024-ed25519", want: "unknown", wantHits: 1,
		},
		{
			name:   "well-known directory finds that key by thumbprint",
			routes: map[string]http.HandlerFunc{signer.DirectoryPath: serveBody(signer.DirectoryMediaType, "", "", keysJSON(jwkJSON(k1, other)))},
			path:   "", kid: k1.Thumbprint, want: "ok", wantKey: k1, wantHits: 1,
		},
		{
			name:   "well-known path given in full is the same directory",
			routes: map[string]http.HandlerFunc{signer.DirectoryPath: serveBody(signer.DirectoryMediaType, "", "", keysJSON(jwkJSON(k1, other)))},
			path:   signer.DirectoryPath, kid: "2024-ed25519", want: "unknown", wantHits: 1,
		},
		{
			name: "query kept: the URL is fetched exactly as sent",
			routes: map[string]http.HandlerFunc{
				"/keys?agent=a%2Fb&v=2": serveBody("application/json", "", "", keysJSON(jwkJSON(k1, ""))),
				"/keys":                 serveBody("application/json", "", "", keysJSON(jwkJSON(k2, ""))),
			},
			path: "/keys?agent=a%2Fb&v=2", kid: k1.Thumbprint, want: "ok", wantKey: k1, wantHits: 1,
		},
		{
			name:   "keys without a kid, found by thumbprint",
			routes: map[string]http.HandlerFunc{"/k": serveBody("application/json", "", "", keysJSON(jwkJSON(k1, ""), jwkJSON(k2, "")))},
			path:   "/k", kid: k2.Thumbprint, want: "ok", wantKey: k2, wantHits: 1,
		},
		{
			name:   `keys marked "alg":"EdDSA"`,
			routes: map[string]http.HandlerFunc{"/k": serveBody("application/json", "", "", keysJSON(jwkJSON(k1, `,"alg":"EdDSA","kid":"e"`)))},
			path:   "/k", kid: "e", want: "ok", wantKey: k1, wantHits: 1,
		},
		{
			name:   "a single bare JWK is a one-key set",
			routes: map[string]http.HandlerFunc{"/k": serveBody("application/json", "", "", jwkJSON(k1, `,"kid":"solo"`))},
			path:   "/k", kid: "solo", want: "ok", wantKey: k1, wantHits: 1,
		},
		{
			name:   "duplicate kid: the first key is kept",
			routes: map[string]http.HandlerFunc{"/k": serveBody("application/json", "", "", keysJSON(jwkJSON(k1, `,"kid":"a"`), jwkJSON(k2, `,"kid":"a"`)))},
			path:   "/k", kid: "a", want: "ok", wantKey: k1, wantHits: 1,
		},
		{
			name:   "duplicate kid: the second key is skipped",
			routes: map[string]http.HandlerFunc{"/k": serveBody("application/json", "", "", keysJSON(jwkJSON(k1, `,"kid":"a"`), jwkJSON(k2, `,"kid":"a"`)))},
			path:   "/k", kid: k2.Thumbprint, want: "unknown", wantHits: 1,
		},
		{
			name:   "a kid wins over another key's thumbprint",
			routes: map[string]http.HandlerFunc{"/k": serveBody("application/json", "", "", keysJSON(jwkJSON(k2, `,"kid":"two"`), jwkJSON(k1, fmt.Sprintf(`,"kid":%q`, k2.Thumbprint))))},
			path:   "/k", kid: k2.Thumbprint, want: "ok", wantKey: k1, wantHits: 1,
		},
		{
			name:   "jwks_uri member",
			routes: map[string]http.HandlerFunc{"/jwks.json": serveBody(keyfetch.JWKSetMediaType, "", "", keysJSON(jwkJSON(k1, other)))},
			path:   "/jwks.json", typ: "jwks_uri", kid: "2024-ed25519", want: "ok", wantKey: k1, wantHits: 1,
		},
		{
			name:   "jwks_uri member at the well-known path is not a well-known directory",
			routes: map[string]http.HandlerFunc{signer.DirectoryPath: serveBody(keyfetch.JWKSetMediaType, "", "", keysJSON(jwkJSON(k1, other)))},
			path:   signer.DirectoryPath, typ: "jwks_uri", kid: "2024-ed25519", want: "ok", wantKey: k1, wantHits: 1,
		},
		{
			name:   "directory member is a directory",
			routes: map[string]http.HandlerFunc{signer.DirectoryPath: serveBody(signer.DirectoryMediaType, "", "", keysJSON(jwkJSON(k1, "")))},
			path:   "", typ: "directory", kid: k1.Thumbprint, want: "ok", wantKey: k1, wantHits: 1,
		},
		{
			name:   "card with inline jwks",
			routes: map[string]http.HandlerFunc{"/card.json": serveBody("application/json", "", "", `{"client_name":"Example Bot","jwks":`+keysJSON(jwkJSON(k1, other))+`}`)},
			path:   "/card.json", typ: "cimd", kid: "2024-ed25519", want: "ok", wantKey: k1, wantHits: 1,
		},
		{
			name: "card naming a jwks_uri",
			routes: map[string]http.HandlerFunc{
				"/card.json": serveBody("application/json", "", "", `{"client_name":"Example Bot","jwks_uri":"{origin}/jwks.json"}`),
				"/jwks.json": serveBody(keyfetch.JWKSetMediaType, "", "", keysJSON(jwkJSON(k1, other))),
			},
			path: "/card.json", typ: "cimd", kid: "2024-ed25519", want: "ok", wantKey: k1, wantHits: 2,
		},
		{
			name: "card with both jwks and jwks_uri: refused (RFC 7591 §2), neither set used",
			routes: map[string]http.HandlerFunc{
				"/card.json": serveBody("application/json", "", "", `{"jwks":`+keysJSON(jwkJSON(k1, ""))+`,"jwks_uri":"{origin}/jwks.json"}`),
				"/jwks.json": serveBody(keyfetch.JWKSetMediaType, "", "", keysJSON(jwkJSON(k2, ""))),
			},
			path: "/card.json", typ: "cimd", kid: k1.Thumbprint, want: "fetch", wantHits: 1,
		},
		{
			name:   "card media type with a +json suffix",
			routes: map[string]http.HandlerFunc{"/card": serveBody("application/agent-card+json", "", "", `{"jwks":`+keysJSON(jwkJSON(k1, ""))+`}`)},
			path:   "/card", typ: "cimd", kid: k1.Thumbprint, want: "ok", wantKey: k1, wantHits: 1,
		},
		{
			name:   "card with neither jwks nor jwks_uri",
			routes: map[string]http.HandlerFunc{"/card.json": serveBody("application/json", "", "", `{"client_name":"Example Bot"}`)},
			path:   "/card.json", typ: "cimd", kid: k1.Thumbprint, want: "fetch", wantHits: 1,
		},
		{
			name:   "card naming an untrusted jwks_uri: refused before connecting",
			routes: map[string]http.HandlerFunc{"/card.json": serveBody("application/json", "", "", `{"jwks_uri":"https://keys.elsewhere.example/jwks.json"}`)},
			path:   "/card.json", typ: "cimd", kid: k1.Thumbprint, want: "untrusted", wantHits: 1,
		},
		{
			name:   "card naming a relative jwks_uri",
			routes: map[string]http.HandlerFunc{"/card.json": serveBody("application/json", "", "", `{"jwks_uri":"/jwks.json"}`)},
			path:   "/card.json", typ: "cimd", kid: k1.Thumbprint, want: "untrusted", wantHits: 1,
		},
		{
			name: "card naming itself: one hop, no loop",
			routes: map[string]http.HandlerFunc{
				"/card.json": serveBody("application/json", "", "", `{"jwks_uri":"{origin}/card.json"}`),
			},
			path: "/card.json", typ: "cimd", kid: k1.Thumbprint, want: "fetch", wantHits: 2,
		},
		{
			name: "card whose jwks_uri is gone: an empty set",
			routes: map[string]http.HandlerFunc{
				"/card.json": serveBody("application/json", "", "", `{"jwks_uri":"{origin}/jwks.json"}`),
			},
			path: "/card.json", typ: "cimd", kid: k1.Thumbprint, want: "unknown", wantHits: 2,
		},
		{
			name:   "a card read as a directory has no keys",
			routes: map[string]http.HandlerFunc{"/card.json": serveBody("application/json", "", "", `{"jwks":`+keysJSON(jwkJSON(k1, ""))+`}`)},
			path:   "/card.json", kid: k1.Thumbprint, want: "fetch", wantHits: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newDirServer(t, serveStatus(http.StatusNotFound))
			var mu sync.Mutex
			var uris []string
			for path, h := range tt.routes {
				srv.handle(path, func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					uris = append(uris, r.URL.RequestURI())
					mu.Unlock()
					h(withOrigin(w, srv.URL), r)
				})
			}
			f := keyfetch.New(testConfig(newClock()))
			set := keySet(t, srv.URL+tt.path, tt.typ)
			pk, err := f.Key(context.Background(), set, tt.kid)
			if got := errKind(err); got != tt.want {
				t.Fatalf("Key error kind = %s (%v), want %s", got, err, tt.want)
			}
			if err == nil && !pk.Key.Equal(tt.wantKey.Key) {
				t.Errorf("Key returned the key %s, want %s", pk.Thumbprint, tt.wantKey.Thumbprint)
			}
			if got := srv.hits.Load(); got != tt.wantHits {
				t.Errorf("requests = %d (%q), want %d", got, uris, tt.wantHits)
			}
			if tt.path != "" && len(uris) > 0 && uris[0] != tt.path {
				t.Errorf("first request-target = %q, want %q (fetched as sent)", uris[0], tt.path)
			}
		})
	}
}

// originWriter replaces "{origin}" in bodies with the server's origin.
type originWriter struct {
	http.ResponseWriter
	origin string
}

func withOrigin(w http.ResponseWriter, origin string) http.ResponseWriter {
	return originWriter{ResponseWriter: w, origin: origin}
}

func (w originWriter) Write(b []byte) (int, error) {
	_, err := w.ResponseWriter.Write([]byte(strings.ReplaceAll(string(b), "{origin}", w.origin)))
	return len(b), err
}

// TestKindIsPartOfTheCacheKey reads one URL as a directory and as a card:
// two cache entries, each parsed by its own rules.
func TestKindIsPartOfTheCacheKey(t *testing.T) {
	t.Parallel()
	k := testKey(1)
	srv := newDirServer(t, serveStatus(http.StatusNotFound))
	srv.handle("/agent", serveBody("application/json", "max-age=300", "", `{"jwks":`+keysJSON(jwkJSON(k, ""))+`}`))
	f := keyfetch.New(testConfig(newClock()))
	ctx := context.Background()
	if _, err := f.Key(ctx, keySet(t, srv.URL+"/agent", "cimd"), k.Thumbprint); err != nil {
		t.Fatalf("card Key error = %v, want nil", err)
	}
	if _, err := f.Key(ctx, keySet(t, srv.URL+"/agent", ""), k.Thumbprint); errKind(err) != "fetch" {
		t.Fatalf("directory Key error = %v, want a FetchError", err)
	}
	if _, err := f.Key(ctx, keySet(t, srv.URL+"/agent", "cimd"), k.Thumbprint); err != nil {
		t.Fatalf("card Key (cached) error = %v, want nil", err)
	}
	if got := srv.hits.Load(); got != 2 {
		t.Errorf("requests = %d, want 2 (one per kind; the card's second lookup is cached)", got)
	}
}

// TestCardRevalidation caches a card and its jwks_uri, each with its own
// ETag: on expiry both are revalidated, a 304 for both keeps the keys, a new
// JWKS behind an unchanged card replaces them.
func TestCardRevalidation(t *testing.T) {
	t.Parallel()
	k1, k2 := testKey(1), testKey(2)
	srv := newDirServer(t, serveStatus(http.StatusNotFound))
	var mu sync.Mutex
	var conditional []string
	record := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if inm := r.Header.Get("If-None-Match"); inm != "" {
				mu.Lock()
				conditional = append(conditional, r.URL.Path+" "+inm)
				mu.Unlock()
			}
			h(withOrigin(w, srv.URL), r)
		}
	}
	srv.handle("/card.json", record(serveBody("application/json", "max-age=60", `"c1"`, `{"jwks_uri":"{origin}/jwks.json"}`)))
	srv.handle("/jwks.json", record(serveBody(keyfetch.JWKSetMediaType, "max-age=600", `"j1"`, keysJSON(jwkJSON(k1, "")))))
	clk := newClock()
	f := keyfetch.New(testConfig(clk))
	ctx := context.Background()
	set := keySet(t, srv.URL+"/card.json", "cimd")

	if _, err := f.Key(ctx, set, k1.Thumbprint); err != nil {
		t.Fatalf("Key error = %v, want nil", err)
	}
	clk.Advance(59 * time.Second) // fresh: the shorter of the two lifetimes
	if _, err := f.Key(ctx, set, k1.Thumbprint); err != nil || srv.hits.Load() != 2 {
		t.Fatalf("Key error = %v after %d requests, want nil after 2", err, srv.hits.Load())
	}
	clk.Advance(2 * time.Second)
	if _, err := f.Key(ctx, set, k1.Thumbprint); err != nil {
		t.Fatalf("Key after revalidation error = %v, want nil", err)
	}
	mu.Lock()
	got := strings.Join(conditional, ", ")
	mu.Unlock()
	if want := `/card.json "c1", /jwks.json "j1"`; got != want {
		t.Errorf("conditional requests = %s, want %s", got, want)
	}

	srv.handle("/jwks.json", record(serveBody(keyfetch.JWKSetMediaType, "max-age=600", `"j2"`, keysJSON(jwkJSON(k2, "")))))
	clk.Advance(61 * time.Second)
	if _, err := f.Key(ctx, set, k2.Thumbprint); err != nil {
		t.Fatalf("Key(new key) error = %v, want nil", err)
	}
	if _, err := f.Key(ctx, set, k1.Thumbprint); !errors.Is(err, signer.ErrUnknownKey) {
		t.Errorf("Key(replaced key) error = %v, want ErrUnknownKey", err)
	}

	// The JWKS goes down: the last good set keeps serving.
	srv.handle("/jwks.json", serveStatus(http.StatusBadGateway))
	clk.Advance(61 * time.Second)
	if _, err := f.Key(ctx, set, k2.Thumbprint); err != nil {
		t.Errorf("Key while the JWKS is down error = %v, want the stale key", err)
	}
}
