package refserver_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestRotationParsesOnce: a rotation carries two signatures (the agent's
// and the proof of possession of the new key) and both are checked on one
// parse of Signature-Input and Signature and one read of the body
// (middleware's TestCheckSignedParsesOnce shows that CheckSigned reads
// neither again); a registration parses once too.
func TestRotationParsesOnce(t *testing.T) {
	e := newTestEnv(t, dbtest.Open(t, "sqlite::memory:"))
	cur, next := signertest.Key(0x51), signertest.Key(0x52)

	before := e.srv.Parses()
	uid := e.register(cur)
	if got := e.srv.Parses() - before; got != 1 {
		t.Errorf("registration parsed the signature fields %d times, want 1", got)
	}

	before = e.srv.Parses()
	resp := e.send(e.rotateReq(uid, cur, next))
	if resp.status != http.StatusOK {
		t.Fatalf("rotation: status = %d, want 200 (%s)", resp.status, resp.body)
	}
	if got := e.srv.Parses() - before; got != 1 {
		t.Errorf("rotation parsed the signature fields %d times, want 1", got)
	}
	if kid, _ := e.send(e.whoamiReq(http.MethodGet, uid, next)).json(t)["kid"].(string); kid != next.KeyID() {
		t.Errorf("whoami with the new key: kid %q, want %q", kid, next.KeyID())
	}
}

// TestRotationBodyMembers: a rotation body is decoded once: a member
// directory_signatures that is not a list is 400 invalid_request once the
// signatures verify, a stray "]" or "}" after the object is 400
// invalid_request as for registration (the body is not one JSON value),
// and neither rotates anything; null is no signatures.
func TestRotationBodyMembers(t *testing.T) {
	e := newTestEnv(t, dbtest.Open(t, "sqlite::memory:"))
	cur := signertest.Key(0x53)
	reg := e.request(http.MethodPost, e.base+"/agents", append(jwkBody(cur.Public.JWK), '}'))
	if r := e.send(e.sign(reg, cur, signer.Options{Components: signer.WriteComponents})); r.status != http.StatusBadRequest {
		t.Fatalf("registration with a stray }: %d %s, want 400", r.status, r.body)
	}
	uid := e.register(cur)
	next := signertest.Key(0x54)
	member := func(v string) []byte {
		b, _ := json.Marshal(map[string]any{"public_jwk": next.Public.JWK, "directory_signatures": json.RawMessage(v)})
		return b
	}
	for _, tt := range []struct {
		name, body, message string
	}{
		{"not a list", string(member(`5`)), "directory_signatures must be a list"},
		{"a list of numbers", string(member(`[1]`)), "directory_signatures must be a list"},
		{"stray }", string(jwkBody(next.Public.JWK)) + "}", "must be a JSON object"},
		{"stray ] after white space", string(jwkBody(next.Public.JWK)) + " \n]", "must be a JSON object"},
	} {
		r := e.send(e.rotateReqBody(uid, cur, next, []byte(tt.body)))
		if r.wantError(t, tt.name, http.StatusBadRequest, "invalid_request") && !strings.Contains(string(r.body), tt.message) {
			t.Errorf("%s: message %s, want one saying %q", tt.name, r.body, tt.message)
		}
	}
	if r := e.send(e.whoamiReq(http.MethodGet, uid, cur)); r.status != http.StatusOK {
		t.Fatalf("whoami with the old key after refused rotations: %d %s", r.status, r.body)
	}
	if r := e.send(e.rotateReqBody(uid, cur, next, append(member(`null`), " \n"...))); r.status != http.StatusOK {
		t.Fatalf("rotation with directory_signatures null: %d %s, want 200", r.status, r.body)
	}
}
