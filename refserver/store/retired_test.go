package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/store"
)

// TestDeleteRetiresKeys: deleting agents keeps every kid they held (one
// rotated away, one revoked, one active) retired: its status is revoked
// (since its revocation, or since the deletion), a registration of it
// (spending no invitation) and a rotation to it are ErrKeyRetired and
// change nothing; the audit trail and the change log record the deletion
// as before, and a kid never seen is still ErrNoSuchKey.
func TestDeleteRetiresKeys(t *testing.T) {
	t.Parallel()
	eachQueryFixture(t, func(t *testing.T, f *queryFixture) {
		ctx := context.Background()
		uid, k1 := f.agent(90, time.Now(), "", false)
		k2 := f.rotate(uid, k1, 91)
		if _, _, err := f.db.RevokeKey(ctx, uid, k2, "stolen"); err != nil {
			t.Fatal(err)
		}
		revokedAt := map[string]time.Time{}
		for _, kid := range []string{k1, k2} {
			st, err := f.db.KeyStatus(ctx, kid)
			if err != nil || st.RevokedAt == nil {
				t.Fatalf("KeyStatus(%s) before: %+v %v", kid, st, err)
			}
			revokedAt[kid] = *st.RevokedAt
		}
		other, k3 := f.agent(92, time.Now(), "", false)
		keeper, k4 := f.agent(93, time.Now(), "", false)
		time.Sleep(10 * time.Millisecond)
		before := time.Now()
		if n, err := f.db.DeleteAgents(ctx, []string{uid, other}); err != nil || n != 2 {
			t.Fatalf("DeleteAgents = %d, %v", n, err)
		}
		for _, kid := range []string{k1, k2, k3} {
			st, err := f.db.KeyStatus(ctx, kid)
			if err != nil || st.Status != store.KeyRevoked || st.RevokedAt == nil {
				t.Errorf("KeyStatus(%s) after delete: %+v %v, want revoked", kid, st, err)
				continue
			}
			if want, ok := revokedAt[kid]; ok && !st.RevokedAt.Equal(want) {
				t.Errorf("KeyStatus(%s).RevokedAt = %v, want its revocation %v", kid, st.RevokedAt, want)
			}
			if _, ok := revokedAt[kid]; !ok && st.RevokedAt.Before(before.Add(-time.Second)) {
				t.Errorf("KeyStatus(%s).RevokedAt = %v, want the deletion (after %v)", kid, st.RevokedAt, before)
			}
		}
		if _, err := f.db.KeyStatus(ctx, mustKid(94)); !errors.Is(err, store.ErrNoSuchKey) {
			t.Errorf("a kid never seen: %v, want ErrNoSuchKey", err)
		}

		token, _, err := f.db.CreateInvite(ctx, "", 5, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for i, seed := range []int{90, 91, 92} {
			kid, jwk := key(seed)
			fresh := fmt.Sprintf("agent-%024x", 0x2000+i)
			err := f.db.CreateAgent(ctx, store.NewAgent{UID: fresh, Kid: kid, JWK: jwk, Now: time.Now().UTC(), Invite: token})
			if !errors.Is(err, store.ErrKeyRetired) {
				t.Errorf("CreateAgent with retired %s: %v, want ErrKeyRetired", kid, err)
			}
			if ok, err := f.db.HasAgent(ctx, fresh); err != nil || ok {
				t.Errorf("CreateAgent with retired %s left agent %s (%v)", kid, fresh, err)
			}
			kid2, jwk2 := key(seed)
			_, err = f.db.Rotate(ctx, store.Rotation{UID: keeper, SigningKid: k4, Kid: kid2, JWK: jwk2, Proven: true, Now: time.Now().UTC()})
			if !errors.Is(err, store.ErrKeyRetired) {
				t.Errorf("Rotate to retired %s: %v, want ErrKeyRetired", kid, err)
			}
		}
		if list, err := f.db.ListInvites(ctx); err != nil || len(list) != 1 || list[0].Used != 0 {
			t.Errorf("invitation after refused registrations: %+v %v, want none spent", list, err)
		}
		if st, err := f.db.KeyStatus(ctx, k4); err != nil || st.Status != store.KeyActive {
			t.Errorf("the keeper's key after refused rotations: %+v %v, want active", st, err)
		}
		if got := f.uids(store.AgentQuery{}); len(got) != 1 || got[0] != keeper {
			t.Errorf("agents: %v, want [%s]", got, keeper)
		}
		rows, err := f.db.Audit(ctx, store.AuditQuery{Action: store.ActionDelete})
		if err != nil || len(rows) != 2 {
			t.Errorf("audit rows of the deletion: %d (%v), want 2", len(rows), err)
		}
		var changes int64
		if err := f.db.Gorm().Model(&store.KeyChange{}).Where("change = ?", store.ChangeDelete).Count(&changes).Error; err != nil || changes != 3 {
			t.Errorf("change log: %d delete rows (%v), want 3", changes, err)
		}
	})
}

// mustKid is the kid of the test key seed.
func mustKid(seed int) string {
	kid, _ := key(seed)
	return kid
}

// TestDeleteRetiresKeysConcurrently: a registration of a key racing the
// deletion of the agent holding it never ends with the key registered
// anew: it answers ErrKeyRegistered (it ran first) or ErrKeyRetired,
// never success, on PostgreSQL where the two transactions overlap too.
func TestDeleteRetiresKeysConcurrently(t *testing.T) {
	t.Parallel()
	eachQueryFixture(t, func(t *testing.T, f *queryFixture) {
		ctx := context.Background()
		for i := 0; i < 20; i++ {
			seed := 100 + i
			uid, kid := f.agent(seed, time.Now(), "", false)
			_, jwk := key(seed)
			var wg sync.WaitGroup
			var createErr, deleteErr error
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, deleteErr = f.db.DeleteAgents(ctx, []string{uid})
			}()
			go func() {
				defer wg.Done()
				// As registerKey does: retry a lost race on the kid.
				for try := 0; try < 20; try++ {
					createErr = f.db.CreateAgent(ctx, store.NewAgent{UID: fmt.Sprintf("agent-%024x", 0x3000+i), Kid: kid, JWK: jwk, Now: time.Now().UTC()})
					if !errors.Is(createErr, store.ErrKeyRegistered) {
						return
					}
				}
			}()
			wg.Wait()
			if deleteErr != nil {
				t.Fatal(deleteErr)
			}
			if !errors.Is(createErr, store.ErrKeyRegistered) && !errors.Is(createErr, store.ErrKeyRetired) {
				t.Fatalf("round %d: CreateAgent racing the deletion: %v, want ErrKeyRegistered or ErrKeyRetired", i, createErr)
			}
			if st, err := f.db.KeyStatus(ctx, kid); err != nil || st.Status != store.KeyRevoked {
				t.Fatalf("round %d: status after: %+v %v, want revoked", i, st, err)
			}
		}
	})
}
