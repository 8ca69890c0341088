package agent_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentid/agentid/signer/agent"
	"github.com/agentid/agentid/signer/envfile"
)

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
