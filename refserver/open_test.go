package refserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
	"github.com/agentid/agentid/signer/signertest"
)

// health GETs the instance's / and returns the status and the version.
func health(t *testing.T, in *refserver.Instance) (int, string) {
	t.Helper()
	resp, err := dialing(in.Addr).Get(in.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b struct {
		Version string `json:"version"`
	}
	json.NewDecoder(resp.Body).Decode(&b)
	return resp.StatusCode, b.Version
}

func TestOpenServesAndShutsDown(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "agentid.db")
	opts := refserver.Options{DatabaseURL: "sqlite://" + path, Addr: "127.0.0.1:0"}

	// Not migrated: refused, naming the kind.
	if _, _, err := store.CreateDatabase(context.Background(), opts.DatabaseURL); err != nil {
		t.Fatal(err)
	}
	if _, err := refserver.Open(context.Background(), opts); !errors.Is(err, store.ErrNotMigrated) {
		t.Fatalf("Open on an unmigrated database = %v; want ErrNotMigrated", err)
	}

	var log strings.Builder
	opts.Migrate, opts.MigrationLog = true, &log
	in, err := refserver.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "CreateAgentsTable: migrated") {
		t.Errorf("migration log = %q, want the migration lines", log.String())
	}
	port := in.Addr.(*net.TCPAddr).Port
	if want := "http://localhost:" + strconv.Itoa(port); in.URL != want {
		t.Errorf("URL = %q, want %q (Hostname unset)", in.URL, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Serve(ctx) }()
	if status, version := health(t, in); status != http.StatusOK || version != signer.Version {
		t.Errorf("GET / = %d version %q; want 200 %s", status, version, signer.Version)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after cancel = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context was cancelled")
	}
	if _, err := dialing(in.Addr).Get(in.URL + "/"); err == nil {
		t.Error("the server still answers after Serve returned")
	}
	// The database was released: it can be dropped.
	if _, dropped, err := store.DropDatabase(context.Background(), opts.DatabaseURL); err != nil || !dropped {
		t.Errorf("DropDatabase after Serve = %v, %v", dropped, err)
	}
}

func TestOpenSettings(t *testing.T) {
	t.Parallel()
	// An in-memory database is always migrated; Hostname, Listener,
	// MetricsListen, a shared replay store and Configure are honoured.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	configured := false
	in, err := refserver.Open(context.Background(), refserver.Options{
		DatabaseURL:   "sqlite::memory:",
		Hostname:      "http://agentid.test",
		Listener:      ln,
		MetricsListen: "127.0.0.1:0",
		ReplayStore:   refserver.ReplayDatabase,
		Version:       "9.9.9",
		Configure:     func(c *refserver.Config) { configured = c.Metrics != nil && c.Replay != nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	if in.URL != "http://agentid.test" || in.Addr.String() != ln.Addr().String() || !configured {
		t.Errorf("URL %q, Addr %v, configured %v; want the given hostname and listener", in.URL, in.Addr, configured)
	}
	go in.Serve(context.Background())
	if in.MetricsAddr == nil {
		t.Fatal("MetricsAddr is nil with MetricsListen set")
	}
	for _, tc := range []struct {
		addr string
		want int
	}{{in.MetricsAddr.String(), http.StatusOK}, {ln.Addr().String(), http.StatusNotFound}} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+tc.addr+"/metrics", nil)
		req.Host = "agentid.test"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET /metrics on %s = %d, want %d", tc.addr, resp.StatusCode, tc.want)
		}
	}
	if err := in.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	in.Close() // twice is fine
}

func TestOpenFailures(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	tests := []struct {
		name string
		opts refserver.Options
		want error
	}{
		{"busy port", refserver.Options{DatabaseURL: "sqlite::memory:", Addr: busy.Addr().String()}, syscall.EADDRINUSE},
		{"unreachable database", refserver.Options{DatabaseURL: "postgres://postgres@127.0.0.1:1/agentid?connect_timeout=2"}, store.ErrDatabaseUnreachable},
		{"unsupported database", refserver.Options{DatabaseURL: "mysql://localhost/x"}, store.ErrUnsupportedDatabaseURL},
		{"bad hostname", refserver.Options{DatabaseURL: "sqlite::memory:", Addr: "127.0.0.1:0", Hostname: "agentid.test"}, nil},
		{"bad replay store", refserver.Options{DatabaseURL: "sqlite::memory:", ReplayStore: "redis"}, refserver.ErrUnknownReplayStore},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in, err := refserver.Open(context.Background(), tt.opts)
			if err == nil {
				in.Close()
				t.Fatal("Open succeeded, want an error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Open error = %v; want it to match %v", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q spans lines", err)
			}
		})
	}
}

func TestOpenSharedReplayStore(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			u := b.URL(t)
			dbtest.Migrated(t, u)
			// Two instances behind one HOSTNAME, as behind a load balancer.
			var ins []*refserver.Instance
			for range 2 {
				in, err := refserver.Open(context.Background(), refserver.Options{DatabaseURL: u, Addr: "127.0.0.1:0",
					Hostname: "http://agentid.test", ReplayStore: refserver.ReplayDatabase})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- in.Serve(ctx) }()
				t.Cleanup(func() { cancel(); <-done })
				ins = append(ins, in)
			}
			key := signertest.Key(40)
			reg, err := agent.Register(context.Background(), dialing(ins[0].Addr), "http://agentid.test", key)
			if err != nil {
				t.Fatal(err)
			}
			h, err := signer.Headers(http.MethodGet, "http://agentid.test/whoami", key,
				signer.Options{SignatureAgent: "http://" + reg.UID + ".agentid.test"})
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []int{http.StatusOK, http.StatusUnauthorized} {
				req, _ := http.NewRequest(http.MethodGet, "http://agentid.test/whoami", nil)
				req.Header.Set("Signature", h.Signature)
				req.Header.Set("Signature-Input", h.SignatureInput)
				req.Header.Set("Signature-Agent", h.SignatureAgent)
				resp, err := dialing(ins[i].Addr).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("copy %d through instance %d = %d, want %d", i+1, i+1, resp.StatusCode, want)
				}
			}
		})
	}
}
