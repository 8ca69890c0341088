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

// TestRotationBodyMembers: a rotation body is decoded once, and answers
// as when directory_signatures was decoded from the whole body again: a
// member that is not a list, or a stray "]" or "}" after the object
// (which registration lets through), is 400 invalid_request once the
// signatures verify, and rotates nothing; null is no signatures.
func TestRotationBodyMembers(t *testing.T) {
	e := newTestEnv(t, dbtest.Open(t, "sqlite::memory:"))
	cur := signertest.Key(0x53)
	reg := e.request(http.MethodPost, e.base+"/agents", append(jwkBody(cur.Public.JWK), '}'))
	if r := e.send(e.sign(reg, cur, signer.Options{Components: signer.WriteComponents})); r.status != http.StatusCreated {
		t.Fatalf("registration with a stray }: %d %s, want 201", r.status, r.body)
	}
	uid := e.register(cur)
	next := signertest.Key(0x54)
	member := func(v string) []byte {
		b, _ := json.Marshal(map[string]any{"public_jwk": next.Public.JWK, "directory_signatures": json.RawMessage(v)})
		return b
	}
	for _, tt := range []struct {
		name string
		body []byte
	}{
		{"not a list", member(`5`)},
		{"a list of numbers", member(`[1]`)},
		{"stray }", append(jwkBody(next.Public.JWK), '}')},
		{"stray ] after white space", append(jwkBody(next.Public.JWK), " \n]"...)},
	} {
		r := e.send(e.rotateReqBody(uid, cur, next, tt.body))
		if r.wantError(t, tt.name, http.StatusBadRequest, "invalid_request") && !strings.Contains(string(r.body), "directory_signatures must be a list") {
			t.Errorf("%s: message %s, want the directory_signatures one", tt.name, r.body)
		}
	}
	if r := e.send(e.whoamiReq(http.MethodGet, uid, cur)); r.status != http.StatusOK {
		t.Fatalf("whoami with the old key after refused rotations: %d %s", r.status, r.body)
	}
	if r := e.send(e.rotateReqBody(uid, cur, next, append(member(`null`), " \n"...))); r.status != http.StatusOK {
		t.Fatalf("rotation with directory_signatures null: %d %s, want 200", r.status, r.body)
	}
}
