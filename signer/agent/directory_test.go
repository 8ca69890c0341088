package agent_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/signer/agent"
	"github.com/agentid/agentid/signer/envfile"
)

func TestRefreshDue(t *testing.T) {
	t.Parallel()
	created := time.Unix(1_800_000_000, 0)
	expires := created.Add(48 * time.Hour)
	tests := []struct {
		at   time.Duration
		want bool
	}{{0, false}, {24*time.Hour - time.Second, false}, {24 * time.Hour, true}, {47 * time.Hour, true}, {72 * time.Hour, true}}
	for _, tt := range tests {
		if got := agent.RefreshDue(created, expires, created.Add(tt.at)); got != tt.want {
			t.Errorf("RefreshDue at +%v = %v, want %v", tt.at, got, tt.want)
		}
	}
}

func readVar(t *testing.T, path, name string) string {
	t.Helper()
	f, err := envfile.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := f.Get(name)
	return v
}

// Init signs the directory and records the validity; RefreshIfDue does
// nothing before half of it, refreshes after, and never acts for an agent
// with no record (made elsewhere).
func TestInitSignsDirectoryAndRefreshIfDue(t *testing.T) {
	t.Parallel()
	svc := newFakeService(t)
	dir := t.TempDir()
	path := filepath.Join(dir, ".env")
	ctx := context.Background()
	getenv := envOf(nil)
	start := time.Now().Truncate(time.Second)
	res, err := agent.Init(ctx, agent.InitOptions{Dir: dir, Hostname: svc.URL(), Getenv: getenv, Now: func() time.Time { return start }})
	if err != nil || res.DirectoryError != nil {
		t.Fatalf("Init: %v, directory: %v", err, res.DirectoryError)
	}
	if !res.Directory.Expires.Equal(start.Add(agent.DefaultDirectoryValidity)) {
		t.Errorf("directory expires %v, want %v", res.Directory.Expires, start.Add(agent.DefaultDirectoryValidity))
	}
	if got := readVar(t, path, agent.EnvDirectorySignedUntil); got != strconv.FormatInt(start.Add(agent.DefaultDirectoryValidity).Unix(), 10) {
		t.Errorf("%s = %q", agent.EnvDirectorySignedUntil, got)
	}
	count := svc.directoryRefreshes
	if n := count(); n != 1 {
		t.Fatalf("%d refresh requests after Init, want 1", n)
	}
	half := start.Add(agent.DefaultDirectoryValidity / 2)
	_, did, err := agent.RefreshIfDue(ctx, agent.RefreshOptions{Dir: dir, Getenv: getenv, Now: func() time.Time { return half.Add(-time.Second) }})
	if err != nil || did || count() != 1 {
		t.Errorf("RefreshIfDue before half = %v, %v (%d requests); want nothing done", did, err, count())
	}
	later := half.Add(time.Hour)
	rr, did, err := agent.RefreshIfDue(ctx, agent.RefreshOptions{Dir: dir, Getenv: getenv, Now: func() time.Time { return later }})
	if err != nil || !did || count() != 2 {
		t.Fatalf("RefreshIfDue past half = %v, %v (%d requests); want a refresh", did, err, count())
	}
	if !rr.Expires.Equal(later.Truncate(time.Second).Add(agent.DefaultDirectoryValidity)) {
		t.Errorf("refreshed until %v", rr.Expires)
	}
	if got := readVar(t, path, agent.EnvDirectorySignedAt); got != strconv.FormatInt(later.Unix(), 10) {
		t.Errorf("%s = %q after the refresh, want %d", agent.EnvDirectorySignedAt, got, later.Unix())
	}

	// Rotation hands over the new key's signature and records it.
	rot, err := agent.Rotate(ctx, agent.RotateOptions{Dir: dir, Getenv: getenv})
	if err != nil || rot.DirectorySignedUntil.IsZero() {
		t.Fatalf("Rotate = %+v, %v", rot, err)
	}
	// The fake checks the refresh against the rotated key.
	if _, err := agent.Refresh(ctx, agent.RefreshOptions{Dir: dir, Getenv: getenv}); err != nil {
		t.Errorf("Refresh after Rotate: %v", err)
	}

	// No record: nothing is done, even far in the future.
	b, _ := os.ReadFile(path)
	var kept []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "AGENT_DIRECTORY_") {
			kept = append(kept, l)
		}
	}
	writeFile(t, path, strings.Join(kept, "\n"))
	n := count()
	if _, did, err := agent.RefreshIfDue(ctx, agent.RefreshOptions{Dir: dir, Getenv: getenv, Now: func() time.Time { return later.Add(365 * 24 * time.Hour) }}); err != nil || did || count() != n {
		t.Errorf("RefreshIfDue without a record = %v, %v; want nothing done", did, err)
	}
}

// RefreshTransport refreshes, in the background of a call, once the
// recorded signature is past half its validity, once; a failed refresh is
// reported and not tried again before RetryAfter; the calls go through
// either way.
func TestRefreshTransport(t *testing.T) {
	t.Parallel()
	svc := newFakeService(t)
	dir := t.TempDir()
	getenv := envOf(nil)
	start := time.Now().Truncate(time.Second)
	_, creds := initSigned(t, svc, dir, getenv, start)
	var clock atomic.Int64
	clock.Store(start.Unix())
	now := func() time.Time { return time.Unix(clock.Load(), 0) }
	refreshes := svc.directoryRefreshes
	var mu sync.Mutex
	var errs []error
	onError := func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
	nerrs := func() int { mu.Lock(); defer mu.Unlock(); return len(errs) }
	tr := &agent.RefreshTransport{Base: creds.Transport(nil), Options: agent.RefreshOptions{Dir: dir, Getenv: getenv, Now: now},
		OnError: onError}
	t.Cleanup(func() { tr.Close() })
	client := &http.Client{Transport: tr}
	call := func() {
		t.Helper()
		resp, err := client.Get(svc.URL() + "/whoami")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("whoami: %d", resp.StatusCode)
		}
		if rt, ok := client.Transport.(*agent.RefreshTransport); ok {
			if err := rt.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	call()
	if n := refreshes(); n != 1 {
		t.Fatalf("%d refreshes before half the validity, want only Init's", n)
	}
	clock.Add(int64(agent.DefaultDirectoryValidity/2/time.Second) + 1)
	call()
	call()
	if n := refreshes(); n != 2 {
		t.Errorf("%d refreshes after two calls past half the validity, want 2 (Init's and one)", n)
	}

	// A refresh that fails: reported once, retried after RetryAfter.
	bad := &agent.RefreshTransport{Base: creds.Transport(nil), RetryAfter: time.Hour,
		Options: agent.RefreshOptions{Dir: dir, Getenv: getenv, Now: now, Hostname: "http://127.0.0.1:1"},
		OnError: onError}
	t.Cleanup(func() { bad.Close() })
	client.Transport = bad
	clock.Add(int64(agent.DefaultDirectoryValidity / time.Second))
	call()
	call()
	if n := nerrs(); n != 1 {
		t.Errorf("%d errors reported, want 1: %v", n, errs)
	}
	clock.Add(3600)
	call()
	if n := nerrs(); n != 2 {
		t.Errorf("%d errors reported after RetryAfter, want 2", n)
	}
}

// RefreshTransport falls due at the instant RefreshDue does (one formula):
// not a second before half the validity, and at half exactly.
func TestRefreshTransportDueWithRefreshDue(t *testing.T) {
	t.Parallel()
	svc := newFakeService(t)
	dir := t.TempDir()
	getenv := envOf(nil)
	res, creds := initSigned(t, svc, dir, getenv, time.Now().Truncate(time.Second))
	created, expires := res.Directory.Created, res.Directory.Expires
	half := created.Add(expires.Sub(created) / 2)
	var clock atomic.Int64
	tr := &agent.RefreshTransport{Base: creds.Transport(nil),
		Options: agent.RefreshOptions{Dir: dir, Getenv: getenv, Now: func() time.Time { return time.Unix(clock.Load(), 0) }}}
	t.Cleanup(func() { tr.Close() })
	client := &http.Client{Transport: tr}
	refreshes := svc.directoryRefreshes
	for _, tt := range []struct {
		name string
		at   time.Time
		want int // refreshes so far, Init's included
	}{
		{"a second before half", half.Add(-time.Second), 1},
		{"at half", half, 2},
	} {
		clock.Store(tt.at.Unix())
		resp, err := client.Get(svc.URL() + "/whoami")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if err := tr.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		due := agent.RefreshDue(created, expires, tt.at)
		if got := refreshes(); got != tt.want {
			t.Errorf("%s: %d refreshes, want %d (RefreshDue = %v)", tt.name, got, tt.want, due)
		}
		if wantDue := tt.want == 2; due != wantDue {
			t.Errorf("%s: RefreshDue = %v, want %v", tt.name, due, wantDue)
		}
	}
}

// initSigned makes an agent of svc in dir at start, its directory signed,
// and loads its credentials.
func initSigned(t *testing.T, svc *fakeService, dir string, getenv func(string) string, start time.Time) (agent.InitResult, agent.Credentials) {
	t.Helper()
	res, err := agent.Init(context.Background(), agent.InitOptions{Dir: dir, Hostname: svc.URL(), Getenv: getenv, Now: func() time.Time { return start }})
	if err != nil || res.DirectoryError != nil {
		t.Fatalf("Init: %v %v", err, res.DirectoryError)
	}
	creds, err := agent.Load(agent.LoadOptions{Dir: dir, Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	return res, creds
}
