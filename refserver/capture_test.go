package refserver_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

// These tests take the side of an attacker who captured a request an
// agent sent and may send anything to the server. docs/security.md names
// them.

// agentSpellings are Signature-Agent values naming uid's agent: the two
// forms the server publishes, respelled (accepted), and other forms on
// the agent's host (refused with invalid_signature_agent).
func (e *testEnv) agentSpellings(uid string) (same, other []string) {
	o := e.origin(uid)
	same = []string{
		`sig1="` + o + `"`,
		`sig1="` + o + `/"`,
		`sig1="` + o + `/?"`,
		`sig1="` + strings.ToUpper(o) + `"`,
		`sig1="` + o + `/.well-known/http-message-signatures-directory"`,
		`sig1="` + o + `/%2Ewell-known/http-message-signatures-directory"`,
		`sig1="` + o + `/a/../.well-known/http-message-signatures-directory"`,
		o, // the token form
	}
	other = []string{
		`sig1="` + o + `/?r=1"`,
		`sig1="` + o + `/?r=2"`,
		`sig1="` + o + `/.well-known/http-message-signatures-directory?r=1"`,
		`sig1="` + o + `";type=jwks_uri`,
		`sig1="` + o + `/.well-known/http-message-signatures-directory";type=jwks_uri`,
		`sig1="` + o + `/keys.json"`,
		`sig1="` + o + `/card.json";type=cimd`,
		`sig1="` + strings.Replace(o, "http://", "https://", 1) + `"`,
	}
	return same, other
}

// resend is a copy of the captured request's signature headers on a new
// request to url, with Signature-Agent set to sa.
func (e *testEnv) resend(method, url string, captured http.Header, sa string, body []byte) *http.Request {
	r := e.request(method, url, body)
	for _, h := range []string{"Signature", "Signature-Input", "Content-Digest"} {
		if v, ok := captured[h]; ok {
			r.Header[h] = v
		}
	}
	r.Header.Set("Signature-Agent", sa)
	return r
}

// TestWhoamiReplayAcrossSpellings: a captured /whoami request whose
// signature does not cover Signature-Agent (the legacy shape) is accepted
// once, whatever Signature-Agent spelling it is resent with; spellings of
// the server's own forms are replays, other forms naming its agent hosts
// are invalid_signature_agent. With the default (protocol-01) shape the
// member is covered: no other spelling verifies at all.
func TestWhoamiReplayAcrossSpellings(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		key := signertest.Key(0x61)
		uid := e.register(key)
		same, other := e.agentSpellings(uid)
		covered := e.sign(e.request(http.MethodGet, e.base+"/whoami", nil), key, signer.Options{SignatureAgent: e.origin(uid)}).Header
		for _, sa := range same[1:] {
			r := e.send(e.resend(http.MethodGet, e.base+"/whoami", covered, sa, nil))
			if r.status != http.StatusUnauthorized || (r.errorCode(t) != "invalid_signature" && r.errorCode(t) != "invalid_signature_input") {
				t.Errorf("covered member respelled as %s: %d %s, want 401 invalid_signature", sa, r.status, r.body)
			}
		}
		if r := e.send(e.resend(http.MethodGet, e.base+"/whoami", covered, covered.Get("Signature-Agent"), nil)); r.status != http.StatusOK {
			t.Errorf("covered member as signed: %d %s, want 200", r.status, r.body)
		}

		captured := e.sign(e.request(http.MethodGet, e.base+"/whoami", nil), key, signer.Options{SignatureAgent: e.origin(uid), Legacy: true}).Header
		ok := 0
		for i, sa := range same {
			r := e.send(e.resend(http.MethodGet, e.base+"/whoami", captured, sa, nil))
			switch {
			case r.status == http.StatusOK:
				ok++
			case i > 0 && r.status == http.StatusUnauthorized && r.errorCode(t) == "replayed_nonce":
			default:
				t.Errorf("Signature-Agent %s: %d %s, want 200 once, then 401 replayed_nonce", sa, r.status, r.body)
			}
		}
		if ok != 1 {
			t.Errorf("the captured request was accepted %d times, want 1", ok)
		}
		for _, sa := range other {
			r := e.send(e.resend(http.MethodGet, e.base+"/whoami", captured, sa, nil))
			r.wantError(t, "Signature-Agent "+sa, http.StatusUnauthorized, "invalid_signature_agent")
		}
	})
}

// TestCompatRotateAfterWhoami: with the vestauth-compat routes, a /whoami
// request already served, resent to POST /rotate (vestauth's signature
// covers only @authority, so it verifies there) with any spelling of its
// Signature-Agent, is refused as a replay: the agent keeps its key.
func TestCompatRotateAfterWhoami(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		e := compatEnv(t, db, nil)
		victim, attacker := signertest.Key(0x62), signertest.Key(0x63)
		uid, h := e.compatAgent(t, victim, "/whoami")
		if r := e.send(e.compatReq(http.MethodGet, e.base+"/whoami", "", h, nil)); r.status != http.StatusOK {
			t.Fatalf("GET /whoami: %d %s", r.status, r.body)
		}
		captured := http.Header{}
		for k, v := range h {
			captured.Set(k, v)
		}
		same, other := e.agentSpellings(uid)
		for _, sa := range same {
			r := e.send(e.resend(http.MethodPost, e.base+"/rotate", captured, sa, jwkBody(attacker.Public.JWK)))
			r.wantError(t, "POST /rotate with Signature-Agent "+sa, http.StatusUnauthorized, "replayed_nonce")
		}
		for _, sa := range other {
			r := e.send(e.resend(http.MethodPost, e.base+"/rotate", captured, sa, jwkBody(attacker.Public.JWK)))
			r.wantError(t, "POST /rotate with Signature-Agent "+sa, http.StatusUnauthorized, "invalid_signature_agent")
		}
		e.wantOnlyKey(uid, victim.KeyID())
	})
}

// TestUnauthenticatedLookups: an unsigned-by-anyone-known request to
// /whoami carrying eight signatures by eight unregistered keys costs at
// most one key lookup in the database.
func TestUnauthenticatedLookups(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{0, -1} { // the default cache, and none
		t.Run(fmt.Sprintf("KeyCacheTTL=%v", ttl), func(t *testing.T) {
			t.Parallel()
			dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
				e := newTestEnvConfig(t, db, "", func(c *refserver.Config) { c.KeyCacheTTL = ttl })
				uid := e.register(signertest.Key(0x64))
				queries := countKeyQueries(t, db)
				r := e.request(http.MethodGet, e.base+"/whoami", nil)
				for i := range 8 {
					e.sign(r, signertest.Key(byte(0x70+i)), signer.Options{Label: fmt.Sprintf("sig%d", i+1)})
				}
				r.Header.Set("Signature-Agent", `"`+e.origin(uid)+`"`)
				e.send(r).wantError(t, "GET /whoami with 8 unknown keys", http.StatusUnauthorized, "unknown_key")
				if n := queries.Load(); n != 1 {
					t.Errorf("key lookups in the database = %d, want 1", n)
				}
			})
		})
	}
}
