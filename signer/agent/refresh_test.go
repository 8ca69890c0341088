package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/signer/agent"
	"github.com/agentid/agentid/signer/envfile"
)

// hangingService accepts directory refreshes and never answers them,
// until the test ends.
type hangingService struct {
	srv  *httptest.Server
	puts atomic.Int32
}

func newHangingService(t *testing.T) *hangingService {
	t.Helper()
	h := &hangingService{}
	gone := make(chan struct{})
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			h.puts.Add(1)
		}
		<-gone
	}))
	t.Cleanup(h.srv.Close)
	t.Cleanup(func() { close(gone) }) // runs first: the handlers return
	return h
}

// A service that takes the directory refresh and never answers does not
// hold up the agent's signed calls to another site: each call, made with
// its own deadline while the refresh hangs, is answered, and only one
// refresh is sent however many calls find it due.
func TestRefreshTransportHangingServiceDoesNotBlockCalls(t *testing.T) {
	t.Parallel()
	svc := newFakeService(t)
	hang := newHangingService(t)
	dir := t.TempDir()
	getenv := envOf(nil)
	start := time.Now().Truncate(time.Second)
	_, creds := initSigned(t, svc, dir, getenv, start)
	due := func() time.Time { return start.Add(agent.DefaultDirectoryValidity/2 + time.Hour) }
	var mu sync.Mutex
	var errs []error
	tr := &agent.RefreshTransport{Base: creds.Transport(nil),
		Options: agent.RefreshOptions{Dir: dir, Getenv: getenv, Now: due, Hostname: hang.srv.URL},
		OnError: func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }}
	t.Cleanup(func() { tr.Close() }) // before the service and the folder go
	client := &http.Client{Transport: tr}

	call := func(name string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, svc.URL()+"/whoami", nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s call: status %d, want 200", name, resp.StatusCode)
		}
		return nil
	}
	if err := call("first"); err != nil {
		t.Fatalf("first call while the refresh hangs: %v; want it answered within its own deadline", err)
	}
	var wg sync.WaitGroup
	failed := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := call("concurrent"); err != nil {
				failed <- err
			}
		}()
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Errorf("concurrent call while the refresh hangs: %v", err)
	}
	if n := hang.puts.Load(); n != 1 {
		t.Errorf("%d refreshes sent to the hanging service, want 1 (one in flight at a time)", n)
	}
	tr.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
		t.Errorf("errors reported after Close = %v, want the one cancelled refresh", errs)
	}
	if got := readVar(t, filepath.Join(dir, ".env"), agent.EnvDirectoryRefreshFailures); got != "1" {
		t.Errorf("%s = %q after the cancelled refresh, want 1", agent.EnvDirectoryRefreshFailures, got)
	}
}

// A rotation that lands while a directory refresh waits for its answer
// keeps its new key: the refresh finds another key in the credentials file
// when it comes to record its signature, and drops the record instead of
// writing back the file as it read it (with the revoked key).
func TestRefreshDuringRotationKeepsNewKey(t *testing.T) {
	t.Parallel()
	svc := newFakeService(t)
	dir := t.TempDir()
	getenv := envOf(nil)
	_, creds := initSigned(t, svc, dir, getenv, time.Now().Truncate(time.Second))
	ctx := context.Background()

	answered, release := svc.holdNextRefresh()
	refreshed := make(chan error, 1)
	go func() {
		_, err := agent.Refresh(ctx, agent.RefreshOptions{Dir: dir, Getenv: getenv})
		refreshed <- err
	}()
	<-answered
	rot, err := agent.Rotate(ctx, agent.RotateOptions{Dir: dir, Getenv: getenv})
	if err != nil {
		release()
		t.Fatalf("Rotate during the refresh: %v", err)
	}
	release()
	refreshErr := <-refreshed

	now, err := agent.Load(agent.LoadOptions{Dir: dir, Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	if got := now.Key.KeyID(); got != rot.PublicJWK.Kid {
		t.Errorf("the credentials file holds kid %s after the refresh (%v), want the rotated %s (old %s)", got, refreshErr, rot.PublicJWK.Kid, creds.Key.KeyID())
	}
	if !errors.Is(refreshErr, agent.ErrCredentialsChanged) {
		t.Errorf("Refresh whose key was rotated away = %v, want ErrCredentialsChanged", refreshErr)
	}
	resp, err := now.Client(nil).Get(svc.URL() + "/whoami")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("signed /whoami after the race: %d, want 200", resp.StatusCode)
	}
}

// failingService answers every directory refresh 503 and counts them.
func failingService(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		writeErr(w, http.StatusServiceUnavailable, "unavailable", "down for maintenance")
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// Failed refreshes are recorded in the credentials file and put the next
// off: one minute after the first, doubling, never more than an hour; a
// record from the future or a garbled one is ignored; a success clears it.
func TestRefreshBackoff(t *testing.T) {
	t.Parallel()
	svc := newFakeService(t)
	down, tries := failingService(t)
	dir := t.TempDir()
	path := filepath.Join(dir, ".env")
	getenv := envOf(nil)
	start := time.Now().Truncate(time.Second)
	initSigned(t, svc, dir, getenv, start)
	at := start.Add(agent.DefaultDirectoryValidity/2 + time.Hour) // due
	opts := func(now time.Time, host string) agent.RefreshOptions {
		return agent.RefreshOptions{Dir: dir, Getenv: getenv, Hostname: host, Now: func() time.Time { return now }}
	}
	var want time.Duration = time.Minute
	for i := 1; i <= 9; i++ {
		_, did, err := agent.RefreshIfDue(context.Background(), opts(at, down.URL))
		var re *agent.RefreshError
		if did || !errors.As(err, &re) || re.Failures != i || !re.RetryAt.Equal(at.Add(want)) {
			t.Fatalf("failure %d: %v, %v; want a *RefreshError, failure %d, retry after %v", i, did, err, i, want)
		}
		if got := readVar(t, path, agent.EnvDirectoryRefreshFailures); got != strconv.Itoa(i) {
			t.Errorf("failure %d: %s = %q", i, agent.EnvDirectoryRefreshFailures, got)
		}
		n := tries.Load()
		if _, did, err := agent.RefreshIfDue(context.Background(), opts(at.Add(want-time.Second), down.URL)); did || err != nil || tries.Load() != n {
			t.Errorf("failure %d: RefreshIfDue a second before the backoff ends = %v, %v (%d tries); want nothing done", i, did, err, tries.Load()-n)
		}
		at = at.Add(want)
		want = min(2*want, time.Hour)
	}
	if want != time.Hour {
		t.Fatalf("the backoff reached %v, want the 1 h cap", want)
	}

	// A failure recorded in the future (a clock set back, an edited file)
	// does not put the refresh off; neither does a garbled count.
	for _, rec := range []struct{ failures, at string }{
		{"3", strconv.FormatInt(at.Add(24*time.Hour).Unix(), 10)},
		{"many", strconv.FormatInt(at.Unix(), 10)},
		{"-1", strconv.FormatInt(at.Unix(), 10)},
	} {
		f, err := envfile.Read(path)
		if err != nil {
			t.Fatal(err)
		}
		f.Set(agent.EnvDirectoryRefreshFailures, rec.failures)
		f.Set(agent.EnvDirectoryRefreshFailedAt, rec.at)
		if err := f.Write(); err != nil {
			t.Fatal(err)
		}
		n := tries.Load()
		if _, _, err := agent.RefreshIfDue(context.Background(), opts(at, down.URL)); err == nil || tries.Load() != n+1 {
			t.Errorf("record %v: %v after %d tries; want a try despite it", rec, err, tries.Load()-n)
		}
		at = at.Add(2 * time.Hour)
	}

	// A success clears the record; the rest of the file is kept.
	if _, did, err := agent.RefreshIfDue(context.Background(), opts(at, "")); !did || err != nil {
		t.Fatalf("RefreshIfDue against the service = %v, %v", did, err)
	}
	f, _ := envfile.Read(path)
	for _, name := range []string{agent.EnvDirectoryRefreshFailures, agent.EnvDirectoryRefreshFailedAt} {
		if v, ok := f.Get(name); ok {
			t.Errorf("%s = %q after a success, want it removed", name, v)
		}
	}
	if v, _ := f.Get(agent.EnvUID); v == "" {
		t.Error("AGENT_UID lost")
	}
}

// Init and Rotate hold the credentials file's lock: while another holder
// has it they send nothing and write nothing, and give up when their
// context ends.
func TestInitAndRotateTakeTheLock(t *testing.T) {
	t.Parallel()
	svc := newFakeService(t)
	dir := t.TempDir()
	path := filepath.Join(dir, ".env")
	getenv := envOf(nil)
	initSigned(t, svc, dir, getenv, time.Now())
	before, _ := os.ReadFile(path)
	unlock, err := envfile.Lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	svc.mu.Lock()
	n := len(svc.requests)
	svc.mu.Unlock()
	for name, run := range map[string]func(ctx context.Context) error{
		"Init": func(ctx context.Context) error {
			_, err := agent.Init(ctx, agent.InitOptions{Dir: dir, Getenv: getenv, Hostname: svc.URL()})
			return err
		},
		"Rotate": func(ctx context.Context) error {
			_, err := agent.Rotate(ctx, agent.RotateOptions{Dir: dir, Getenv: getenv})
			return err
		},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		if err := run(ctx); !errors.Is(err, envfile.ErrLocked) {
			t.Errorf("%s while the file is locked = %v, want envfile.ErrLocked", name, err)
		}
		cancel()
	}
	svc.mu.Lock()
	sent := len(svc.requests) - n
	svc.mu.Unlock()
	if sent != 0 {
		t.Errorf("%d requests sent while the file was locked, want none", sent)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("the credentials file changed while locked")
	}
}
