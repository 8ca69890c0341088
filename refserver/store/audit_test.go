package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
)

// auditFixture is a migrated database holding one agent with one key.
type auditFixture struct {
	db       *store.DB
	uid, kid string
	n        byte // the next key seed
}

func newAuditFixture(t *testing.T, databaseURL string) *auditFixture {
	t.Helper()
	f := &auditFixture{db: store.New(dbtest.Migrated(t, databaseURL)), uid: "agent-0123456789abcdef01234567", n: 1}
	f.kid = f.register(t, f.uid, nil)
	return f
}

func (f *auditFixture) register(t *testing.T, uid string, err error) string {
	t.Helper()
	key := signertest.Key(f.n)
	f.n++
	got := f.db.CreateAgent(context.Background(), store.NewAgent{UID: uid, Kid: key.KeyID(),
		JWK: key.Public.JWK.MarshalPublic(), Now: time.Now().UTC()})
	if !errors.Is(got, err) {
		t.Fatalf("CreateAgent: %v, want %v", got, err)
	}
	return key.KeyID()
}

// pendingUID is the agent the fixture's pending creates.
const pendingUID = "agent-aaaaaaaaaaaaaaaaaaaaaaaa"

// pending creates the pending agent pendingUID unless it exists.
func (f *auditFixture) pending(t *testing.T) {
	t.Helper()
	if ok, err := f.db.HasAgent(context.Background(), pendingUID); err != nil {
		t.Fatal(err)
	} else if ok {
		return
	}
	key := signertest.Key(199)
	if err := f.db.CreateAgent(context.Background(), store.NewAgent{UID: pendingUID, Kid: key.KeyID(),
		JWK: key.Public.JWK.MarshalPublic(), Now: time.Now().UTC(), Pending: true}); err != nil {
		t.Fatal(err)
	}
}

// review returns the review state of pendingUID.
func (f *auditFixture) review(t *testing.T) string {
	t.Helper()
	a, err := f.db.Agent(context.Background(), pendingUID)
	if err != nil {
		t.Fatal(err)
	}
	return a.Review
}

// rows returns the audit rows of action and the outbox rows of kind action.
func (f *auditFixture) rows(t *testing.T, action string) (audit, outbox int64) {
	t.Helper()
	g := f.db.Gorm()
	if err := g.Model(&store.AuditEvent{}).Where("action = ?", action).Count(&audit).Error; err != nil {
		t.Fatal(err)
	}
	if err := g.Model(&store.OutboxEvent{}).Where("kind = ?", action).Count(&outbox).Error; err != nil {
		t.Fatal(err)
	}
	return audit, outbox
}

// TestAuditSameTransaction: every kind of change writes exactly one audit
// row (and one outbox row when it changes an agent or a key), in the
// change's transaction: failing the transaction right after the audit
// write leaves neither the change nor the rows.
func TestAuditSameTransaction(t *testing.T) {
	ctx := store.WithRequestID(store.WithActor(context.Background(), "operator:alice"), "req-1")
	errBoom := errors.New("boom after the audit write")
	type change struct {
		action string
		event  bool // also a change event
		do     func(t *testing.T, f *auditFixture) error
		// done reports whether the change is visible in the database.
		done func(t *testing.T, f *auditFixture) bool
	}
	agentState := func(t *testing.T, f *auditFixture) store.AgentInfo {
		a, err := f.db.ShowAgent(context.Background(), f.uid)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	other := "agent-fedcba9876543210fedcba98"
	operatorTokens := map[*auditFixture]string{} // each fixture's token "alice"
	changes := []change{
		{store.ActionRegister, true,
			func(t *testing.T, f *auditFixture) error {
				key := signertest.Key(200)
				return f.db.CreateAgent(ctx, store.NewAgent{UID: other, Kid: key.KeyID(), JWK: key.Public.JWK.MarshalPublic(), Now: time.Now()})
			},
			func(t *testing.T, f *auditFixture) bool {
				ok, err := f.db.HasAgent(context.Background(), other)
				if err != nil {
					t.Fatal(err)
				}
				return ok
			}},
		{store.ActionKeyRotate, true,
			func(t *testing.T, f *auditFixture) error {
				key := signertest.Key(201)
				_, err := f.db.Rotate(ctx, store.Rotation{UID: f.uid, SigningKid: f.kid, Kid: key.KeyID(),
					JWK: key.Public.JWK.MarshalPublic(), Proven: true, Now: time.Now()})
				return err
			},
			func(t *testing.T, f *auditFixture) bool { return len(agentState(t, f).Keys) == 2 }},
		{store.ActionRefresh, false,
			func(t *testing.T, f *auditFixture) error {
				_, err := f.db.ReplaceDirectorySignatures(ctx, f.uid, func([]store.PublicJWK) ([]store.DirectorySignature, error) {
					return []store.DirectorySignature{{AgentUID: f.uid, Kid: f.kid, BodyDigest: []byte{1}, Input: "x", Value: []byte{2},
						CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}}, nil
				})
				return err
			},
			func(t *testing.T, f *auditFixture) bool {
				var n int64
				f.db.Gorm().Model(&store.DirectorySignature{}).Count(&n)
				return n == 1
			}},
		{store.ActionDisable, true,
			func(t *testing.T, f *auditFixture) error {
				_, _, err := f.db.SetAgentDisabled(ctx, f.uid, true, "abuse report 42")
				return err
			},
			func(t *testing.T, f *auditFixture) bool { return agentState(t, f).DisabledAt != nil }},
		{store.ActionEnable, true,
			func(t *testing.T, f *auditFixture) error {
				if _, _, err := f.db.SetAgentDisabled(context.Background(), f.uid, true, ""); err != nil {
					t.Fatal(err)
				}
				_, _, err := f.db.SetAgentDisabled(ctx, f.uid, false, "")
				return err
			},
			func(t *testing.T, f *auditFixture) bool { return agentState(t, f).DisabledAt == nil }},
		{store.ActionInviteRevoke, false,
			func(t *testing.T, f *auditFixture) error {
				_, info, err := f.db.CreateInvite(context.Background(), "", 1, 0)
				if err != nil {
					t.Fatal(err)
				}
				_, _, err = f.db.RevokeInvite(ctx, info.ID)
				return err
			},
			func(t *testing.T, f *auditFixture) bool {
				l, err := f.db.ListInvites(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				return len(l) > 0 && l[0].RevokedAt != nil
			}},
		{store.ActionKeyRevoke, true,
			func(t *testing.T, f *auditFixture) error {
				_, _, err := f.db.RevokeKey(ctx, f.uid, f.kid, "key leaked")
				return err
			},
			func(t *testing.T, f *auditFixture) bool { return agentState(t, f).ActiveKeys == 0 }},
		{store.ActionDelete, true,
			func(t *testing.T, f *auditFixture) error {
				_, err := f.db.DeleteAgents(ctx, []string{f.uid})
				return err
			},
			func(t *testing.T, f *auditFixture) bool {
				ok, err := f.db.HasAgent(context.Background(), f.uid)
				if err != nil {
					t.Fatal(err)
				}
				return !ok
			}},
		{store.ActionOperatorCreate, false,
			func(t *testing.T, f *auditFixture) error {
				_, _, err := f.db.CreateOperatorToken(ctx, "ci", []string{store.ScopeAgentsRead}, time.Hour)
				return err
			},
			func(t *testing.T, f *auditFixture) bool {
				l, err := f.db.ListOperatorTokens(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				return len(l) == 1
			}},
		{store.ActionOperatorRevoke, false,
			func(t *testing.T, f *auditFixture) error {
				// Created once: the failed revocation leaves it.
				if l, err := f.db.ListOperatorTokens(context.Background()); err != nil {
					t.Fatal(err)
				} else if len(l) == 0 {
					if _, _, err := f.db.CreateOperatorToken(context.Background(), "ci", []string{store.ScopeAgentsRead}, time.Hour); err != nil {
						t.Fatal(err)
					}
				}
				_, _, err := f.db.RevokeOperatorToken(ctx, "ci")
				return err
			},
			func(t *testing.T, f *auditFixture) bool {
				l, err := f.db.ListOperatorTokens(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				return len(l) == 1 && l[0].RevokedAt != nil
			}},
		{store.ActionApprove, true,
			func(t *testing.T, f *auditFixture) error {
				f.pending(t)
				_, _, err := f.db.ApproveAgent(ctx, pendingUID, "checked")
				return err
			},
			func(t *testing.T, f *auditFixture) bool { return f.review(t) == "" }},
		{store.ActionReject, true,
			func(t *testing.T, f *auditFixture) error {
				f.pending(t)
				_, _, err := f.db.RejectAgent(ctx, pendingUID, "no contact")
				return err
			},
			func(t *testing.T, f *auditFixture) bool { return f.review(t) == store.ReviewRejected }},
		{store.ActionOperatorUsed, false,
			func(t *testing.T, f *auditFixture) error {
				if operatorTokens[f] == "" {
					tok, _, err := f.db.CreateOperatorToken(context.Background(), "alice", []string{store.ScopeAgentsRead}, time.Hour)
					if err != nil {
						t.Fatal(err)
					}
					operatorTokens[f] = tok
				}
				_, err := f.db.AuthenticateOperator(ctx, operatorTokens[f], store.OperatorUse{Method: "GET", Route: "/admin/v1/agents"})
				return err
			},
			func(t *testing.T, f *auditFixture) bool {
				l, err := f.db.ListOperatorTokens(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				return len(l) == 1 && l[0].LastUsedAt != nil
			}},
		{store.ActionInviteCreate, false,
			func(t *testing.T, f *auditFixture) error {
				_, _, err := f.db.CreateInvite(ctx, "for bob", 1, time.Hour)
				return err
			},
			func(t *testing.T, f *auditFixture) bool {
				l, err := f.db.ListInvites(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				return len(l) == 1
			}},
	}
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			for _, c := range changes {
				t.Run(c.action, func(t *testing.T) {
					f := newAuditFixture(t, b.URL(t))
					audit0, outbox0 := f.rows(t, c.action) // the fixture's own
					store.SetFailAfterAudit(t, c.action, errBoom)
					if err := c.do(t, f); !errors.Is(err, errBoom) {
						t.Fatalf("change failed after its audit write: got %v, want %v", err, errBoom)
					}
					if c.done(t, f) {
						t.Errorf("the change committed although its transaction failed")
					}
					if a, o := f.rows(t, c.action); a != audit0 || o != outbox0 {
						t.Errorf("after a failed change: %d audit and %d outbox rows, want none", a, o)
					}
					store.SetFailAfterAudit(t, "", nil)
					if err := c.do(t, f); err != nil {
						t.Fatalf("change: %v", err)
					}
					if !c.done(t, f) {
						t.Fatalf("the change did not happen")
					}
					wantOutbox := int64(0)
					if c.event {
						wantOutbox = 1
					}
					if a, o := f.rows(t, c.action); a != audit0+1 || o != outbox0+wantOutbox {
						t.Errorf("%d audit and %d outbox rows, want 1 and %d", a, o, wantOutbox)
					}
					rows, err := f.db.Audit(context.Background(), store.AuditQuery{Action: c.action, Limit: 1})
					if err != nil || len(rows) != 1 {
						t.Fatalf("Audit: %v %v", rows, err)
					}
					r := rows[0]
					if r.Actor != "operator:alice" || r.RequestID != "req-1" || time.Since(r.CreatedAt) > time.Minute || time.Since(r.CreatedAt) < -time.Minute {
						t.Errorf("audit row %+v: want actor operator:alice, request req-1, dated now", r)
					}
				})
			}
		})
	}
}

// TestAuditEnableAndReasons: enable is recorded too; an operator's reason
// is kept, and one that is too long or holds control characters is
// refused before anything changes; a change that changes nothing records
// nothing.
func TestAuditEnableAndReasons(t *testing.T) {
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			f := newAuditFixture(t, b.URL(t))
			ctx := context.Background()
			for _, bad := range []string{strings.Repeat("x", store.MaxReason+1), "line\nbreak", "\xff"} {
				if _, _, err := f.db.SetAgentDisabled(ctx, f.uid, true, bad); !errors.Is(err, store.ErrInvalidReason) {
					t.Errorf("reason %q: %v, want ErrInvalidReason", bad, err)
				}
			}
			for i := 0; i < 2; i++ { // the second changes nothing
				if _, _, err := f.db.SetAgentDisabled(ctx, f.uid, true, "spam"); err != nil {
					t.Fatal(err)
				}
			}
			if _, _, err := f.db.SetAgentDisabled(ctx, f.uid, false, ""); err != nil {
				t.Fatal(err)
			}
			rows, err := f.db.Audit(ctx, store.AuditQuery{AgentUID: f.uid})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rows {
				got = append(got, r.Action+"/"+r.Reason+"/"+r.Actor)
			}
			want := []string{"agent.enabled//database", "agent.disabled/spam/database", "agent.registered//database"}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("audit trail (newest first) = %v, want %v", got, want)
			}
			// Paging: one row a page, by the Before cursor.
			var paged []string
			q := store.AuditQuery{AgentUID: f.uid, Limit: 1}
			for {
				page, err := f.db.Audit(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				paged = append(paged, page[0].Action)
				q.Before = page[0].ID
			}
			if len(paged) != 3 {
				t.Errorf("paged %v, want 3 rows", paged)
			}
			if _, err := f.db.Audit(ctx, store.AuditQuery{Limit: store.MaxAuditPage + 1}); err == nil {
				t.Error("a page above MaxAuditPage was accepted")
			}
		})
	}
}

// TestAuditByInvitation: the trail filtered by an invitation token holds
// its creation, the registrations that spent it and its revocation, and
// nothing of another token's; rows written before the column existed are
// found too, once the migration fills it in from their detail.
func TestAuditByInvitation(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			f := newAuditFixture(t, b.URL(t))
			ctx := context.Background()
			tokA, a, err := f.db.CreateInvite(ctx, "a", 2, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			tokB, bInv, err := f.db.CreateInvite(ctx, "b", 2, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			for i, tok := range []string{tokA, tokB} {
				key := signertest.Key(byte(60 + i))
				if err := f.db.CreateAgent(ctx, store.NewAgent{UID: fmt.Sprintf("agent-%024x", 0x600+i), Kid: key.KeyID(),
					JWK: key.Public.JWK.MarshalPublic(), Now: time.Now().UTC(), Invite: tok}); err != nil {
					t.Fatal(err)
				}
			}
			if _, _, err := f.db.RevokeInvite(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
			trail := func(id uint64) string {
				t.Helper()
				rows, err := f.db.Audit(ctx, store.AuditQuery{InvitationID: id})
				if err != nil {
					t.Fatal(err)
				}
				var s []string
				for _, r := range rows {
					s = append(s, r.Action+" "+r.AgentUID)
				}
				return strings.Join(s, ", ")
			}
			wantA := "invitation.revoked , agent.registered agent-000000000000000000000600, invitation.created "
			wantB := "agent.registered agent-000000000000000000000601, invitation.created "
			if got := trail(a.ID); got != wantA {
				t.Errorf("invitation %d: %q, want %q", a.ID, got, wantA)
			}
			if got := trail(bInv.ID); got != wantB {
				t.Errorf("invitation %d: %q, want %q", bInv.ID, got, wantB)
			}
			if got := trail(999); got != "" {
				t.Errorf("an unknown invitation: %q", got)
			}
			// As before the column: emptied, then filled in by the migration.
			g := f.db.Gorm()
			if err := g.Exec("UPDATE audit_events SET invitation_id = NULL").Error; err != nil {
				t.Fatal(err)
			}
			if err := g.Exec("DELETE FROM "+store.MigrationsTable+" WHERE id = ?", "20261216120100").Error; err != nil {
				t.Fatal(err)
			}
			if got := trail(a.ID); got != "" {
				t.Fatalf("with the column emptied: %q", got)
			}
			if err := store.Migrate(ctx, g, nil); err != nil {
				t.Fatal(err)
			}
			if got := trail(a.ID); got != wantA {
				t.Errorf("after the migration, invitation %d: %q, want %q", a.ID, got, wantA)
			}
			if got := trail(bInv.ID); got != wantB {
				t.Errorf("after the migration, invitation %d: %q, want %q", bInv.ID, got, wantB)
			}
		})
	}
}
