package keyfetch_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestEmptyAnswerDropsKeysPromptly: a directory that answers 200 with no
// key (its only key revoked, its agent disabled by an operator) takes the
// cached keys away at the next refresh, within the cache lifetime, with or
// without RequireSignedDirectories: an empty set grants nothing, so it
// needs no signature. A 404, a 5xx, a dropped connection, or an empty set
// whose directory signature fails, are failed refreshes (an outage, or
// someone who cannot sign): the last good set keeps serving within the
// stale window. Once the keys are back, the agent is back.
func TestEmptyAnswerDropsKeysPromptly(t *testing.T) {
	t.Parallel()
	k1 := testPrivate(1)
	tests := []struct {
		name   string
		answer func(clk *clock) http.HandlerFunc
		want   string // Key(k1) once the cached set has expired
	}{
		{"200 {\"keys\":[]}", func(*clock) http.HandlerFunc { return serveKeys("max-age=60", "") }, "unknown"},
		{"200 no usable key", func(*clock) http.HandlerFunc {
			return serveBody(signer.DirectoryMediaType, "max-age=60", "", `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`)
		}, "unknown"},
		{"404", func(*clock) http.HandlerFunc { return serveStatus(http.StatusNotFound) }, "ok"},
		{"410", func(*clock) http.HandlerFunc { return serveStatus(http.StatusGone) }, "ok"},
		{"503", func(*clock) http.HandlerFunc { return serveStatus(http.StatusServiceUnavailable) }, "ok"},
		{"connection dropped", func(*clock) http.HandlerFunc {
			return func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }
		}, "ok"},
		{"empty set with a failing signature", func(clk *clock) http.HandlerFunc {
			return signedDirectory(clk, `{"keys":[]}`, edSig(k1))
		}, "ok"},
	}
	for _, requireSigned := range []bool{false, true} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/RequireSignedDirectories=%v", tt.name, requireSigned), func(t *testing.T) {
				t.Parallel()
				clk := newClock()
				good := signedDirectory(clk, jwksOf(k1.Public), with(edSig(k1), func(s *dirSig) { s.expires = 24 * time.Hour }))
				srv := newDirServer(t, good)
				cfg := testConfig(clk)
				cfg.RequireSignedDirectories = requireSigned
				f := keyfetch.New(cfg)
				ctx := context.Background()
				set := agentSet(t, srv.URL)
				key := func() string {
					_, err := f.Key(ctx, set, k1.Public.Thumbprint)
					return errKind(err)
				}
				if got := key(); got != "ok" {
					t.Fatalf("Key before the change: %s", got)
				}
				srv.set(tt.answer(clk))
				if got := key(); got != "ok" {
					t.Errorf("Key while the set is fresh: %s, want ok (cached)", got)
				}
				clk.Advance(61 * time.Second) // past max-age=60
				if got := key(); got != tt.want {
					t.Errorf("Key once the set expired: %s, want %s (stale window %v)", got, tt.want, keyfetch.DefaultMaxStale)
				}
				if tt.want == "unknown" {
					if keys, err := f.Keys(ctx, set); err != nil || len(keys) != 0 {
						t.Errorf("Keys after the empty answer = %d keys, %v; want none, no error", len(keys), err)
					}
				}
				srv.set(good)
				clk.Advance(keyfetch.DefaultNegativeTTL + time.Second)
				if got := key(); got != "ok" {
					t.Errorf("Key once the keys are back: %s, want ok", got)
				}
			})
		}
	}
}

// TestSignedSetLivesNoLongerThanItsSignatures: with
// RequireSignedDirectories, a key set is used no longer than the directory
// signatures that vouch for it (the earliest expires, plus Skew), whatever
// the response's max-age, a 304 that would renew it or the stale window:
// past them the same response would be refused. Without the option an
// unsigned set is acceptable anyway, and max-age and MaxStale decide.
func TestSignedSetLivesNoLongerThanItsSignatures(t *testing.T) {
	t.Parallel()
	k1 := testPrivate(1)
	const skew = 5 * time.Second
	const validity = 20 * time.Second // the signature's expires - created; max-age is 60
	for _, requireSigned := range []bool{false, true} {
		t.Run(fmt.Sprintf("RequireSignedDirectories=%v", requireSigned), func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			// Phase 0: one signed response (made now, expiring in 20 s),
			// ETag "v1", 304 to a request naming it; phase 1: down; phase
			// 2: a response signed afresh, ETag "v2".
			sig := with(edSig(k1), func(s *dirSig) { s.expires = validity })
			old := signedDirectory(signertest.NewClock(clk.Now()), jwksOf(k1.Public), sig)
			renewed := signedDirectory(clk, jwksOf(k1.Public), sig)
			var phase atomic.Int32
			srv := newDirServer(t, func(w http.ResponseWriter, r *http.Request) {
				etag := map[int32]string{0: `"v1"`, 2: `"v2"`}[phase.Load()]
				switch {
				case etag == "":
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				case r.Header.Get("If-None-Match") == etag:
					w.Header().Set("Cache-Control", "max-age=60")
					w.Header().Set("ETag", etag)
					w.WriteHeader(http.StatusNotModified)
					return
				}
				w.Header().Set("ETag", etag)
				if etag == `"v1"` {
					old(w, r)
				} else {
					renewed(w, r)
				}
			})
			cfg := testConfig(clk)
			cfg.RequireSignedDirectories = requireSigned
			cfg.Skew = skew
			f := keyfetch.New(cfg)
			ctx := context.Background()
			set := agentSet(t, srv.URL)
			key := func() error {
				_, err := f.Key(ctx, set, k1.Public.Thumbprint)
				return err
			}
			if err := key(); err != nil {
				t.Fatalf("Key: %v", err)
			}

			clk.Advance(validity + skew - time.Second)
			if err := key(); err != nil {
				t.Errorf("Key before the signature expired: %v", err)
			}
			hits := srv.hits.Load()
			clk.Advance(time.Second) // the signature has expired (with the skew); max-age has not
			err := key()
			switch {
			case requireSigned && !errors.Is(err, keyfetch.ErrUnsignedDirectory):
				t.Errorf("Key past the signature's expiry (the directory answers 304): %v, want ErrUnsignedDirectory", err)
			case requireSigned && srv.hits.Load() != hits+1:
				t.Errorf("past the signature's expiry: %d fetches, want 1 (the set is not fresh any more)", srv.hits.Load()-hits)
			case !requireSigned && err != nil:
				t.Errorf("Key within max-age: %v, want the cached key", err)
			}

			phase.Store(1)
			clk.Advance(61 * time.Second)
			err = key()
			if requireSigned && err == nil {
				t.Error("Key through an outage past the signature's expiry: nil, want an error (no stale serving)")
			}
			if !requireSigned && err != nil {
				t.Errorf("Key through an outage within the stale window: %v, want the stale key", err)
			}

			phase.Store(2)
			clk.Advance(keyfetch.DefaultNegativeTTL)
			if err := key(); err != nil {
				t.Errorf("Key once the directory is signed afresh: %v", err)
			}
		})
	}
}

// TestUnsignedAnswerOnlyTakesKeysAway: with RequireSignedDirectories, an
// unsigned answer that still lists keys (a key revoked among several, a
// rotation whose new directory the agent did not sign) is refused, so it
// adds no key; but the keys it no longer lists stop verifying at once,
// while the others keep serving within the stale window.
func TestUnsignedAnswerOnlyTakesKeysAway(t *testing.T) {
	t.Parallel()
	k1, k2, k3 := testPrivate(1), testPrivate(2), testPrivate(3)
	clk := newClock()
	long := func(k signer.PrivateKey) dirSig {
		return with(edSig(k), func(s *dirSig) { s.expires = 24 * time.Hour })
	}
	srv := newDirServer(t, signedDirectory(clk, jwksOf(k1.Public, k2.Public), long(k1), long(k2)))
	cfg := testConfig(clk)
	cfg.RequireSignedDirectories = true
	f := keyfetch.New(cfg)
	ctx := context.Background()
	set := agentSet(t, srv.URL)
	key := func(k signer.PrivateKey) error {
		_, err := f.Key(ctx, set, k.Public.Thumbprint)
		return err
	}
	for _, k := range []signer.PrivateKey{k1, k2} {
		if err := key(k); err != nil {
			t.Fatalf("Key: %v", err)
		}
	}
	// k1 gone, k3 added, unsigned: a renamed kid does not keep a key either.
	renamed := k2.Public
	renamed.JWK.Kid = "renamed"
	srv.set(serveKeys("max-age=60", "", k2.Public, k3.Public))
	clk.Advance(61 * time.Second)
	if err := key(k1); !errors.Is(err, keyfetch.ErrUnsignedDirectory) {
		t.Errorf("Key(k1), no longer listed: %v, want the refused refresh (ErrUnsignedDirectory)", err)
	}
	if err := key(k2); err != nil {
		t.Errorf("Key(k2), still listed: %v, want the stale key", err)
	}
	if err := key(k3); !errors.Is(err, keyfetch.ErrUnsignedDirectory) {
		t.Errorf("Key(k3), listed unsigned: %v, want ErrUnsignedDirectory", err)
	}
	srv.set(serveKeys("max-age=60", "", renamed))
	clk.Advance(keyfetch.DefaultNegativeTTL)
	if err := key(k2); !errors.Is(err, keyfetch.ErrUnsignedDirectory) {
		t.Errorf("Key(k2), listed unsigned under another kid: %v, want ErrUnsignedDirectory", err)
	}
	// A signed answer restores what it vouches for.
	srv.set(signedDirectory(clk, jwksOf(k1.Public, k3.Public), long(k1), long(k3)))
	clk.Advance(keyfetch.DefaultNegativeTTL)
	for _, k := range []signer.PrivateKey{k1, k3} {
		if err := key(k); err != nil {
			t.Errorf("Key after a signed answer: %v", err)
		}
	}
}
