package keyfetch_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
)

func TestCacheLifetime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cacheControl string
		want         time.Duration
	}{
		{"max-age=120", 120 * time.Second},
		{`public, max-age="90"`, 90 * time.Second},
		{"max-age=1", keyfetch.DefaultMinTTL},
		{"max-age=0", keyfetch.DefaultMinTTL},
		{"max-age=999999", keyfetch.DefaultMaxTTL},
		{"", keyfetch.DefaultDefaultTTL},
		{"max-age=soon", keyfetch.DefaultDefaultTTL},
		{"no-store", keyfetch.DefaultMinTTL},
		{"max-age=600, no-cache", keyfetch.DefaultMinTTL},
	}
	for _, tt := range tests {
		t.Run(tt.cacheControl, func(t *testing.T) {
			t.Parallel()
			k := testKey(1)
			srv := newDirServer(t, serveKeys(tt.cacheControl, "", k))
			clk := newClock()
			f := keyfetch.New(testConfig(clk))
			ctx := context.Background()
			steps := []struct {
				advance  time.Duration
				wantHits int64
			}{
				{0, 1},
				{tt.want - time.Second, 1}, // still fresh
				{2 * time.Second, 2},       // expired: refetched
			}
			for i, s := range steps {
				clk.Advance(s.advance)
				if _, err := f.Key(ctx, agentSet(t, srv.URL), k.JWK.Kid); err != nil {
					t.Fatalf("step %d: Key error = %v, want nil", i, err)
				}
				if got := srv.hits.Load(); got != s.wantHits {
					t.Fatalf("step %d: fetches = %d, want %d", i, got, s.wantHits)
				}
			}
		})
	}
}

func TestETagRevalidation(t *testing.T) {
	t.Parallel()
	k1, k2 := testKey(1), testKey(2)
	var notModified, conditional atomic.Int64
	v1 := serveKeys("max-age=60", `"v1"`, k1)
	srv := newDirServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") != "" {
			conditional.Add(1)
		}
		rec := &statusRecorder{ResponseWriter: w}
		v1(rec, r)
		if rec.status == http.StatusNotModified {
			notModified.Add(1)
		}
	})
	clk := newClock()
	f := keyfetch.New(testConfig(clk))
	ctx := context.Background()

	mustKey(t, f, srv.URL, k1)
	if got := conditional.Load(); got != 0 {
		t.Fatalf("conditional requests = %d on the first fetch, want 0", got)
	}
	clk.Advance(61 * time.Second)
	mustKey(t, f, srv.URL, k1)
	if got := notModified.Load(); got != 1 {
		t.Fatalf("304 answers = %d, want 1", got)
	}
	clk.Advance(59 * time.Second) // the 304 renewed the lifetime
	mustKey(t, f, srv.URL, k1)
	if got := srv.hits.Load(); got != 2 {
		t.Fatalf("fetches = %d, want 2", got)
	}
	// A new version replaces the set.
	srv.set(serveKeys("max-age=60", `"v2"`, k2))
	clk.Advance(2 * time.Second)
	mustKey(t, f, srv.URL, k2)
	if _, err := f.Key(ctx, agentSet(t, srv.URL), k1.JWK.Kid); !errors.Is(err, signer.ErrUnknownKey) {
		t.Errorf("Key(removed key) error = %v, want ErrUnknownKey", err)
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func mustKey(t *testing.T, f *keyfetch.Fetcher, agent string, want signer.PublicKey) {
	t.Helper()
	pk, err := f.Key(context.Background(), agentSet(t, agent), want.JWK.Kid)
	if err != nil {
		t.Fatalf("Key(%s) error = %v, want nil", want.JWK.Kid, err)
	}
	if !pk.Key.Equal(want.Key) {
		t.Fatalf("Key(%s) returned another key", want.JWK.Kid)
	}
}

func TestRefreshReplacesKeySet(t *testing.T) {
	t.Parallel()
	k1, k2 := testKey(1), testKey(2)
	srv := newDirServer(t, serveKeys("max-age=60", "", k1, k2))
	clk := newClock()
	f := keyfetch.New(testConfig(clk))
	ctx := context.Background()
	mustKey(t, f, srv.URL, k2)
	dir, err := f.Keys(ctx, agentSet(t, srv.URL))
	if err != nil || len(dir) != 2 || dir[0].JWK.Kid != k1.JWK.Kid {
		t.Fatalf("Keys = %d keys, %v; want [k1 k2], nil", len(dir), err)
	}

	srv.set(serveKeys("max-age=60", "", k1))
	mustKey(t, f, srv.URL, k2) // still cached
	clk.Advance(61 * time.Second)
	if _, err := f.Key(ctx, agentSet(t, srv.URL), k2.JWK.Kid); !errors.Is(err, signer.ErrUnknownKey) {
		t.Errorf("Key(removed key) error = %v, want ErrUnknownKey", err)
	}
	mustKey(t, f, srv.URL, k1)
	if dir, _ := f.Keys(ctx, agentSet(t, srv.URL)); len(dir) != 1 {
		t.Errorf("Keys = %d keys, want 1", len(dir))
	}
}

func TestConcurrentLookupsShareOneFetch(t *testing.T) {
	t.Parallel()
	k := testKey(1)
	gate := make(chan struct{})
	serve := serveKeys("max-age=60", "", k)
	srv := newDirServer(t, func(w http.ResponseWriter, r *http.Request) {
		<-gate
		serve(w, r)
	})
	f := keyfetch.New(testConfig(newClock()))

	set := agentSet(t, srv.URL)
	const n = 200
	var started, done sync.WaitGroup
	errs := make([]error, n)
	started.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			started.Done()
			_, errs[i] = f.Key(context.Background(), set, k.JWK.Kid)
		}()
	}
	started.Wait()
	close(gate)
	done.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Key #%d error = %v, want nil", i, err)
		}
	}
	if got := srv.hits.Load(); got != 1 {
		t.Errorf("fetches = %d, want 1", got)
	}
}

func TestCallerGivesUpWithoutCancellingSharedFetch(t *testing.T) {
	t.Parallel()
	k := testKey(1)
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	serve := serveKeys("max-age=60", "", k)
	srv := newDirServer(t, func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-gate
		serve(w, r)
	})
	f := keyfetch.New(testConfig(newClock()))

	set := agentSet(t, srv.URL)
	ctxA, cancelA := context.WithCancel(context.Background())
	errA := make(chan error, 1)
	go func() { _, err := f.Key(ctxA, set, k.JWK.Kid); errA <- err }()
	<-entered
	errB := make(chan error, 1)
	go func() { _, err := f.Key(context.Background(), set, k.JWK.Kid); errB <- err }()
	waitFor(t, func() bool { return f.Waiters(set) == 2 })
	cancelA()
	if err := <-errA; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller error = %v, want context.Canceled", err)
	}
	close(gate)
	if err := <-errB; err != nil {
		t.Errorf("waiting caller error = %v, want nil", err)
	}
	if got := srv.hits.Load(); got != 1 {
		t.Errorf("fetches = %d, want 1", got)
	}
}

func TestUnknownKeyForcesOneRefreshPerCooldown(t *testing.T) {
	t.Parallel()
	k1, k2, k3 := testKey(1), testKey(2), testKey(3)
	srv := newDirServer(t, serveKeys("max-age=300", "", k1))
	clk := newClock()
	f := keyfetch.New(testConfig(clk))
	ctx := context.Background()
	mustKey(t, f, srv.URL, k1)

	srv.set(serveKeys("max-age=300", "", k1, k2)) // the agent rotated in k2
	steps := []struct {
		name     string
		advance  time.Duration
		kid      string
		want     string
		wantHits int64
	}{
		{"new key forces a refresh", 0, k2.JWK.Kid, "ok", 2},
		{"another unknown key within the cooldown", time.Second, k3.JWK.Kid, "unknown", 2},
		{"again within the cooldown", 28 * time.Second, k3.JWK.Kid, "unknown", 2},
		{"after the cooldown", 2 * time.Second, k3.JWK.Kid, "unknown", 3},
		{"known keys never refresh", 0, k1.JWK.Kid, "ok", 3},
		{"cooldown restarted", 10 * time.Second, k3.JWK.Kid, "unknown", 3},
	}
	for _, s := range steps {
		clk.Advance(s.advance)
		_, err := f.Key(ctx, agentSet(t, srv.URL), s.kid)
		if got := errKind(err); got != s.want {
			t.Errorf("%s: Key error kind = %s (%v), want %s", s.name, got, err, s.want)
		}
		if got := srv.hits.Load(); got != s.wantHits {
			t.Errorf("%s: fetches = %d, want %d", s.name, got, s.wantHits)
		}
	}
}

func TestUnknownKeyRefreshDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	k1, k2, k3 := testKey(1), testKey(2), testKey(3)
	srv := newDirServer(t, serveKeys("max-age=300", "", k1))
	f := keyfetch.New(testConfig(newClock()))
	mustKey(t, f, srv.URL, k1)

	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	var released atomic.Bool
	serve := serveKeys("max-age=300", "", k1, k2)
	srv.set(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-gate
		serve(w, r)
	})
	release := sync.OnceFunc(func() { released.Store(true); close(gate) })
	safety := time.AfterFunc(5*time.Second, release) // unblocks a broken implementation
	defer safety.Stop()

	set := agentSet(t, srv.URL)
	errA := make(chan error, 1)
	go func() { _, err := f.Key(context.Background(), set, k2.JWK.Kid); errA <- err }()
	<-entered
	_, err := f.Key(context.Background(), set, k3.JWK.Kid)
	if !errors.Is(err, signer.ErrUnknownKey) {
		t.Errorf("other unknown key error = %v, want ErrUnknownKey", err)
	}
	mustKey(t, f, srv.URL, k1)
	if released.Load() {
		t.Errorf("lookups waited for the forced refresh, want an immediate answer")
	}
	release()
	if err := <-errA; err != nil {
		t.Errorf("refreshing caller error = %v, want nil", err)
	}
}

func TestFailuresAreCachedBriefly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		negativeTTL time.Duration
		wantHits    []int64 // after each of: first call, second call, call after 11 s
	}{
		{"default 10 s", 0, []int64{1, 1, 2}},
		{"disabled", -1, []int64{1, 2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newDirServer(t, serveStatus(http.StatusServiceUnavailable))
			clk := newClock()
			cfg := testConfig(clk)
			cfg.NegativeTTL = tt.negativeTTL
			f := keyfetch.New(cfg)
			for i, adv := range []time.Duration{0, time.Second, 10 * time.Second} {
				clk.Advance(adv)
				_, err := f.Key(context.Background(), agentSet(t, srv.URL), testKey(1).JWK.Kid)
				var fe *keyfetch.FetchError
				if !errors.As(err, &fe) || fe.StatusCode != http.StatusServiceUnavailable {
					t.Fatalf("call %d: Key error = %v, want a FetchError with status 503", i, err)
				}
				if got := srv.hits.Load(); got != tt.wantHits[i] {
					t.Errorf("call %d: fetches = %d, want %d", i, got, tt.wantHits[i])
				}
			}
		})
	}
}

func TestLastGoodSetServesWhileDirectoryDown(t *testing.T) {
	t.Parallel()
	k1, k2 := testKey(1), testKey(2)
	tests := []struct {
		name string
		down func(*dirServer)
	}{
		{"status 500", func(s *dirServer) { s.set(serveStatus(http.StatusInternalServerError)) }},
		{"garbage body", func(s *dirServer) { s.set(serveBody(signer.DirectoryMediaType, "", "", "{")) }},
		{"server gone", func(s *dirServer) { s.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newDirServer(t, serveKeys("max-age=60", "", k1))
			clk := newClock()
			f := keyfetch.New(testConfig(clk))
			ctx := context.Background()
			mustKey(t, f, srv.URL, k1)
			tt.down(srv)

			steps := []struct {
				name    string
				advance time.Duration
				kid     string
				want    string
			}{
				{"expired, refresh fails: stale key serves", 61 * time.Second, k1.JWK.Kid, "ok"},
				{"a key not in the stale set cannot be confirmed", 0, k2.JWK.Kid, "fetch"},
				{"after the negative TTL, still stale", 11 * time.Second, k1.JWK.Kid, "ok"},
				{"just before MaxStale ends", keyfetch.DefaultMaxStale - 13*time.Second, k1.JWK.Kid, "ok"},
				{"past MaxStale", 2 * time.Second, k1.JWK.Kid, "fetch"},
			}
			for _, s := range steps {
				clk.Advance(s.advance)
				_, err := f.Key(ctx, agentSet(t, srv.URL), s.kid)
				if got := errKind(err); got != s.want {
					t.Fatalf("%s: Key error kind = %s (%v), want %s", s.name, got, err, s.want)
				}
			}
		})
	}
}

func TestNoStaleServingWhenDisabled(t *testing.T) {
	t.Parallel()
	k1 := testKey(1)
	srv := newDirServer(t, serveKeys("max-age=60", "", k1))
	clk := newClock()
	cfg := testConfig(clk)
	cfg.MaxStale = -1
	f := keyfetch.New(cfg)
	mustKey(t, f, srv.URL, k1)
	srv.set(serveStatus(http.StatusInternalServerError))
	clk.Advance(61 * time.Second)
	if _, err := f.Key(context.Background(), agentSet(t, srv.URL), k1.JWK.Kid); errKind(err) != "fetch" {
		t.Errorf("Key error = %v, want a FetchError", err)
	}
}

// waitFor polls cond until it holds, failing the test after 10 seconds.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
