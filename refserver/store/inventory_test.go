package store_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
)

// TestCountInventory: agents by state (every state present, an agent in
// the first that applies: rejected > pending > disabled > no_keys >
// active) and keys active or revoked, on PostgreSQL and SQLite.
func TestCountInventory(t *testing.T) {
	ctx := context.Background()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			db := store.New(dbtest.Migrated(t, b.URL(t)))
			check := func(when string, agents, keys map[string]int64) {
				t.Helper()
				inv, err := db.CountInventory(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !maps.Equal(inv.Agents, agents) || !maps.Equal(inv.Keys, keys) {
					t.Errorf("%s: agents %v, keys %v; want %v, %v", when, inv.Agents, inv.Keys, agents, keys)
				}
				// The same states as the operator's filtered list.
				for _, state := range store.AgentStates() {
					list, _, err := db.Agents(ctx, store.AgentQuery{State: state, Limit: store.MaxAgentPage})
					if err != nil || int64(len(list)) != inv.Agents[state] {
						t.Errorf("%s: Agents(state %s) lists %d (%v), CountInventory counts %d", when, state, len(list), err, inv.Agents[state])
					}
				}
			}
			check("empty", map[string]int64{"active": 0, "no_keys": 0, "disabled": 0, "pending": 0, "rejected": 0}, map[string]int64{"active": 0, "revoked": 0})

			uid := func(i int) string { return fmt.Sprintf("agent-%024d", i) }
			for i := 1; i <= 7; i++ {
				k := signertest.Key(byte(0x40 + i))
				if err := db.CreateAgent(ctx, store.NewAgent{UID: uid(i), Kid: k.KeyID(), JWK: k.Public.JWK.MarshalPublic(), Now: time.Now().UTC()}); err != nil {
					t.Fatal(err)
				}
			}
			if _, _, err := db.SetAgentDisabled(ctx, uid(2), true, "test"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := db.RevokeKey(ctx, uid(3), signertest.Key(0x43).KeyID(), "test"); err != nil {
				t.Fatal(err)
			}
			// Review states as approval mode leaves them; agent 7 is
			// rejected and disabled: rejected wins.
			g := db.Gorm()
			for i, review := range map[int]string{4: store.ReviewPending, 5: store.ReviewRejected, 7: store.ReviewRejected} {
				if err := g.Exec("UPDATE agents SET review = ? WHERE uid = ?", review, uid(i)).Error; err != nil {
					t.Fatal(err)
				}
			}
			if _, _, err := db.SetAgentDisabled(ctx, uid(7), true, "test"); err != nil {
				t.Fatal(err)
			}
			check("after changes", map[string]int64{"active": 2, "no_keys": 1, "disabled": 1, "pending": 1, "rejected": 2},
				map[string]int64{"active": 6, "revoked": 1})
		})
	}
}
