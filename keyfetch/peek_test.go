package keyfetch_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
)

// TestKeyCached: KeyCached says true exactly when Key answers without
// fetching, counted at the directory server, through each state of a cache
// entry.
func TestKeyCached(t *testing.T) {
	t.Parallel()
	c := newClock()
	k := testKey(1)
	srv := newDirServer(t, serveKeys("max-age=60", "", k))
	f := keyfetch.New(testConfig(c))
	set := agentSet(t, srv.URL)
	ctx := context.Background()

	step := func(name string, keyID string, wantCached bool) {
		t.Helper()
		got := f.KeyCached(set, keyID)
		before := srv.hits.Load()
		_, _ = f.Key(ctx, set, keyID)
		fetched := srv.hits.Load() != before
		if got != wantCached || fetched == got {
			t.Errorf("%s: KeyCached = %v, Key fetched = %v; want cached %v (and a fetch exactly when not cached)", name, got, fetched, wantCached)
		}
	}
	step("empty cache", k.Thumbprint, false)
	step("fresh entry holding the key", k.Thumbprint, true)
	step("unknown keyid forces one refresh", testKey(2).Thumbprint, false)
	step("unknown keyid within the cooldown", testKey(3).Thumbprint, true)
	c.Advance(2 * time.Minute)
	step("expired entry", k.Thumbprint, false)

	srv.set(serveStatus(http.StatusBadGateway))
	c.Advance(2 * time.Hour)
	step("expired, directory down", k.Thumbprint, false)
	step("failure answered again", k.Thumbprint, true)

	untrusted := agentSet(t, "https://agent.untrusted.example")
	if !f.KeyCached(untrusted, k.Thumbprint) {
		t.Error("KeyCached = false for a key set the trust policy refuses, want true (Key refuses it without I/O)")
	}
	if f.KeyCached(signer.KeySet{}, "x") != true {
		t.Error("KeyCached = false for the zero key set, want true")
	}
}
