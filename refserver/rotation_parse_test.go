package refserver_test

import (
	"net/http"
	"testing"

	"github.com/agentid/agentid/refserver/dbtest"
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
