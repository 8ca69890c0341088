package refserver_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
)

// TestDeletedAgentKeysStayRevoked: the attack a deletion used to open.
// An operator revokes a stolen key, then deletes its agent: the thief's
// registration of the key (POST /agents and vestauth's POST /register)
// is 409 key_conflict, an agent's rotation to it (native or vestauth) is
// 409 key_conflict, and its status stays revoked rather than 404 then
// active. The deleted agent's other, active, key is retired alike.
func TestDeletedAgentKeysStayRevoked(t *testing.T) {
	t.Parallel()
	eachEnv(t, vestauthCompat, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		db := store.New(e.db)
		stolen, kept := signertest.Key(241), signertest.Key(242)
		uid := e.register(stolen)
		if r := e.send(e.rotateReq(uid, stolen, kept)); r.status != http.StatusOK {
			t.Fatalf("rotate: %d %s", r.status, r.body)
		}
		if _, _, err := db.RevokeKey(ctx, uid, kept.KeyID(), "stolen"); err != nil {
			t.Fatal(err)
		}
		e.wantKeyStatus("revoked", kept.KeyID(), store.KeyRevoked)
		if err := db.DeleteAgent(ctx, uid); err != nil {
			t.Fatal(err)
		}
		native, nativeKey := signertest.Key(243), signertest.Key(244)
		nativeUID := e.register(native)
		compatKey := signertest.Key(245)
		compatUID := e.compatRegister(compatKey)
		for _, k := range []string{stolen.KeyID(), kept.KeyID()} {
			e.wantKeyStatus("a deleted agent's key", k, store.KeyRevoked)
		}
		for name, k := range map[string]int{"rotated away": 241, "revoked": 242} {
			key := signertest.Key(byte(k))
			r := e.send(e.registerReq(key))
			if r.wantError(t, "POST /agents with a deleted agent's "+name+" key", http.StatusConflict, refserver.CodeKeyConflict) &&
				!strings.Contains(string(r.body), "revoked") {
				t.Errorf("POST /agents: %s, want the message to say the key was revoked", r.body)
			}
			h := vestauthHeaders(t, e.base+"/register", key, refserver.NullTag, "", 300)
			e.send(e.compatReq(http.MethodPost, e.base+"/register", "", h, jwkBody(key.Public.JWK))).
				wantError(t, "POST /register with a deleted agent's "+name+" key", http.StatusConflict, refserver.CodeKeyConflict)
			e.send(e.rotateReq(nativeUID, native, key)).
				wantError(t, "PUT /agents/{uid}/keys to a deleted agent's "+name+" key", http.StatusConflict, refserver.CodeKeyConflict)
			e.compatRotate(compatKey, key, e.origin(compatUID), 300).
				wantError(t, "POST /rotate to a deleted agent's "+name+" key", http.StatusConflict, refserver.CodeKeyConflict)
			e.wantKeyStatus("after the attempts", key.KeyID(), store.KeyRevoked)
		}
		e.wantOnlyKey(nativeUID, native.KeyID())
		e.wantOnlyKey(compatUID, compatKey.KeyID())
		wantRows(t, e.db, "after the refused attempts", 2, 2)
		// The agents refused above still rotate to a new key.
		if r := e.send(e.rotateReq(nativeUID, native, nativeKey)); r.status != http.StatusOK {
			t.Errorf("rotate to a new key: %d %s", r.status, r.body)
		}
	})
}
