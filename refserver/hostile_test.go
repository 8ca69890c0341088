package refserver_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/replaypg"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestLongNoncesOnPostgres: on PostgreSQL with the shared replay store, 50
// concurrent /whoami requests from one agent interleaved with 10 requests
// carrying 3,000-character nonces from another: every one of the 50 is
// answered 200, and each of the 10 is refused with a 4xx (the middleware's
// nonce length limit), never a 5xx. Before replay keys were stored
// as fixed-size digests, one such nonce overflowed PostgreSQL's index row
// limit inside a batched insert and every request in that batch got 503.
func TestLongNoncesOnPostgres(t *testing.T) {
	t.Parallel()
	db := dbtest.Open(t, dbtest.PostgresURL(t))
	if err := store.Migrate(t.Context(), db, nil); err != nil {
		t.Fatal(err)
	}
	replay, err := replaypg.New(replaypg.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEnvConfig(t, db, "", func(c *refserver.Config) { c.Replay = replay })
	good, hostile := signertest.Key(91), signertest.Key(92)
	goodUID, hostileUID := e.register(good), e.register(hostile)

	type call struct {
		hostile bool
		req     *http.Request
	}
	var calls []call
	for i := range 60 {
		if i%6 == 5 {
			req := e.request(http.MethodGet, e.base+"/whoami", nil)
			nonce := fmt.Sprintf("%04d", i) + strings.Repeat("n", 2996)
			calls = append(calls, call{true, e.sign(req, hostile, signer.Options{SignatureAgent: e.origin(hostileUID), Nonce: nonce})})
			continue
		}
		calls = append(calls, call{false, e.whoamiReq(http.MethodGet, goodUID, good)})
	}
	reqs := make([]*http.Request, len(calls))
	for i, c := range calls {
		reqs[i] = c.req
	}
	answers := e.doAll(reqs)

	var ok, refused, accepted int
	for i, c := range calls {
		a := answers[i]
		switch {
		case a.status == 0:
			t.Fatalf("request %d: no answer: %s", i, a.body)
		case !c.hostile && a.status == http.StatusOK:
			ok++
		case !c.hostile:
			t.Errorf("request %d from the well-behaved agent: %d %s, want 200", i, a.status, a.body)
		case a.status >= 500:
			t.Errorf("request %d with a 3,000-character nonce: %d %s, want a 4xx", i, a.status, a.body)
		case a.status >= 400:
			refused++
		default:
			accepted++
		}
	}
	if ok != 50 {
		t.Errorf("well-behaved requests answered 200: %d, want 50", ok)
	}
	if refused != 10 {
		t.Errorf("requests with 3,000-character nonces refused with a 4xx: %d, want 10 (%d accepted)", refused, accepted)
	}
}

// TestRotationContentDigestForms: a rotation whose signatures cover
// Content-Digest in a parameterised form ("content-digest";sf or
// ;key="sha-256") instead of the bare identifier, with the body swapped
// after the agent signed it (the attacker's key in the body, sig2 by the
// attacker), is refused and changes nothing.
func TestRotationContentDigestForms(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		tests := []struct {
			name   string
			digest string
		}{
			{"bare content-digest", "content-digest"},
			{"content-digest;sf", `"content-digest";sf`},
			{`content-digest;key="sha-256"`, `"content-digest";key="sha-256"`},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				cur, next, attacker := signertest.Key(byte(100+3*i)), signertest.Key(byte(101+3*i)), signertest.Key(byte(102+3*i))
				uid := e.register(cur)
				components := []string{"@method", "@authority", "@path", tt.digest}
				req := e.request(http.MethodPut, e.base+"/agents/"+uid+"/keys", jwkBody(next.Public.JWK))
				e.sign(req, cur, signer.Options{Components: components, SignatureAgent: e.origin(uid)})
				// Swapped in flight: the attacker's key, proven by the attacker.
				swapped := jwkBody(attacker.Public.JWK)
				req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(swapped)), int64(len(swapped))
				req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(swapped)), nil }
				e.sign(req, attacker, signer.Options{Label: "sig2", Tag: signer.KeyPossessionTag, Components: components})

				r := e.send(req)
				if r.status < 300 {
					t.Errorf("rotation with the body swapped under %s accepted: %d %s", tt.digest, r.status, r.body)
				} else if code := r.errorCode(t); r.status != http.StatusUnauthorized || (code != string(middleware.CodeDigestMismatch) && code != string(middleware.CodeMissingComponents)) {
					t.Errorf("rotation with the body swapped under %s: %d %s (%s), want 401 %s or %s",
						tt.digest, r.status, code, r.body, middleware.CodeDigestMismatch, middleware.CodeMissingComponents)
				}
				e.wantOnlyKey(uid, cur.KeyID())
			})
		}
	})
}
