package refserver_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

// inviteRegisterReq is POST /agents by key with the Agentid-Invite header
// token, covered by the signature.
func (e *testEnv) inviteRegisterReq(key signer.PrivateKey, token string) *http.Request {
	req := e.request(http.MethodPost, e.base+"/agents", jwkBody(key.Public.JWK))
	req.Header.Set(signer.InviteHeader, token)
	comps := append(append([]string(nil), signer.WriteComponents...), "agentid-invite")
	return e.sign(req, key, signer.Options{Components: comps})
}

// TestInvitationRuleWhateverTheKey: in registration mode token, a
// presented token that is unknown (or respelled), expired, revoked or used
// up by another agent is refused with 403 forbidden whether the key is new
// or already registered; an agent retrying its own registration with the
// token that created it is answered (200, is_new false), and a good token
// with uses left answers for a registered key without spending one.
func TestInvitationRuleWhateverTheKey(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		e := newTestEnvConfig(t, db, "", func(c *refserver.Config) { c.Registration = refserver.RegistrationToken })
		adb := store.New(db)
		invite := func(uses int64, ttl time.Duration) (string, store.InviteInfo) {
			t.Helper()
			tok, info, err := adb.CreateInvite(ctx, "", uses, ttl)
			if err != nil {
				t.Fatal(err)
			}
			return tok, info
		}
		own, ownInfo := invite(1, 0)
		other, _ := invite(1, 0)
		spare, spareInfo := invite(3, 0)
		expiring, _ := invite(3, 50*time.Millisecond)
		revoked, revokedInfo := invite(3, 0)

		k1, k2 := signertest.Key(181), signertest.Key(182)
		r := e.send(e.inviteRegisterReq(k1, own))
		if r.status != http.StatusCreated {
			t.Fatalf("register k1 with its token: %d %s", r.status, r.body)
		}
		uid1, _ := r.json(t)["uid"].(string)
		if r := e.send(e.inviteRegisterReq(k2, other)); r.status != http.StatusCreated {
			t.Fatalf("register k2 with its token: %d %s", r.status, r.body)
		}
		if _, _, err := adb.RevokeInvite(ctx, revokedInfo.ID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // expiring has expired

		for _, tc := range []struct {
			name  string
			key   signer.PrivateKey
			token string
			want  int
		}{
			{"a registered key with an unknown token", k1, "agentid_inv_" + strings.Repeat("A", 32), http.StatusForbidden},
			{"a registered key with its own token respelled", k1, strings.ToUpper(own), http.StatusForbidden},
			{"a registered key with a token used up by another agent", k1, other, http.StatusForbidden},
			{"a registered key with an expired token", k1, expiring, http.StatusForbidden},
			{"a registered key with a revoked token", k1, revoked, http.StatusForbidden},
			{"a new key with a used-up token", signertest.Key(183), own, http.StatusForbidden},
			{"a new key with an expired token", signertest.Key(184), expiring, http.StatusForbidden},
			{"a registered key retrying with its own used-up token", k1, own, http.StatusOK},
			{"a registered key with a good token", k2, spare, http.StatusOK},
		} {
			r := e.send(e.inviteRegisterReq(tc.key, tc.token))
			if tc.want != http.StatusOK {
				r.wantError(t, tc.name, tc.want, "forbidden")
				continue
			}
			if r.status != tc.want {
				t.Errorf("%s: %d %s, want %d", tc.name, r.status, r.body, tc.want)
				continue
			}
			if got := r.json(t)["is_new"]; got != false {
				t.Errorf("%s: is_new = %v, want false", tc.name, got)
			}
			if tc.key.KeyID() == k1.KeyID() && r.json(t)["uid"] != uid1 {
				t.Errorf("%s: uid %v, want %s", tc.name, r.json(t)["uid"], uid1)
			}
		}
		// Two headers, or an empty one, whatever the key.
		dup := e.inviteRegisterReq(k1, own)
		dup.Header.Add(signer.InviteHeader, own)
		e.send(dup).wantError(t, "a registered key with two Agentid-Invite headers", http.StatusBadRequest, "invalid_request")
		e.send(e.inviteRegisterReq(k1, "")).wantError(t, "a registered key with an empty Agentid-Invite", http.StatusForbidden, "forbidden")

		list, err := adb.ListInvites(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range list {
			switch in.ID {
			case ownInfo.ID:
				if in.Used != 1 || in.UsesLeft != 0 {
					t.Errorf("own token: used %d, left %d, want 1 and 0", in.Used, in.UsesLeft)
				}
			case spareInfo.ID:
				if in.Used != 0 || in.UsesLeft != 3 {
					t.Errorf("spare token after a registered key presented it: used %d, left %d, want 0 and 3", in.Used, in.UsesLeft)
				}
			}
		}
		if n := countRows(t, db, &store.Agent{}); n != 2 {
			t.Errorf("agents = %d, want 2", n)
		}
	})
}
