package keyfetch_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
)

// testKey returns a fixed Ed25519 public key: seed bytes all equal to n.
func testKey(n byte) signer.PublicKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = n
	}
	return signer.NewPrivateKey(ed25519.NewKeyFromSeed(seed)).Public
}

// clock is a manual clock for cache lifetimes.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	accepts *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepts.Add(1)
	}
	return c, err
}

// dirServer is a key directory on loopback whose behaviour a test swaps.
type dirServer struct {
	*httptest.Server
	accepts atomic.Int64
	hits    atomic.Int64
	mu      sync.Mutex
	h       http.HandlerFunc
}

func newDirServer(t testing.TB, h http.HandlerFunc) *dirServer {
	t.Helper()
	s := &dirServer{h: h}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		if r.URL.Path != signer.DirectoryPath {
			http.NotFound(w, r)
			return
		}
		s.mu.Lock()
		h := s.h
		s.mu.Unlock()
		h(w, r)
	}))
	s.Listener = countingListener{Listener: s.Listener, accepts: &s.accepts}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *dirServer) set(h http.HandlerFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h = h
}

// serveKeys answers with a directory of keys, honouring If-None-Match when etag is set.
func serveKeys(cacheControl, etag string, keys ...signer.PublicKey) http.HandlerFunc {
	jwks := make([]signer.JWK, len(keys))
	for i, k := range keys {
		jwks[i] = k.JWK
	}
	body, _ := json.Marshal(map[string]any{"keys": jwks})
	return serveBody(signer.DirectoryMediaType, cacheControl, etag, string(body))
}

func serveBody(contentType, cacheControl, etag, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if cacheControl != "" {
			w.Header().Set("Cache-Control", cacheControl)
		}
		if etag != "" {
			w.Header().Set("ETag", etag)
			if r.Header.Get("If-None-Match") == etag {
				w.WriteHeader(http.StatusNotModified)
				return
			}
		}
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		_, _ = w.Write([]byte(body))
	}
}

func serveStatus(code int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) }
}

// testConfig trusts loopback over http, as tests need.
func testConfig(c *clock) keyfetch.Config {
	return keyfetch.Config{
		TrustedHosts:         []string{"127.0.0.1"},
		AllowHTTP:            true,
		AllowPrivateNetworks: true,
		Now:                  c.Now,
	}
}

// errKind classifies a Key error the way the middleware does.
func errKind(err error) string {
	var fe *keyfetch.FetchError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, signer.ErrUntrustedAgent):
		return "untrusted"
	case errors.Is(err, signer.ErrUnknownKey):
		return "unknown"
	case errors.As(err, &fe):
		return "fetch"
	}
	return "other: " + err.Error()
}

// newDirServerB starts a directory for a benchmark and returns its origin.
func newDirServerB(b *testing.B, h http.HandlerFunc) string {
	return newDirServer(b, h).URL
}

// originKey looks keyID up in the well-known directory of the signature
// agent origin agent; a value that is no key-set URL is refused as
// untrusted, as the middleware would never ask for it.
func originKey(f *keyfetch.Fetcher, ctx context.Context, agent, keyID string) (signer.PublicKey, error) {
	set, err := signer.ParseKeySetURL(agent)
	if err != nil {
		return signer.PublicKey{}, fmt.Errorf("%w: %v", signer.ErrUntrustedAgent, err)
	}
	return f.Key(ctx, set, keyID)
}
