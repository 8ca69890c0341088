package refserver_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

// skewedDB is db as seen by a machine whose clock is off by skew: gorm
// dates what it writes (created_at, updated_at) with that clock.
func skewedDB(db *gorm.DB, skew time.Duration) *gorm.DB {
	return db.Session(&gorm.Session{NowFunc: func() time.Time { return time.Now().Add(skew).UTC() }})
}

// TestChangeLogPruneIgnoresAppClocks: rows of the change log are dated
// and pruned by the database's clock alone. An operator's machine whose
// clock is two hours behind revokes a key (the row it writes would look
// two hours old to a correct clock), and an instance whose clock is off
// either way prunes the log at its first read; an instance that caches
// the revoked key still reads the row and refuses the key.
func TestChangeLogPruneIgnoresAppClocks(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		reader := newTestEnvConfig(t, db, "", refserver.ManualKeySync)
		kr := reader.srv.KeySource()
		for i, skew := range []time.Duration{-2 * time.Hour, 2 * time.Hour} {
			key := signertest.Key(byte(150 + i))
			uid := reader.register(key)
			if !kr.SyncChanges(ctx) {
				t.Fatal("reader: SyncChanges failed")
			}
			if r := reader.send(reader.whoamiReq(http.MethodGet, uid, key)); r.status != http.StatusOK {
				t.Fatalf("skew %v: whoami before the revocation: %d %s", skew, r.status, r.body)
			}

			// The operator's machine, its clock skewed, revokes the key.
			if _, changed, err := store.New(skewedDB(db, skew)).RevokeKey(ctx, uid, key.KeyID(), "test operator"); err != nil || !changed {
				t.Fatalf("skew %v: RevokeKey: changed %v, %v", skew, changed, err)
			}
			// Rows this machine (the database's) dated 2 h and 30 min ago:
			// the prune removes the first only.
			now := time.Now().UTC()
			old, recent := fmt.Sprint("old-", i), fmt.Sprint("recent-", i)
			for kid, at := range map[string]time.Time{old: now.Add(-2 * time.Hour), recent: now.Add(-30 * time.Minute)} {
				if err := db.Create(&store.KeyChange{Kid: kid, AgentUID: uid, Change: "revoke", Actor: "test", CreatedAt: at}).Error; err != nil {
					t.Fatal(err)
				}
			}
			// A fresh instance, its clock (the server's and gorm's) skewed too:
			// its first complete read of the log prunes.
			pruner := reader.sibling(skewedDB(db, skew), func(c *refserver.Config) {
				c.Now = func() time.Time { return time.Now().Add(skew) }
				refserver.ManualKeySync(c)
			})
			if !pruner.srv.KeySource().SyncChanges(ctx) {
				t.Fatal("pruner: SyncChanges failed")
			}
			for kid, want := range map[string]int64{key.KeyID(): 1, old: 0, recent: 1} {
				var n int64
				if err := db.Model(&store.KeyChange{}).Where("kid = ?", kid).Count(&n).Error; err != nil {
					t.Fatal(err)
				}
				if n != want {
					t.Errorf("skew %v: %d rows of the change log name %s after the prune, want %d", skew, n, kid, want)
				}
			}

			if !kr.SyncChanges(ctx) {
				t.Fatal("reader: SyncChanges failed")
			}
			r := reader.send(reader.whoamiReq(http.MethodGet, uid, key))
			if r.status != http.StatusUnauthorized {
				t.Errorf("skew %v: whoami with the revoked key after the prune: %d, want 401 revoked_key (the cached key outlived its revocation)", skew, r.status)
			} else if code := r.errorCode(t); code != "revoked_key" {
				t.Errorf("skew %v: whoami with the revoked key after the prune: %d %q, want 401 revoked_key (the cached key outlived its revocation)", skew, r.status, code)
			}
		}
	})
}
