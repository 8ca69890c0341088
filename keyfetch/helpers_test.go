package keyfetch_test

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// testKey returns a fixed Ed25519 public key: seed bytes all equal to n.
func testKey(n byte) signer.PublicKey { return signertest.Key(n).Public }

// clock is a manual clock for cache lifetimes.
type clock = signertest.Clock

func newClock() *clock { return signertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)) }

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

// dirServer serves key sets on loopback: the well-known directory and any
// other path a test adds, each with a handler the test swaps.
type dirServer struct {
	*httptest.Server
	accepts atomic.Int64
	hits    atomic.Int64
	mu      sync.Mutex
	routes  map[string]http.HandlerFunc
}

func newDirServer(t testing.TB, h http.HandlerFunc) *dirServer {
	t.Helper()
	s := &dirServer{routes: map[string]http.HandlerFunc{signer.DirectoryPath: h}}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		h := s.routes[r.URL.RequestURI()]
		if h == nil {
			h = s.routes[r.URL.Path]
		}
		s.mu.Unlock()
		if h == nil {
			http.NotFound(w, r)
			return
		}
		h(w, r)
	}))
	s.Listener = countingListener{Listener: s.Listener, accepts: &s.accepts}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// set swaps the handler of the well-known directory.
func (s *dirServer) set(h http.HandlerFunc) { s.handle(signer.DirectoryPath, h) }

// handle serves h at target: a path, or a path with its query (matched
// first, exactly).
func (s *dirServer) handle(target string, h http.HandlerFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.routes[target] = h
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
		TrustedHosts:         []string{"127.0.0.1:*"},
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

// agentSet returns the key set of the Signature-Agent value agent (an
// origin means its well-known directory).
func agentSet(t testing.TB, agent string) signer.KeySet {
	t.Helper()
	set, err := signer.ParseKeySetURL(agent)
	if err != nil {
		t.Fatalf("ParseKeySetURL(%q): %v", agent, err)
	}
	return set
}

// keySet returns the key set of a Signature-Agent member with the given
// value and ;type parameter ("" for none).
func keySet(t testing.TB, value, typ string) signer.KeySet {
	t.Helper()
	set, err := signer.AgentMember{Value: value, Type: typ}.KeySet()
	if err != nil {
		t.Fatalf("KeySet(%q;type=%q): %v", value, typ, err)
	}
	return set
}
