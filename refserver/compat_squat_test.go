package refserver_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

// TestCompatRotationCannotSquatAKey: an agent that rotates through the
// vestauth-compat POST /rotate (no proof of possession of the new key) to
// a public key it does not hold, not yet registered here, does not hand
// its identity to the key's holder: when the holder registers the key
// (proving it), the key leaves the squatter's agent for a new agent of
// the holder's (is_new true, an invitation spent in token mode), whose
// directory and /whoami are its own. A key the rotating agent proved by
// a verified /whoami, or attached by a native rotation (sig2), stays with
// its agent when registered again.
func TestCompatRotationCannotSquatAKey(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		e := compatEnv(t, db, nil)
		register := func(e *testEnv, key signer.PrivateKey, wantStatus int) (string, bool) {
			t.Helper()
			r := e.send(e.registerReq(key))
			if r.status != wantStatus {
				t.Fatalf("register %s: %d %s, want %d", key.KeyID(), r.status, r.body, wantStatus)
			}
			got := r.json(t)
			uid, _ := got["uid"].(string)
			isNew, _ := got["is_new"].(bool)
			return uid, isNew
		}

		// The squatter rotates its agent to the victim's public key.
		squatterKey, victimKey := signertest.Key(101), signertest.Key(102)
		squatter := e.compatRegister(squatterKey)
		if r := e.compatRotate(squatterKey, victimKey, e.origin(squatter), 300); r.status != http.StatusOK {
			t.Fatalf("squatter's POST /rotate to the victim's key: %d %s", r.status, r.body)
		}
		e.wantOnlyKey(squatter, victimKey.KeyID())

		// The victim registers its key: a new agent, not the squatter's.
		victim, isNew := register(e, victimKey, http.StatusCreated)
		if !isNew || victim == squatter || !signer.ValidUID(victim) {
			t.Fatalf("victim's registration: uid %s is_new %v, want a new uid (not the squatter's %s) with is_new true", victim, isNew, squatter)
		}
		e.wantOnlyKey(victim, victimKey.KeyID())
		if kids := e.directoryKids(squatter); slices.Contains(kids, victimKey.KeyID()) {
			t.Errorf("the squatter's directory still lists the victim's key: %v", kids)
		}
		if r := e.send(e.whoamiReq(http.MethodGet, victim, victimKey)); r.status != http.StatusOK || r.json(t)["uid"] != victim {
			t.Errorf("victim's whoami: %d %s, want 200 as %s", r.status, r.body, victim)
		}
		e.send(e.whoamiReq(http.MethodGet, squatter, victimKey)).wantError(t, "the victim's key as the squatter", http.StatusUnauthorized, middleware.CodeUnknownKey)
		// Registering again answers the victim's own agent.
		if again, isNew := register(e, victimKey, http.StatusOK); again != victim || isNew {
			t.Errorf("victim registers again: %s is_new %v, want %s is_new false", again, isNew, victim)
		}

		// In registration mode token, the victim's registration creates an
		// agent, so it needs an invitation and spends one use.
		tok := e.sibling(db, func(c *refserver.Config) { vestauthCompat(c); c.Registration = refserver.RegistrationToken })
		squatterKey2, victimKey2 := signertest.Key(103), signertest.Key(104)
		squatter2 := e.compatRegister(squatterKey2)
		if r := tok.compatRotate(squatterKey2, victimKey2, tok.origin(squatter2), 300); r.status != http.StatusOK {
			t.Fatalf("squatter's POST /rotate (token mode): %d %s", r.status, r.body)
		}
		adb := store.New(db)
		token, info, err := adb.CreateInvite(ctx, "victim", 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		spent, _, _ := adb.CreateInvite(ctx, "spent", 1, 0)
		if r := tok.send(tok.inviteRegisterReq(signertest.Key(105), spent)); r.status != http.StatusCreated {
			t.Fatalf("spend a token: %d %s", r.status, r.body)
		}
		tok.send(tok.inviteRegisterReq(victimKey2, spent)).wantError(t, "the victim's key with a used-up token", http.StatusForbidden, "forbidden")
		r := tok.send(tok.inviteRegisterReq(victimKey2, token))
		if r.status != http.StatusCreated || r.json(t)["uid"] == squatter2 || r.json(t)["is_new"] != true {
			t.Fatalf("victim's registration with a token: %d %s, want 201, a new uid, is_new true", r.status, r.body)
		}
		list, err := adb.ListInvites(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range list {
			if in.ID == info.ID && (in.Used != 1 || in.UsesLeft != 0) {
				t.Errorf("victim's token: used %d, left %d, want 1 and 0", in.Used, in.UsesLeft)
			}
		}

		// An agent that rotated to its own new key and used it (a verified
		// /whoami) keeps it when it registers again.
		old, next := signertest.Key(106), signertest.Key(107)
		own := e.compatRegister(old)
		if r := e.compatRotate(old, next, e.origin(own), 300); r.status != http.StatusOK {
			t.Fatalf("own POST /rotate: %d %s", r.status, r.body)
		}
		if r := e.send(e.whoamiReq(http.MethodGet, own, next)); r.status != http.StatusOK {
			t.Fatalf("whoami with the rotated-to key: %d %s", r.status, r.body)
		}
		if uid, isNew := register(e, next, http.StatusOK); uid != own || isNew {
			t.Errorf("registering a compat-rotated key after a verified whoami: %s is_new %v, want %s is_new false", uid, isNew, own)
		}
		if uid, isNew := e.compatRegisterAnswer(next); uid != own || isNew {
			t.Errorf("POST /register of that key: %s is_new %v, want %s is_new false", uid, isNew, own)
		}
		// A native rotation proves the new key (sig2).
		native := signertest.Key(108)
		if r := e.send(e.rotateReq(own, next, native)); r.status != http.StatusOK {
			t.Fatalf("native rotation: %d %s", r.status, r.body)
		}
		if uid, isNew := register(e, native, http.StatusOK); uid != own || isNew {
			t.Errorf("registering a natively rotated-to key: %s is_new %v, want %s is_new false", uid, isNew, own)
		}
	})
}

// compatRegisterAnswer is POST /register of key as vestauth sends it; it
// returns the answer's uid and is_new.
func (e *testEnv) compatRegisterAnswer(key signer.PrivateKey) (string, bool) {
	e.t.Helper()
	h := vestauthHeaders(e.t, e.base+"/register", key, refserver.NullTag, "", 300)
	r := e.send(e.compatReq(http.MethodPost, e.base+"/register", "", h, jwkBody(key.Public.JWK)))
	if r.status != http.StatusOK {
		e.t.Fatalf("POST /register: %d %s, want 200", r.status, r.body)
	}
	got := r.json(e.t)
	uid, _ := got["uid"].(string)
	isNew, _ := got["is_new"].(bool)
	return uid, isNew
}
