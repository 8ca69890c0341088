package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	count := func() int {
		svc.mu.Lock()
		defer svc.mu.Unlock()
		n := 0
		for _, r := range svc.requests {
			if strings.HasSuffix(r.URL.Path, "/directory-signatures") {
				n++
			}
		}
		return n
	}
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
