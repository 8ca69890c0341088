package store_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
)

// TestIDsAboveInt64: ids no row can have (above the largest signed 64-bit
// integer, which the drivers refuse to send) are refused before the
// database is asked: the agents filter and the audit cursor with
// ErrInvalidQuery, an invitation's revocation with ErrNoSuchToken; the
// largest id that fits is asked as any other.
func TestIDsAboveInt64(t *testing.T) {
	t.Parallel()
	eachQueryFixture(t, func(t *testing.T, f *queryFixture) {
		ctx := context.Background()
		f.agent(1, time.Now(), "", false)
		for _, id := range []uint64{math.MaxInt64 + 1, math.MaxUint64} {
			if _, _, err := f.db.Agents(ctx, store.AgentQuery{InvitationID: id}); !errors.Is(err, store.ErrInvalidQuery) {
				t.Errorf("Agents(invitation %d): %v, want ErrInvalidQuery", id, err)
			}
			if _, err := f.db.Audit(ctx, store.AuditQuery{Before: id}); !errors.Is(err, store.ErrInvalidQuery) {
				t.Errorf("Audit(before %d): %v, want ErrInvalidQuery", id, err)
			}
			if _, err := f.db.Audit(ctx, store.AuditQuery{InvitationID: id}); !errors.Is(err, store.ErrInvalidQuery) {
				t.Errorf("Audit(invitation %d): %v, want ErrInvalidQuery", id, err)
			}
			if _, _, err := f.db.RevokeInvite(ctx, id); !errors.Is(err, store.ErrNoSuchToken) {
				t.Errorf("RevokeInvite(%d): %v, want ErrNoSuchToken", id, err)
			}
		}
		if list, _, err := f.db.Agents(ctx, store.AgentQuery{InvitationID: math.MaxInt64}); err != nil || len(list) != 0 {
			t.Errorf("Agents(invitation MaxInt64): %v %v, want none", list, err)
		}
		if rows, err := f.db.Audit(ctx, store.AuditQuery{Before: math.MaxInt64}); err != nil || len(rows) != 1 {
			t.Errorf("Audit(before MaxInt64): %d rows, %v; want the registration", len(rows), err)
		}
		if _, _, err := f.db.RevokeInvite(ctx, math.MaxInt64); !errors.Is(err, store.ErrNoSuchToken) {
			t.Errorf("RevokeInvite(MaxInt64): %v, want ErrNoSuchToken", err)
		}
	})
}

// TestRevokeKeyMalformedKid: a kid that is not a thumbprint (NUL,
// invalid UTF-8, 10 KB: what PostgreSQL would refuse) is ErrNoSuchKey,
// not looked up; the agent's key stays active.
func TestRevokeKeyMalformedKid(t *testing.T) {
	t.Parallel()
	eachQueryFixture(t, func(t *testing.T, f *queryFixture) {
		ctx := context.Background()
		uid, kid := f.agent(2, time.Now(), "", false)
		for _, bad := range []string{"\x00", "\x00\x00", "a\xffb", "\xc0\x80", strings.Repeat("a", 10240), kid[:42] + "\x00", ""} {
			if _, _, err := f.db.RevokeKey(ctx, uid, bad, ""); !errors.Is(err, store.ErrNoSuchKey) {
				t.Errorf("RevokeKey(%q): %v, want ErrNoSuchKey", signer.Truncate(bad), err)
			}
		}
		if st, err := f.db.KeyStatus(ctx, kid); err != nil || st.Status != store.KeyActive {
			t.Errorf("the key after: %+v %v", st, err)
		}
	})
}
