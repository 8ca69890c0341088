package store_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
)

// TestServiceKeyOnceForEveryInstance: on a fresh database ServiceKey
// finds no key; several instances (each its own connection pool) calling
// EnsureServiceKey at once all get the one key stored, which signs and
// verifies; its formatting shows no private part.
func TestServiceKeyOnceForEveryInstance(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			u := b.URL(t)
			ctx := context.Background()
			dbtest.Migrated(t, u)
			const instances = 6
			dbs := make([]*store.DB, instances)
			for i := range dbs {
				db, err := store.Open(ctx, u)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				dbs[i] = db
			}
			if _, err := dbs[0].ServiceKey(ctx); !errors.Is(err, store.ErrNoServiceKey) {
				t.Fatalf("ServiceKey on a fresh database: %v, want ErrNoServiceKey", err)
			}
			keys := make([]signer.PrivateKey, instances)
			errs := make([]error, instances)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i, db := range dbs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					keys[i], errs[i] = db.EnsureServiceKey(ctx)
				}()
			}
			close(start)
			wg.Wait()
			for i := range keys {
				if errs[i] != nil {
					t.Fatalf("instance %d: EnsureServiceKey: %v", i, errs[i])
				}
				if keys[i].Public.Thumbprint != keys[0].Public.Thumbprint || !keys[i].CanSign() {
					t.Errorf("instance %d got key %s, instance 0 got %s: want one key for all", i, keys[i].Public.Thumbprint, keys[0].Public.Thumbprint)
				}
			}
			var n int64
			if err := dbs[0].Gorm().Table("service_keys").Count(&n).Error; err != nil || n != 1 {
				t.Errorf("service_keys holds %d rows (%v), want 1", n, err)
			}
			again, err := dbs[1].ServiceKey(ctx)
			if err != nil || again.Public.Thumbprint != keys[0].Public.Thumbprint {
				t.Errorf("ServiceKey after = %s, %v; want %s", again.Public.Thumbprint, err, keys[0].Public.Thumbprint)
			}
			msg := []byte("event")
			if len(again.Key) == 0 || keys[0].Public.Verify(signer.AlgEd25519, msg, ed25519.Sign(again.Key, msg)) != nil {
				t.Errorf("the stored key does not sign for the key handed out")
			}
			d := again.JWK().D
			for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
				if s := fmt.Sprintf(f, again); d == "" || strings.Contains(s, d) {
					t.Errorf("fmt %s of the service key shows its private part (or it has none): %s", f, s)
				}
			}
		})
	}
}
