package keyfetch_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
)

// TestAbandonedFetchIsCancelled: when the only caller waiting for a fetch
// goes away (the client hung up), the upstream sees its connection closed
// at once, not after Timeout, and nothing is remembered of the fetch: the
// next caller fetches afresh and succeeds.
func TestAbandonedFetchIsCancelled(t *testing.T) {
	t.Parallel()
	k := testKey(1)
	entered := make(chan struct{}, 1)
	closed := make(chan struct{}, 1)
	var slow atomic.Bool
	slow.Store(true)
	serve := serveKeys("max-age=60", "", k)
	srv := newDirServer(t, func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() {
			entered <- struct{}{}
			<-r.Context().Done() // the client closed the connection
			closed <- struct{}{}
			return
		}
		serve(w, r)
	})
	cfg := testConfig(newClock()) // the clock stands still: a remembered failure would still hold
	cfg.Timeout = time.Minute
	f := keyfetch.New(cfg)
	set := agentSet(t, srv.URL)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := f.Key(ctx, set, k.Thumbprint); errc <- err }()
	<-entered
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller error = %v, want context.Canceled", err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream connection was not closed within 10s of the only caller leaving")
	}

	slow.Store(false)
	if _, err := f.Key(context.Background(), set, k.Thumbprint); err != nil {
		t.Errorf("Key after an abandoned fetch error = %v, want nil (nothing remembered)", err)
	}
}

// TestFetchesPerHostAreBounded: with MaxFetchesPerHost fetches to one host
// in flight, a lookup that would start another fails at once (ErrHostBusy)
// without connecting, and is not remembered.
func TestFetchesPerHostAreBounded(t *testing.T) {
	t.Parallel()
	k := testKey(1)
	gate := make(chan struct{})
	entered := make(chan struct{}, 8)
	serve := serveKeys("max-age=60", "", k)
	srv := newDirServer(t, serveKeys("max-age=60", "", k))
	slowKeys := func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-gate
		serve(w, r)
	}
	for _, p := range []string{"/a.json", "/b.json"} {
		srv.handle(p, slowKeys)
	}
	srv.handle("/c.json", serve)
	cfg := testConfig(newClock())
	cfg.MaxFetchesPerHost = 2
	f := keyfetch.New(cfg)
	ctx := context.Background()

	var wg sync.WaitGroup
	for _, p := range []string{"/a.json", "/b.json"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.Key(ctx, agentSet(t, srv.URL+p), k.Thumbprint); err != nil {
				t.Errorf("Key(%s) error = %v, want nil", p, err)
			}
		}()
	}
	<-entered
	<-entered
	hits := srv.hits.Load()
	start := time.Now()
	_, err := f.Key(ctx, agentSet(t, srv.URL+"/c.json"), k.Thumbprint)
	if !errors.Is(err, keyfetch.ErrHostBusy) || keyfetch.ReasonOf(err) != keyfetch.ReasonHostBusy {
		t.Errorf("third Key error = %v (reason %q), want ErrHostBusy (%q)", err, keyfetch.ReasonOf(err), keyfetch.ReasonHostBusy)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refused lookup took %v, want it refused at once", d)
	}
	if got := srv.hits.Load() - hits; got != 0 {
		t.Errorf("requests sent for the refused lookup = %d, want 0", got)
	}
	close(gate)
	wg.Wait()
	if _, err := f.Key(ctx, agentSet(t, srv.URL+"/c.json"), k.Thumbprint); err != nil {
		t.Errorf("Key(/c.json) once the host is free error = %v, want nil (the refusal is not remembered)", err)
	}
}

// TestVerifiedSetSurvivesNewKeySets: 10,000 lookups naming new key sets on
// a trusted host leave a key set that verified in the cache, and it serves
// again with no refetch. A set never reported verified is on probation and
// is pushed out by them, as every set was before admission existed.
func TestVerifiedSetSurvivesNewKeySets(t *testing.T) {
	t.Parallel()
	for _, admitted := range []bool{true, false} {
		t.Run(fmt.Sprintf("admitted=%v", admitted), func(t *testing.T) {
			t.Parallel()
			priv := testPrivate(1)
			srv := newDirServer(t, serveKeys("max-age=3600", "", priv.Public)) // other paths answer 404
			f := keyfetch.New(testConfig(newClock()))
			ctx := context.Background()
			agent := agentSet(t, srv.URL)

			// The verifier: find the key, check a signature, report it.
			msg := []byte("a signature base")
			pk, err := f.Key(ctx, agent, priv.Public.Thumbprint)
			if err != nil {
				t.Fatal(err)
			}
			if err := pk.Verify(signer.AlgEd25519, msg, ed25519.Sign(priv.Key, msg)); err != nil {
				t.Fatal(err)
			}
			if admitted {
				f.Verified(agent)
			}

			const n = 10000
			var next atomic.Int64
			var wg sync.WaitGroup
			for range keyfetch.DefaultMaxFetchesPerHost {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := next.Add(1); i <= n; i = next.Add(1) {
						set := agentSet(t, fmt.Sprintf("%s/random/%d.json", srv.URL, i))
						if _, err := f.Key(ctx, set, priv.Public.Thumbprint); !errors.Is(err, signer.ErrUnknownKey) {
							t.Errorf("Key(%s) error = %v, want ErrUnknownKey (404)", set.URL, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			hits := srv.hits.Load()
			if _, err := f.Key(ctx, agent, priv.Public.Thumbprint); err != nil {
				t.Fatalf("Key(agent) error = %v, want nil", err)
			}
			refetches := srv.hits.Load() - hits
			if admitted && refetches != 0 {
				t.Errorf("refetches of the verified set = %d, want 0", refetches)
			}
			if !admitted && refetches != 1 {
				t.Errorf("refetches of the unadmitted set = %d, want 1 (evicted by the new sets)", refetches)
			}
		})
	}
}

// TestNotFoundRefetchKeepsLastVerifiedSet: once a key set was served, a
// refetch answered 404 (unsigned, so refused under
// RequireSignedDirectories, and in any case not a 200) is a failed
// refresh: the last good set keeps serving within the stale window.
func TestNotFoundRefetchKeepsLastVerifiedSet(t *testing.T) {
	t.Parallel()
	for _, require := range []bool{true, false} {
		t.Run(fmt.Sprintf("RequireSignedDirectories=%v", require), func(t *testing.T) {
			t.Parallel()
			k1, k2 := testPrivate(1), testPrivate(2)
			clk := newClock()
			srv := newDirServer(t, signedDirectory(clk, jwksOf(k1.Public), edSig(k1)))
			cfg := testConfig(clk)
			cfg.RequireSignedDirectories = require
			f := keyfetch.New(cfg)
			ctx := context.Background()
			set := agentSet(t, srv.URL)
			if _, err := f.Key(ctx, set, k1.Public.Thumbprint); err != nil {
				t.Fatalf("Key error = %v, want nil", err)
			}
			srv.set(serveStatus(http.StatusNotFound))
			clk.Advance(61 * time.Second)
			if _, err := f.Key(ctx, set, k1.Public.Thumbprint); err != nil {
				t.Errorf("Key(k1) after a 404 refetch error = %v, want the last good key", err)
			}
			_, err := f.Key(ctx, set, k2.Public.Thumbprint)
			var fe *keyfetch.FetchError
			if !errors.As(err, &fe) || fe.StatusCode != http.StatusNotFound {
				t.Errorf("Key(k2) error = %v, want the failed refresh (FetchError, status 404)", err)
			}
			clk.Advance(keyfetch.DefaultMaxStale)
			if _, err := f.Key(ctx, set, k1.Public.Thumbprint); err == nil {
				t.Errorf("Key(k1) past the stale window error = nil, want a failure")
			}
		})
	}
}

// TestNegativeCachingAtMostFiveMinutes: a failed fetch and an unknown keyid
// are remembered at most 5 minutes (protocol-01), whatever NegativeTTL and
// RefreshCooldown say.
func TestNegativeCachingAtMostFiveMinutes(t *testing.T) {
	t.Parallel()
	t.Run("failed fetch", func(t *testing.T) {
		t.Parallel()
		k := testKey(1)
		clk := newClock()
		srv := newDirServer(t, serveStatus(http.StatusBadGateway))
		cfg := testConfig(clk)
		cfg.NegativeTTL = time.Hour
		f := keyfetch.New(cfg)
		set := agentSet(t, srv.URL)
		ctx := context.Background()
		if _, err := f.Key(ctx, set, k.Thumbprint); errKind(err) != "fetch" {
			t.Fatalf("Key error = %v, want a fetch failure", err)
		}
		srv.set(serveKeys("max-age=60", "", k))
		clk.Advance(keyfetch.MaxNegativeTTL - time.Second)
		if _, err := f.Key(ctx, set, k.Thumbprint); errKind(err) != "fetch" {
			t.Errorf("Key within 5 minutes error = %v, want the remembered failure", err)
		}
		clk.Advance(2 * time.Second)
		if _, err := f.Key(ctx, set, k.Thumbprint); err != nil {
			t.Errorf("Key after 5 minutes error = %v, want a fresh fetch", err)
		}
	})
	t.Run("unknown keyid", func(t *testing.T) {
		t.Parallel()
		k1, k2 := testKey(1), testKey(2)
		clk := newClock()
		srv := newDirServer(t, serveKeys("max-age=3600", "", k1))
		cfg := testConfig(clk)
		cfg.RefreshCooldown = time.Hour
		f := keyfetch.New(cfg)
		set := agentSet(t, srv.URL)
		ctx := context.Background()
		if _, err := f.Key(ctx, set, k2.Thumbprint); !errors.Is(err, signer.ErrUnknownKey) {
			t.Fatalf("Key(k2) error = %v, want ErrUnknownKey", err)
		}
		if _, err := f.Key(ctx, set, k2.Thumbprint); !errors.Is(err, signer.ErrUnknownKey) {
			t.Fatalf("Key(k2) error = %v, want ErrUnknownKey", err)
		}
		srv.set(serveKeys("max-age=3600", "", k1, k2))
		clk.Advance(keyfetch.MaxNegativeTTL - time.Second)
		if _, err := f.Key(ctx, set, k2.Thumbprint); !errors.Is(err, signer.ErrUnknownKey) {
			t.Errorf("Key(k2) within 5 minutes error = %v, want ErrUnknownKey (cooldown)", err)
		}
		clk.Advance(2 * time.Second)
		if _, err := f.Key(ctx, set, k2.Thumbprint); err != nil {
			t.Errorf("Key(k2) after 5 minutes error = %v, want the refreshed key", err)
		}
	})
}

// TestOnlyStatus200DeliversKeys: any other status, a redirect included
// (never followed), is a fetch failure, even with a key set in the body.
func TestOnlyStatus200DeliversKeys(t *testing.T) {
	t.Parallel()
	k := testKey(1)
	target := newDirServer(t, serveKeys("", "", k))
	for _, code := range []int{201, 202, 203, 204, 206, 226, 300, 301, 302, 303, 307, 308, 401, 403, 429, 500, 503} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			t.Parallel()
			srv := newDirServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Location", target.URL+signer.DirectoryPath)
				w.Header().Set("Content-Type", signer.DirectoryMediaType)
				w.WriteHeader(code)
				_, _ = w.Write([]byte(jwksOf(k)))
			})
			_, err := keyfetch.New(testConfig(newClock())).Key(context.Background(), agentSet(t, srv.URL), k.Thumbprint)
			var fe *keyfetch.FetchError
			if !errors.As(err, &fe) || fe.StatusCode != code || keyfetch.ReasonOf(err) != keyfetch.ReasonStatus {
				t.Errorf("Key error = %v (reason %q), want a FetchError with status %d (%q)", err, keyfetch.ReasonOf(err), code, keyfetch.ReasonStatus)
			}
		})
	}
	if got := target.hits.Load(); got != 0 {
		t.Errorf("redirect target hits = %d, want 0", got)
	}
}

// TestKeysAreLookedUpByURLAndKey: a key is found only in the key set whose
// URL names it; the same keyid under another URL of the same host is not
// that key.
func TestKeysAreLookedUpByURLAndKey(t *testing.T) {
	t.Parallel()
	k1, k2 := testKey(1), testKey(2)
	srv := newDirServer(t, serveStatus(http.StatusNotFound))
	srv.handle("/a.json", serveKeys("max-age=60", "", k1))
	srv.handle("/b.json", serveKeys("max-age=60", "", k2))
	f := keyfetch.New(testConfig(newClock()))
	ctx := context.Background()
	a, b := agentSet(t, srv.URL+"/a.json"), agentSet(t, srv.URL+"/b.json")
	if _, err := f.Key(ctx, a, k1.JWK.Kid); err != nil {
		t.Fatalf("Key(a, k1) error = %v, want nil", err)
	}
	if _, err := f.Key(ctx, b, k1.JWK.Kid); !errors.Is(err, signer.ErrUnknownKey) {
		t.Errorf("Key(b, k1) error = %v, want ErrUnknownKey", err)
	}
	if pk, err := f.Key(ctx, b, k2.JWK.Kid); err != nil || pk.Thumbprint != k2.Thumbprint {
		t.Errorf("Key(b, k2) = %s, %v; want k2", pk.Thumbprint, err)
	}
}

// TestRefusalsNameTheirCause: each refusal says why, in its text and in
// ReasonOf.
func TestRefusalsNameTheirCause(t *testing.T) {
	t.Parallel()
	k := testKey(1)
	srv := newDirServer(t, serveKeys("max-age=60", "", k))
	down := newDirServer(t, serveStatus(http.StatusBadGateway))
	closedURL := func() string {
		s := newDirServer(t, serveStatus(http.StatusOK))
		s.Close()
		return s.URL
	}()
	hostPort := strings.TrimPrefix(srv.URL, "http://")
	tests := []struct {
		name       string
		cfg        func(*keyfetch.Config)
		agent      string
		wantReason keyfetch.Reason
		wantText   []string
	}{
		{name: "no pattern matches", cfg: func(c *keyfetch.Config) { c.TrustedHosts = []string{"*.agentid.example", "bots.example.net"} }, agent: srv.URL,
			wantReason: keyfetch.ReasonUntrustedHost, wantText: []string{hostPort, `"*.agentid.example"`, `"bots.example.net"`}},
		{name: "entry without a port means the default port", cfg: func(c *keyfetch.Config) { c.TrustedHosts = []string{"127.0.0.1"} }, agent: srv.URL,
			wantReason: keyfetch.ReasonUntrustedHost, wantText: []string{hostPort, `"127.0.0.1"`, "default port"}},
		{name: "http while AllowHTTP is off", cfg: func(c *keyfetch.Config) { c.AllowHTTP = false }, agent: srv.URL,
			wantReason: keyfetch.ReasonHTTPRefused, wantText: []string{"AllowHTTP is off"}},
		{name: "private address while AllowPrivateNetworks is off", cfg: func(c *keyfetch.Config) { c.AllowPrivateNetworks = false }, agent: srv.URL,
			wantReason: keyfetch.ReasonPrivateAddress, wantText: []string{"non-public address", "127.0.0.1", "AllowPrivateNetworks is off"}},
		{name: "fetch failed with a status", agent: down.URL,
			wantReason: keyfetch.ReasonStatus, wantText: []string{"unexpected status 502"}},
		{name: "fetch failed on the network", agent: closedURL,
			wantReason: keyfetch.ReasonNetwork, wantText: []string{"connect"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(newClock())
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			_, err := keyfetch.New(cfg).Key(context.Background(), agentSet(t, tt.agent), k.Thumbprint)
			if err == nil {
				t.Fatal("Key error = nil, want a refusal")
			}
			if got := keyfetch.ReasonOf(err); got != tt.wantReason {
				t.Errorf("ReasonOf(%v) = %q, want %q", err, got, tt.wantReason)
			}
			for _, s := range tt.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
}

// TestEmptyTrustedHostsWarns: New warns that nothing will verify when
// TrustedHosts is empty, and only then.
func TestEmptyTrustedHostsWarns(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		hosts []string
		want  bool
	}{{nil, true}, {[]string{"*.agentid.example"}, false}} {
		var buf bytes.Buffer
		keyfetch.New(keyfetch.Config{TrustedHosts: tt.hosts, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		if got := strings.Contains(buf.String(), "level=WARN") && strings.Contains(buf.String(), "TrustedHosts is empty"); got != tt.want {
			t.Errorf("TrustedHosts %q: log %q, want a warning %v", tt.hosts, buf.String(), tt.want)
		}
	}
}

// TestEmptyTrustedHostsQuietByDefault: without Config.Logger, New's
// warning goes nowhere, not to slog.Default(). Not parallel: it swaps the
// process-wide default logger.
func TestEmptyTrustedHostsQuietByDefault(t *testing.T) {
	var global bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&global, nil)))
	defer slog.SetDefault(old)
	keyfetch.New(keyfetch.Config{})
	if global.Len() != 0 {
		t.Errorf("slog.Default() got %q, want nothing", global.String())
	}
}

// TestLocalDevelopmentPreset: the preset trusts agents of a reference
// server on this machine (any port under .localhost, over http) and
// nothing else.
func TestLocalDevelopmentPreset(t *testing.T) {
	t.Parallel()
	cfg := keyfetch.LocalDevelopment()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate = %v", err)
	}
	f := keyfetch.New(cfg)
	for _, tt := range []struct {
		url  string
		want bool
	}{
		{"http://agent-0123456789abcdef01234567.localhost:3000", true},
		{"http://agent-x.localhost:4000/.well-known/http-message-signatures-directory", true},
		{"https://agent-x.localhost", true},
		{"https://agent-x.agentid.example", false},
		{"http://127.0.0.1:3000", false},
		{"http://localhost.example.com:3000", false},
	} {
		if got := f.TrustURL(tt.url) == nil; got != tt.want {
			t.Errorf("TrustURL(%s) trusted = %v, want %v", tt.url, got, tt.want)
		}
	}
}
