package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

// queryFixture is a migrated database for the operator's queries.
type queryFixture struct {
	t  *testing.T
	db *store.DB
	n  int // agents made
}

func eachQueryFixture(t *testing.T, fn func(t *testing.T, f *queryFixture)) {
	t.Helper()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, &queryFixture{t: t, db: store.New(dbtest.Migrated(t, b.URL(t)))})
		})
	}
}

// key returns the i-th test key's kid and public JWK.
func key(i int) (string, []byte) {
	k := signertest.Key(byte(i))
	return k.KeyID(), k.Public.JWK.MarshalPublic()
}

// agent registers a new agent with the key of seed (created at now, with
// invite when not ""), and returns its uid and kid.
func (f *queryFixture) agent(seed int, now time.Time, invite string, pending bool) (string, string) {
	f.t.Helper()
	f.n++
	uid := fmt.Sprintf("agent-%024x", 0x1000+f.n)
	kid, jwk := key(seed)
	if err := f.db.CreateAgent(context.Background(), store.NewAgent{UID: uid, Kid: kid, JWK: jwk, Now: now.UTC(), Invite: invite, Pending: pending}); err != nil {
		f.t.Fatalf("CreateAgent: %v", err)
	}
	return uid, kid
}

// rotate rotates uid from its key from to the key of seed, and returns
// the new kid.
func (f *queryFixture) rotate(uid, from string, seed int) string {
	f.t.Helper()
	kid, jwk := key(seed)
	if _, err := f.db.Rotate(context.Background(), store.Rotation{UID: uid, SigningKid: from, Kid: kid, JWK: jwk, Proven: seed%2 == 0, Now: time.Now().UTC()}); err != nil {
		f.t.Fatalf("Rotate: %v", err)
	}
	return kid
}

// exec runs an UPDATE the store has no method for (yet).
func (f *queryFixture) exec(sql string, args ...any) {
	f.t.Helper()
	if err := f.db.Gorm().Exec(sql, args...).Error; err != nil {
		f.t.Fatal(err)
	}
}

// uids lists the uids q selects, every page, checking each page's size
// and that no uid comes twice.
func (f *queryFixture) uids(q store.AgentQuery) []string {
	f.t.Helper()
	var out []string
	for pages := 0; ; pages++ {
		if pages > 100 {
			f.t.Fatalf("%+v: more than 100 pages", q)
		}
		list, next, err := f.db.Agents(context.Background(), q)
		if err != nil {
			f.t.Fatalf("Agents(%+v): %v", q, err)
		}
		if next != "" && len(list) != q.Limit {
			f.t.Errorf("page of %d with a next page, want %d", len(list), q.Limit)
		}
		for _, a := range list {
			if slices.Contains(out, a.UID) {
				f.t.Errorf("%+v: %s listed twice", q, a.UID)
			}
			if q.State != "" && a.State != q.State {
				f.t.Errorf("%+v: %s is %s", q, a.UID, a.State)
			}
			out = append(out, a.UID)
		}
		if next == "" {
			return out
		}
		q.After = next
	}
}

// TestAgentStates: each of the five states, with their precedence
// (rejected > pending > disabled > no_keys > active), in the list, in
// ShowAgent and as a filter.
func TestAgentStates(t *testing.T) {
	t.Parallel()
	eachQueryFixture(t, func(t *testing.T, f *queryFixture) {
		ctx := context.Background()
		now := time.Now()
		active, _ := f.agent(1, now, "", false)
		noKeys, k2 := f.agent(2, now, "", false)
		if _, _, err := f.db.RevokeKey(ctx, noKeys, k2, "leaked"); err != nil {
			t.Fatal(err)
		}
		disabled, k3 := f.agent(3, now, "", false)
		if _, _, err := f.db.SetAgentDisabled(ctx, disabled, true, "spam"); err != nil {
			t.Fatal(err)
		}
		// Disabled without a key is disabled.
		if _, _, err := f.db.RevokeKey(ctx, disabled, k3, ""); err != nil {
			t.Fatal(err)
		}
		pending, _ := f.agent(4, now, "", true)
		if _, _, err := f.db.SetAgentDisabled(ctx, pending, true, ""); err != nil {
			t.Fatal(err)
		}
		rejected, _ := f.agent(5, now, "", true)
		f.exec("UPDATE agents SET review = ?, review_reason = ?, reviewed_at = ?, disabled_at = ? WHERE uid = ?",
			store.ReviewRejected, "not ours", now.UTC(), now.UTC(), rejected)
		want := map[string]string{active: store.StateActive, noKeys: store.StateNoKeys, disabled: store.StateDisabled,
			pending: store.StatePending, rejected: store.StateRejected}
		list, next, err := f.db.Agents(ctx, store.AgentQuery{})
		if err != nil || next != "" || len(list) != len(want) {
			t.Fatalf("Agents: %d agents, next %q, %v", len(list), next, err)
		}
		for _, a := range list {
			if a.State != want[a.UID] {
				t.Errorf("%s: state %s, want %s", a.UID, a.State, want[a.UID])
			}
			if a.UID == disabled && a.DisabledReason != "spam" || a.UID == rejected && (a.ReviewReason != "not ours" || a.ReviewedAt == nil) {
				t.Errorf("%s: reasons not kept: %+v", a.UID, a)
			}
		}
		for uid, state := range want {
			a, err := f.db.ShowAgent(ctx, uid)
			if err != nil || a.State != state {
				t.Errorf("ShowAgent(%s): %s %v, want %s", uid, a.State, err, state)
			}
			if got := f.uids(store.AgentQuery{State: state, Limit: 2}); !slices.Equal(got, []string{uid}) {
				t.Errorf("state %s lists %v, want [%s]", state, got, uid)
			}
		}
		if _, _, err := f.db.Agents(ctx, store.AgentQuery{State: "enabled"}); !errors.Is(err, store.ErrInvalidQuery) {
			t.Errorf("unknown state: %v, want ErrInvalidQuery", err)
		}
		// ListAgents, as before: disabled means disabled_at is set.
		old, err := f.db.ListAgents(ctx, "", 10, true)
		if err != nil || len(old) != 3 {
			t.Errorf("ListAgents(disabled only): %d, %v; want 3", len(old), err)
		}
	})
}

// TestAgentFilters: created since, by key (active or not, of any state),
// by invitation, alone and together.
func TestAgentFilters(t *testing.T) {
	t.Parallel()
	eachQueryFixture(t, func(t *testing.T, f *queryFixture) {
		ctx := context.Background()
		t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		tokA, a, err := f.db.CreateInvite(ctx, "a", 5, 0)
		if err != nil {
			t.Fatal(err)
		}
		tokB, b, err := f.db.CreateInvite(ctx, "b", 5, 0)
		if err != nil {
			t.Fatal(err)
		}
		old, oldKid := f.agent(10, t0, tokA, false)
		mid, midKid := f.agent(11, t0.Add(time.Hour), tokB, false)
		late, _ := f.agent(12, t0.Add(2*time.Hour), tokA, false)
		none, _ := f.agent(13, t0.Add(3*time.Hour), "", false)
		newKid := f.rotate(mid, midKid, 14)
		if _, _, err := f.db.SetAgentDisabled(ctx, old, true, ""); err != nil {
			t.Fatal(err)
		}
		unknown, _ := key(99)
		for _, c := range []struct {
			name string
			q    store.AgentQuery
			want []string
		}{
			{"all", store.AgentQuery{}, []string{old, mid, late, none}},
			{"since t0", store.AgentQuery{CreatedSince: t0}, []string{old, mid, late, none}},
			{"since t0+1h", store.AgentQuery{CreatedSince: t0.Add(time.Hour)}, []string{mid, late, none}},
			{"since t0+1h in another zone", store.AgentQuery{CreatedSince: t0.Add(time.Hour).In(time.FixedZone("X", -5*3600))}, []string{mid, late, none}},
			{"since t0+1h+1ns", store.AgentQuery{CreatedSince: t0.Add(time.Hour + time.Nanosecond)}, []string{mid, late, none}},
			{"since t0+1h+1µs", store.AgentQuery{CreatedSince: t0.Add(time.Hour + time.Microsecond)}, []string{late, none}},
			{"since later", store.AgentQuery{CreatedSince: t0.Add(4 * time.Hour)}, nil},
			{"active kid", store.AgentQuery{Kid: newKid}, []string{mid}},
			{"rotated kid", store.AgentQuery{Kid: midKid}, []string{mid}},
			{"disabled agent's kid", store.AgentQuery{Kid: oldKid}, []string{old}},
			{"unknown kid", store.AgentQuery{Kid: unknown}, nil},
			{"kid, wrong state", store.AgentQuery{Kid: oldKid, State: store.StateActive}, nil},
			{"invitation a", store.AgentQuery{InvitationID: a.ID}, []string{old, late}},
			{"invitation b", store.AgentQuery{InvitationID: b.ID}, []string{mid}},
			{"unknown invitation", store.AgentQuery{InvitationID: b.ID + 100}, nil},
			{"invitation a, active", store.AgentQuery{InvitationID: a.ID, State: store.StateActive}, []string{late}},
			{"invitation a, since t0+1h", store.AgentQuery{InvitationID: a.ID, CreatedSince: t0.Add(time.Hour)}, []string{late}},
			{"after", store.AgentQuery{After: mid}, []string{late, none}},
		} {
			c.q.Limit = 3
			if got := f.uids(c.q); !slices.Equal(got, c.want) {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
			}
		}
		got, err := f.db.ShowAgent(ctx, late)
		if err != nil || got.InvitationID == nil || *got.InvitationID != a.ID {
			t.Errorf("ShowAgent(%s).InvitationID = %v (%v), want %d", late, got.InvitationID, err, a.ID)
		}
		if got, _ := f.db.ShowAgent(ctx, none); got.InvitationID != nil {
			t.Errorf("an agent with no invitation has InvitationID %d", *got.InvitationID)
		}
	})
}

// TestAgentPagination: pages of every size through more agents than a
// page holds, with and without a state filter, list each agent once, in
// uid order, in one statement a page; limits out of range are refused.
func TestAgentPagination(t *testing.T) {
	t.Parallel()
	eachQueryFixture(t, func(t *testing.T, f *queryFixture) {
		ctx := context.Background()
		var all, disabled []string
		for i := range 23 {
			uid, _ := f.agent(30+i, time.Now(), "", false)
			all = append(all, uid)
			if i%3 == 0 {
				if _, _, err := f.db.SetAgentDisabled(ctx, uid, true, ""); err != nil {
					t.Fatal(err)
				}
				disabled = append(disabled, uid)
			}
		}
		statements := countStatements(t, f.db.Gorm())
		for _, limit := range []int{1, 2, 7, 8, 22, 23, 24, store.MaxAgentPage} {
			if got := f.uids(store.AgentQuery{Limit: limit}); !slices.Equal(got, all) {
				t.Errorf("limit %d: %d agents %v, want %d", limit, len(got), got, len(all))
			}
			if got := f.uids(store.AgentQuery{Limit: limit, State: store.StateDisabled}); !slices.Equal(got, disabled) {
				t.Errorf("limit %d, disabled: %v, want %v", limit, got, disabled)
			}
		}
		statements.Store(0)
		list, _, err := f.db.Agents(ctx, store.AgentQuery{State: store.StateActive, Limit: 50})
		if err != nil || len(list) != len(all)-len(disabled) {
			t.Fatalf("active: %d agents, %v", len(list), err)
		}
		for _, a := range list {
			if a.ActiveKeys != 1 {
				t.Errorf("%s: %d active keys, want 1", a.UID, a.ActiveKeys)
			}
		}
		if n := statements.Load(); n != 1 {
			t.Errorf("a page of %d agents took %d statements, want 1", len(list), n)
		}
		for _, limit := range []int{-1, store.MaxAgentPage + 1} {
			if _, _, err := f.db.Agents(ctx, store.AgentQuery{Limit: limit}); !errors.Is(err, store.ErrInvalidQuery) {
				t.Errorf("limit %d: %v, want ErrInvalidQuery", limit, err)
			}
		}
	})
}

// countStatements counts the statements run on g from now on.
func countStatements(t *testing.T, g *gorm.DB) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	count := func(*gorm.DB) { n.Add(1) }
	name := "count_statements_" + strings.ReplaceAll(t.Name(), "/", "_")
	if err := g.Callback().Query().After("gorm:query").Register(name, count); err != nil {
		t.Fatal(err)
	}
	if err := g.Callback().Row().After("gorm:row").Register(name, count); err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestKeyHistoryAndStatus: after two rotations and an operator's
// revocation, the history lists the three keys oldest first, telling
// rotated from revoked (with the reason); the public status of each key
// follows, and the agent's state with it.
func TestKeyHistoryAndStatus(t *testing.T) {
	t.Parallel()
	eachQueryFixture(t, func(t *testing.T, f *queryFixture) {
		ctx := context.Background()
		uid, k1 := f.agent(50, time.Now().Add(-time.Hour), "", false)
		status := func(kid, want string) {
			t.Helper()
			st, err := f.db.KeyStatus(ctx, kid)
			if err != nil || st.Status != want || st.Kid != kid || (want == store.KeyActive || want == store.KeySuspended) != (st.RevokedAt == nil) {
				t.Errorf("KeyStatus(%s) = %+v, %v; want %s", kid, st, err, want)
			}
		}
		status(k1, store.KeyActive)
		if _, _, err := f.db.SetAgentDisabled(ctx, uid, true, ""); err != nil {
			t.Fatal(err)
		}
		status(k1, store.KeySuspended)
		if _, _, err := f.db.SetAgentDisabled(ctx, uid, false, ""); err != nil {
			t.Fatal(err)
		}
		k2 := f.rotate(uid, k1, 52) // proven
		k3 := f.rotate(uid, k2, 53) // not proven
		status(k1, store.KeyRotated)
		status(k2, store.KeyRotated)
		status(k3, store.KeyActive)
		if _, _, err := f.db.RevokeKey(ctx, uid, k3, "leaked in a log"); err != nil {
			t.Fatal(err)
		}
		status(k3, store.KeyRevoked)
		hist, err := f.db.KeyHistory(ctx, uid)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, k := range hist {
			got = append(got, fmt.Sprintf("%s %s %q %v %v", k.Kid, k.RevokedWhy, k.RevokeReason, k.Proven, k.RevokedAt != nil))
		}
		want := []string{
			k1 + ` rotated "" true true`,
			k2 + ` rotated "" true true`,
			k3 + ` revoked "leaked in a log" false true`,
		}
		if !slices.Equal(got, want) {
			t.Errorf("history:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		a, err := f.db.ShowAgent(ctx, uid)
		if err != nil || a.State != store.StateNoKeys || len(a.Keys) != 3 || a.ActiveKeys != 0 {
			t.Errorf("ShowAgent: %s, %d keys, %d active, %v; want no_keys, 3, 0", a.State, len(a.Keys), a.ActiveKeys, err)
		}
		if _, err := f.db.KeyHistory(ctx, "agent-ffffffffffffffffffffffff"); !errors.Is(err, store.ErrNoSuchAgent) {
			t.Errorf("KeyHistory of no agent: %v, want ErrNoSuchAgent", err)
		}
		// Pending and rejected suspend the key as disabled does.
		p, pk := f.agent(54, time.Now(), "", true)
		status(pk, store.KeySuspended)
		f.exec("UPDATE agents SET review = ? WHERE uid = ?", store.ReviewRejected, p)
		status(pk, store.KeySuspended)
		f.exec("UPDATE agents SET review = '' WHERE uid = ?", p)
		status(pk, store.KeyActive)
		unknown, _ := key(98)
		if _, err := f.db.KeyStatus(ctx, unknown); !errors.Is(err, store.ErrNoSuchKey) {
			t.Errorf("KeyStatus(unknown): %v, want ErrNoSuchKey", err)
		}
	})
}

// TestDeleteAgent: one agent goes with its keys, its directory
// signatures' agent and its place in the lists; the audit trail and the
// change log record it once; its keys' status is revoked afterwards; a
// second delete is ErrNoSuchAgent, and the other agents stay.
func TestDeleteAgent(t *testing.T) {
	t.Parallel()
	eachQueryFixture(t, func(t *testing.T, f *queryFixture) {
		ctx := store.WithActor(context.Background(), "operator:carol")
		uid, k1 := f.agent(60, time.Now(), "", false)
		k2 := f.rotate(uid, k1, 61)
		other, otherKid := f.agent(62, time.Now(), "", false)
		if err := f.db.DeleteAgent(ctx, uid); err != nil {
			t.Fatal(err)
		}
		if err := f.db.DeleteAgent(ctx, uid); !errors.Is(err, store.ErrNoSuchAgent) {
			t.Errorf("second delete: %v, want ErrNoSuchAgent", err)
		}
		for _, kid := range []string{k1, k2} {
			if st, err := f.db.KeyStatus(ctx, kid); err != nil || st.Status != store.KeyRevoked {
				t.Errorf("KeyStatus(%s) after delete: %+v %v, want revoked", kid, st, err)
			}
			if got := f.uids(store.AgentQuery{Kid: kid}); len(got) != 0 {
				t.Errorf("kid %s still finds %v", kid, got)
			}
		}
		if got := f.uids(store.AgentQuery{}); !slices.Equal(got, []string{other}) {
			t.Errorf("after delete: %v, want [%s]", got, other)
		}
		if st, err := f.db.KeyStatus(ctx, otherKid); err != nil || st.Status != store.KeyActive {
			t.Errorf("the other agent's key: %+v %v", st, err)
		}
		rows, err := f.db.Audit(ctx, store.AuditQuery{AgentUID: uid, Action: store.ActionDelete})
		if err != nil || len(rows) != 1 || rows[0].Actor != "operator:carol" {
			t.Errorf("audit rows of the delete: %+v %v, want one by operator:carol", rows, err)
		}
		var changes int64
		if err := f.db.Gorm().Model(&store.KeyChange{}).Where("agent_uid = ? AND change = ?", uid, store.ChangeDelete).Count(&changes).Error; err != nil || changes != 2 {
			t.Errorf("change log: %d delete rows (%v), want one per key (2)", changes, err)
		}
	})
}
