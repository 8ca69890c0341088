package keyfetch_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentid/agentid/keyfetch"
)

// TestLocalhostNames reaches a directory on 127.0.0.1 through
// http://agent-x.localhost:PORT, the Signature-Agent of an agent registered
// on a local reference server: the Fetcher's own dialer resolves
// *.localhost to loopback with AllowPrivateNetworks, and refuses it
// without, before connecting.
func TestLocalhostNames(t *testing.T) {
	t.Parallel()
	k := testKey(1)
	srv := newDirServer(t, serveKeys("max-age=60", "", k))
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	tests := []struct {
		name         string
		agent        string
		trusted      []string
		allowPrivate bool
		want         string // ok, fetch
	}{
		{name: "uid host under .localhost", agent: "http://agent-x.localhost:" + port, trusted: []string{"*.localhost:*"}, allowPrivate: true, want: "ok"},
		{name: "deeper name under .localhost", agent: "http://a.b.localhost:" + port, trusted: []string{"*.localhost:*"}, allowPrivate: true, want: "ok"},
		{name: "localhost itself", agent: "http://localhost:" + port, trusted: []string{"localhost:*"}, allowPrivate: true, want: "ok"},
		{name: "upper case", agent: "http://Agent-X.LOCALHOST:" + port, trusted: []string{"*.localhost:*"}, allowPrivate: true, want: "ok"},
		{name: "refused without AllowPrivateNetworks", agent: "http://agent-x.localhost:" + port, trusted: []string{"*.localhost:*"}, want: "fetch"},
		{name: "localhost refused without AllowPrivateNetworks", agent: "http://localhost:" + port, trusted: []string{"localhost:*"}, want: "fetch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := keyfetch.New(keyfetch.Config{
				TrustedHosts:         tt.trusted,
				AllowHTTP:            true,
				AllowPrivateNetworks: tt.allowPrivate,
				Now:                  newClock().Now,
			})
			before := srv.accepts.Load()
			_, err := f.Key(context.Background(), agentSet(t, tt.agent), k.Thumbprint)
			if got := errKind(err); got != tt.want {
				t.Fatalf("Key error kind = %s (%v), want %s", got, err, tt.want)
			}
			if tt.want == "fetch" {
				if !errors.Is(err, keyfetch.ErrPrivateAddress) {
					t.Errorf("Key error = %v, want it to wrap ErrPrivateAddress", err)
				}
				if got := srv.accepts.Load() - before; got != 0 {
					t.Errorf("accepted connections = %d, want 0", got)
				}
			}
		})
	}
}

// TestLocalhostFallsBackToIPv6 reaches a directory listening only on ::1.
func TestLocalhostFallsBackToIPv6(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	k := testKey(1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(serveKeys("", "", k)))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
		c.Close()
		t.Skipf("127.0.0.1:%s is taken by another listener", port)
	}
	f := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"*.localhost:*"}, AllowHTTP: true, AllowPrivateNetworks: true})
	if _, err := f.Key(context.Background(), agentSet(t, "http://agent-x.localhost:"+port), k.Thumbprint); err != nil {
		t.Fatalf("Key error = %v, want nil", err)
	}
}
