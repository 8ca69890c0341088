package clitest

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
)

// ServerOptions configure StartServer.
type ServerOptions struct {
	// DatabaseURL names the database; StartServer migrates it. If "", an
	// in-memory SQLite database.
	DatabaseURL string
	// Hostname is the server's HOSTNAME. If "", http://<Host>:<port>.
	Hostname string
	// Host is the host of the default Hostname. If "", localhost.
	Host string
	// ReplayStore, VestauthCompat and MetricsListen are as in
	// refserver.Options.
	ReplayStore    string
	VestauthCompat bool
	MetricsListen  string
	// Configure, if set, adjusts the server's refserver.Config.
	Configure func(*refserver.Config)
}

// Server is a reference server serving on loopback until the test ends.
type Server struct {
	// URL is its HOSTNAME.
	URL string
	// Addr is the loopback address it listens on, host:port.
	Addr string
	// Client sends every request to Addr whatever the URL's host, so the
	// service host and agent hosts (<uid>.<host>) reach it without DNS.
	Client *http.Client
	// Instance is the running server.
	Instance *refserver.Instance
	// MetricsURL is http://<metrics address>/metrics with
	// ServerOptions.MetricsListen, else "".
	MetricsURL string
}

// StartServer opens a reference server with refserver.Open on a free
// loopback port (migrating its database) and serves it until the test ends.
func StartServer(t testing.TB, o ServerOptions) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	hostname := o.Hostname
	if hostname == "" {
		host := o.Host
		if host == "" {
			host = "localhost"
		}
		hostname = "http://" + host + ":" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	}
	databaseURL := o.DatabaseURL
	if databaseURL == "" {
		databaseURL = "sqlite::memory:"
	}
	in, err := refserver.Open(context.Background(), refserver.Options{
		DatabaseURL:     databaseURL,
		Hostname:        hostname,
		Listener:        ln,
		Migrate:         true,
		ReplayStore:     o.ReplayStore,
		VestauthCompat:  o.VestauthCompat,
		MetricsListen:   o.MetricsListen,
		Configure:       o.Configure,
		ShutdownTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatalf("refserver.Open: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- in.Serve(ctx) }()
	s := &Server{URL: in.URL, Addr: addr, Client: DialingClient(addr), Instance: in}
	if in.MetricsAddr != nil {
		s.MetricsURL = "http://" + in.MetricsAddr.String() + "/metrics"
	}
	t.Cleanup(func() {
		s.Client.CloseIdleConnections()
		cancel()
		if err := <-served; err != nil {
			t.Errorf("reference server at %s: %v", addr, err)
		}
	})
	return s
}

// AgentOrigin returns <scheme>://<uid>.<service host> of this server.
func (s *Server) AgentOrigin(uid string) string { return s.Instance.Server.AgentOrigin(uid) }

// WellKnownURL returns the URL of uid's key directory on this server.
func (s *Server) WellKnownURL(uid string) string { return s.Instance.Server.WellKnownURL(uid) }

// DialingClient returns a client that connects to addr whatever the URL's
// host and never follows a proxy.
func DialingClient(addr string) *http.Client {
	var d net.Dialer
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, "tcp", addr)
			},
			MaxIdleConnsPerHost: 64,
		},
	}
}

// EachDatabase runs fn as a subtest per database backend (SQLite always,
// PostgreSQL when AGENTID_TEST_DATABASE_URL is set), each with the URL of a
// fresh, empty database.
func EachDatabase(t *testing.T, fn func(t *testing.T, databaseURL string)) {
	t.Helper()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, b.URL(t)) })
	}
}

// EachServer runs fn as a subtest per database backend (as EachDatabase)
// with a reference server started by StartServer with o on that backend's
// fresh database.
func EachServer(t *testing.T, o ServerOptions, fn func(t *testing.T, srv *Server)) {
	t.Helper()
	EachDatabase(t, func(t *testing.T, databaseURL string) {
		o := o
		o.DatabaseURL = databaseURL
		fn(t, StartServer(t, o))
	})
}

// Register registers key at the service hostname with agent.Register
// (through c; nil means http.DefaultClient) and returns the uid, failing
// the test on any error.
func Register(t testing.TB, c *http.Client, hostname string, key signer.PrivateKey) string {
	t.Helper()
	reg, err := agent.Register(context.Background(), c, hostname, key)
	if err != nil {
		t.Fatalf("register kid %s at %s: %v", key.KeyID(), hostname, err)
	}
	return reg.UID
}
