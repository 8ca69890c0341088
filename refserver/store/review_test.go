package store_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
)

// registerPending creates the pending agent uid (registration mode
// approval) with the key of seed n and returns its kid.
func registerPending(t *testing.T, db *store.DB, uid string, n byte) string {
	t.Helper()
	key := signertest.Key(n)
	if err := db.CreateAgent(context.Background(), store.NewAgent{UID: uid, Kid: key.KeyID(),
		JWK: key.Public.JWK.MarshalPublic(), Now: time.Now().UTC(), Pending: true}); err != nil {
		t.Fatalf("CreateAgent pending: %v", err)
	}
	return key.KeyID()
}

// decisions returns the audit rows of approvals and rejections of uid, as
// action/reason/actor, newest first.
func decisions(t *testing.T, db *store.DB, uid string) []string {
	t.Helper()
	rows, err := db.Audit(context.Background(), store.AuditQuery{AgentUID: uid})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rows {
		if r.Action == store.ActionApprove || r.Action == store.ActionReject {
			out = append(out, r.Action+"/"+r.Reason+"/"+r.Actor)
		}
	}
	return out
}

// TestReviewDecisions: a pending agent lists no key and its writes are
// refused until an operator approves it; a rejected one stays so; a
// decision is made once (the same one again changes nothing, the other
// is refused with ErrNotPending), is audited with its reason and actor,
// and names every key of the agent in the change log.
func TestReviewDecisions(t *testing.T) {
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			f := newAuditFixture(t, b.URL(t)) // f.uid: registered without approval
			db := f.db
			ctx := store.WithActor(context.Background(), "operator:alice")
			const pending, rejected = "agent-aaaaaaaaaaaaaaaaaaaaaaa1", "agent-aaaaaaaaaaaaaaaaaaaaaaa2"
			pkid := registerPending(t, db, pending, 50)
			rkid := registerPending(t, db, rejected, 51)

			for _, uid := range []string{pending, rejected} {
				if keys, err := db.DirectoryKeys(ctx, uid); err != nil || len(keys) != 0 {
					t.Errorf("pending %s: directory keys %v %v, want none", uid, keys, err)
				}
			}
			st, err := db.LookupKey(ctx, pkid)
			if err != nil || st.Review != store.ReviewPending || st.AgentUID != pending {
				t.Errorf("LookupKey of a pending agent's key: %+v %v", st, err)
			}
			next := signertest.Key(52)
			rot := store.Rotation{UID: pending, SigningKid: pkid, Kid: next.KeyID(), JWK: next.Public.JWK.MarshalPublic(), Proven: true, Now: time.Now()}
			if _, err := db.Rotate(ctx, rot); !errors.Is(err, store.ErrAgentPending) {
				t.Errorf("rotate a pending agent: %v, want ErrAgentPending", err)
			}
			refresh := func(uid string) error {
				_, err := db.ReplaceDirectorySignatures(ctx, uid, func([]store.PublicJWK) ([]store.DirectorySignature, error) { return nil, nil })
				return err
			}
			if err := refresh(pending); !errors.Is(err, store.ErrAgentPending) {
				t.Errorf("refresh a pending agent's signatures: %v, want ErrAgentPending", err)
			}

			// Refused before anything changes.
			for _, bad := range []string{"", "  ", "a\nb", strings.Repeat("x", store.MaxReason+1)} {
				if _, _, err := db.RejectAgent(ctx, rejected, bad); !errors.Is(err, store.ErrInvalidReason) {
					t.Errorf("reject for %q: %v, want ErrInvalidReason", bad, err)
				}
			}
			if _, _, err := db.ApproveAgent(ctx, pending, "\x00"); !errors.Is(err, store.ErrInvalidReason) {
				t.Errorf("approve for a NUL: %v, want ErrInvalidReason", err)
			}
			if _, _, err := db.ApproveAgent(ctx, "agent-bbbbbbbbbbbbbbbbbbbbbbbb", ""); !errors.Is(err, store.ErrNoSuchAgent) {
				t.Errorf("approve an unknown agent: %v, want ErrNoSuchAgent", err)
			}
			if _, _, err := db.ApproveAgent(ctx, f.uid, ""); !errors.Is(err, store.ErrNotPending) || !strings.Contains(err.Error(), "never pending") {
				t.Errorf("approve an agent registered without approval: %v, want ErrNotPending (never pending)", err)
			}
			if got := decisions(t, db, pending); len(got) != 0 {
				t.Fatalf("refused decisions were audited: %v", got)
			}
			last, err := db.LastChange(ctx)
			if err != nil {
				t.Fatal(err)
			}

			info, changed, err := db.ApproveAgent(ctx, pending, "identity checked")
			if err != nil || !changed || info.UID != pending || len(info.Keys) != 1 {
				t.Fatalf("approve: %+v changed %v err %v", info, changed, err)
			}
			if keys, err := db.DirectoryKeys(ctx, pending); err != nil || len(keys) != 1 || keys[0].Kid != pkid {
				t.Errorf("approved agent's directory: %v %v, want its key", keys, err)
			}
			if st, _ := db.LookupKey(ctx, pkid); st.Review != "" {
				t.Errorf("approved agent's review = %q, want \"\"", st.Review)
			}
			if err := refresh(pending); err != nil {
				t.Errorf("refresh an approved agent's signatures: %v", err)
			}
			changes, err := db.ChangesAfter(ctx, last, 10)
			if err != nil || len(changes) != 1 || changes[0].Change != store.ChangeApprove || changes[0].Kid != pkid ||
				changes[0].AgentUID != pending || changes[0].Actor != "operator:alice" {
				t.Errorf("change log after the approval: %+v %v, want one approve row naming the key", changes, err)
			}
			if _, changed, err := db.ApproveAgent(ctx, pending, "again"); err != nil || changed {
				t.Errorf("approve again: changed %v err %v, want no change", changed, err)
			}
			if _, _, err := db.RejectAgent(ctx, pending, "too late"); !errors.Is(err, store.ErrNotPending) || !strings.Contains(err.Error(), "approved at") {
				t.Errorf("reject an approved agent: %v, want ErrNotPending (approved at …)", err)
			}
			if got, want := decisions(t, db, pending), []string{"agent.approved/identity checked/operator:alice"}; strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("audit of the approved agent = %v, want %v", got, want)
			}

			info, changed, err = db.RejectAgent(ctx, rejected, "no contact address")
			if err != nil || !changed {
				t.Fatalf("reject: %+v changed %v err %v", info, changed, err)
			}
			if keys, err := db.DirectoryKeys(ctx, rejected); err != nil || len(keys) != 0 {
				t.Errorf("rejected agent's directory: %v %v, want none", keys, err)
			}
			if st, _ := db.LookupKey(ctx, rkid); st.Review != store.ReviewRejected || st.ReviewReason != "no contact address" {
				t.Errorf("rejected agent's lookup: %+v", st)
			}
			if err := refresh(rejected); !errors.Is(err, store.ErrAgentRejected) {
				t.Errorf("refresh a rejected agent's signatures: %v, want ErrAgentRejected", err)
			}
			if _, changed, err := db.RejectAgent(ctx, rejected, "another reason"); err != nil || changed {
				t.Errorf("reject again: changed %v err %v, want no change", changed, err)
			}
			if st, _ := db.LookupKey(ctx, rkid); st.ReviewReason != "no contact address" {
				t.Errorf("a repeated rejection changed the reason to %q", st.ReviewReason)
			}
			if _, _, err := db.ApproveAgent(ctx, rejected, ""); !errors.Is(err, store.ErrNotPending) || !strings.Contains(err.Error(), "rejected at") {
				t.Errorf("approve a rejected agent: %v, want ErrNotPending (rejected at …)", err)
			}
			if got := decisions(t, db, rejected); len(got) != 1 || got[0] != "agent.rejected/no contact address/operator:alice" {
				t.Errorf("audit of the rejected agent = %v", got)
			}
		})
	}
}

// TestReviewRace: operators approving and rejecting one pending agent at
// once: exactly one decides (one change, one audit row, one outbox row);
// the others change nothing (the same decision) or are refused with
// ErrNotPending (the other one).
func TestReviewRace(t *testing.T) {
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			url := b.URL(t)
			db := store.New(dbtest.Migrated(t, url))
			// Two connection pools, as two processes have.
			pools := []*store.DB{db, store.New(dbtest.Open(t, url))}
			const rounds, operators = 3, 6
			for round := range rounds {
				uid := "agent-cccccccccccccccccccccc0" + string(rune('0'+round))
				registerPending(t, db, uid, byte(60+round))
				type result struct {
					approve, changed bool
					err              error
				}
				results := make([]result, operators)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := range operators {
					wg.Go(func() {
						odb := pools[i/2%2]
						ctx := store.WithActor(context.Background(), "operator:op"+string(rune('a'+i)))
						<-start
						r := result{approve: i%2 == 0}
						if r.approve {
							_, r.changed, r.err = odb.ApproveAgent(ctx, uid, "ok")
						} else {
							_, r.changed, r.err = odb.RejectAgent(ctx, uid, "no")
						}
						results[i] = r
					})
				}
				close(start)
				wg.Wait()
				winners := 0
				var winner result
				for _, r := range results {
					if r.err == nil && r.changed {
						winners++
						winner = r
					}
				}
				if winners != 1 {
					t.Fatalf("round %d: %d operators decided, want exactly 1: %+v", round, winners, results)
				}
				for i, r := range results {
					switch {
					case r.changed:
					case r.approve == winner.approve && r.err != nil:
						t.Errorf("round %d: operator %d made the winning decision again: %v, want no change and no error", round, i, r.err)
					case r.approve != winner.approve && !errors.Is(r.err, store.ErrNotPending):
						t.Errorf("round %d: operator %d made the other decision: %v, want ErrNotPending", round, i, r.err)
					}
				}
				if got := decisions(t, db, uid); len(got) != 1 {
					t.Errorf("round %d: audit rows %v, want one decision", round, got)
				}
				var outbox int64
				db.Gorm().Model(&store.OutboxEvent{}).Where("agent_uid = ? AND kind IN ?", uid, []string{store.ActionApprove, store.ActionReject}).Count(&outbox)
				if outbox != 1 {
					t.Errorf("round %d: %d outbox rows, want 1", round, outbox)
				}
			}
		})
	}
}
