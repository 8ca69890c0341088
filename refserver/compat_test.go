package refserver_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/ratelimit"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

// compatEnv is a test server with Config.VestauthCompat on.
func compatEnv(t *testing.T, db *gorm.DB, configure func(*refserver.Config)) *testEnv {
	t.Helper()
	return newTestEnvConfig(t, db, "", func(c *refserver.Config) {
		vestauthCompat(c)
		if configure != nil {
			configure(c)
		}
	})
}

// vestauthCompat turns the vestauth-compat routes on.
func vestauthCompat(c *refserver.Config) { c.VestauthCompat = true }

// compatNonce is a fresh 64-byte nonce, base64url as vestauth sends it.
func compatNonce(t testing.TB) string {
	b := make([]byte, 64)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// vestauthHeaders builds the headers vestauth 0.21.1 sends for a request to
// rawURL, byte for byte in its parameter order: one signature over
// @authority with tag, expires created+window, and Signature-Agent origin
// unless origin is "".
func vestauthHeaders(t testing.TB, rawURL string, key signer.PrivateKey, tag, origin string, window int64) map[string]string {
	t.Helper()
	created := time.Now().Unix()
	params := fmt.Sprintf(`("@authority");created=%d;keyid="%s";alg="ed25519";expires=%d;nonce="%s";tag="%s"`,
		created, key.KeyID(), created+window, compatNonce(t), tag)
	base, err := signer.SignatureBase(httptest.NewRequest(http.MethodGet, rawURL, nil), params)
	if err != nil {
		t.Fatalf("signature base for %s: %v", params, err)
	}
	h := map[string]string{
		"Signature":       "sig1=:" + base64.StdEncoding.EncodeToString(ed25519.Sign(key.Key, base)) + ":",
		"Signature-Input": "sig1=" + params,
	}
	if origin != "" {
		h["Signature-Agent"] = `sig1="` + origin + `"`
	}
	return h
}

// compatReq is a request to url (Host overridden when host is not "") with
// headers and body; Content-Type application/json when there is a body.
func (e *testEnv) compatReq(method, url, host string, headers map[string]string, body []byte) *http.Request {
	e.t.Helper()
	req := e.request(method, url, body)
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return req
}

// compatRegister registers key through POST /register as vestauth does
// (tag "null", no Signature-Agent) and returns the uid.
func (e *testEnv) compatRegister(key signer.PrivateKey) string {
	e.t.Helper()
	h := vestauthHeaders(e.t, e.base+"/register", key, refserver.NullTag, "", 300)
	r := e.send(e.compatReq(http.MethodPost, e.base+"/register", "", h, jwkBody(key.Public.JWK)))
	if r.status != http.StatusOK {
		e.t.Fatalf("POST /register (vestauth-style, tag=null): status = %d (%s), want 200", r.status, r.body)
	}
	uid, _ := r.json(e.t)["uid"].(string)
	return uid
}

// vestauthAs is the headers vestauth sends for a request to path as the
// agent uid holding key: tag web-bot-auth, Signature-Agent the agent's
// origin, expires 300 s after created.
func (e *testEnv) vestauthAs(t testing.TB, key signer.PrivateKey, uid, path string) map[string]string {
	t.Helper()
	return vestauthHeaders(t, e.base+path, key, "web-bot-auth", e.origin(uid), 300)
}

// compatAgent registers key through POST /register (compatRegister) and
// returns the agent's uid and the headers vestauth sends as that agent for
// a request to path (vestauthAs).
func (e *testEnv) compatAgent(t testing.TB, key signer.PrivateKey, path string) (string, map[string]string) {
	t.Helper()
	uid := e.compatRegister(key)
	return uid, e.vestauthAs(t, key, uid, path)
}

// rotateWith is POST /rotate to newKey carrying the signature headers h.
func (e *testEnv) rotateWith(h map[string]string, newKey signer.PrivateKey) *http.Request {
	return e.compatReq(http.MethodPost, e.base+"/rotate", "", h, jwkBody(newKey.Public.JWK))
}

// compatRotate is vestauth's POST /rotate to newKey, signed by signing
// with tag web-bot-auth, the Signature-Agent origin (none when "") and
// expires created+window.
func (e *testEnv) compatRotate(signing, newKey signer.PrivateKey, origin string, window int64) response {
	e.t.Helper()
	return e.send(e.rotateWith(vestauthHeaders(e.t, e.base+"/rotate", signing, "web-bot-auth", origin, window), newKey))
}

// directoryKids returns the kids of uid's directory.
func (e *testEnv) directoryKids(uid string) []string {
	e.t.Helper()
	r := e.send(e.request(http.MethodGet, e.directoryURL(uid), nil))
	if r.status != http.StatusOK {
		e.t.Fatalf("GET %s: status = %d (%s), want 200", e.directoryURL(uid), r.status, r.body)
	}
	var d struct {
		Keys []signer.JWK `json:"keys"`
	}
	if err := json.Unmarshal(r.body, &d); err != nil {
		e.t.Fatal(err)
	}
	kids := make([]string, len(d.Keys))
	for i, k := range d.Keys {
		kids[i] = k.Kid
	}
	return kids
}

func (e *testEnv) wantOnlyKey(uid, kid string) {
	e.t.Helper()
	if got := e.directoryKids(uid); len(got) != 1 || got[0] != kid {
		e.t.Errorf("directory of %s lists %v, want only %s", uid, got, kid)
	}
}

func TestCompatRoutesOffByDefault(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		key := signertest.Key(201)
		for _, path := range []string{"/register", "/rotate"} {
			h := vestauthHeaders(t, e.base+path, key, refserver.NullTag, "", 300)
			r := e.send(e.compatReq(http.MethodPost, e.base+path, "", h, jwkBody(key.Public.JWK)))
			r.wantError(t, fmt.Sprintf("POST %s without VestauthCompat", path), http.StatusNotFound, refserver.CodeNotFound)
		}
	})
}

func TestCompatRegister(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		// A Signature-Agent in a request must never be fetched: count any hit.
		var fetched atomic.Int32
		lure := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fetched.Add(1)
			w.Header().Set("Content-Type", signer.DirectoryMediaType)
			fmt.Fprintf(w, `{"keys":[%s]}`, signertest.Key(209).Public.JWK.MarshalPublic())
		}))
		defer lure.Close()

		e := compatEnv(t, db, nil)
		key := signertest.Key(202)
		url := e.base + "/register"
		body := jwkBody(key.Public.JWK)

		first := e.send(e.compatReq(http.MethodPost, url, "", vestauthHeaders(t, url, key, refserver.NullTag, "", 300), body))
		if first.status != http.StatusOK {
			t.Fatalf("vestauth POST /register (tag=null): status = %d (%s), want 200", first.status, first.body)
		}
		got := first.json(t)
		uid, _ := got["uid"].(string)
		if !strings.HasPrefix(uid, "agent-") || got["kid"] != key.KeyID() || got["is_new"] != true {
			t.Errorf("first POST /register answered %s, want a new uid with kid %s and is_new true", first.body, key.KeyID())
		}
		if pj, _ := got["public_jwk"].(map[string]any); pj["x"] != key.Public.JWK.X || pj["d"] != nil {
			t.Errorf("first POST /register public_jwk = %v, want x %s and no d", pj, key.Public.JWK.X)
		}

		tests := []struct {
			name     string
			headers  map[string]string
			body     []byte
			noCT     bool            // send no Content-Type
			ct       string          // Content-Type to send instead of application/json
			wantCode middleware.Code // "" → 200 with uid and is_new false
			status   int
		}{
			{"repeat, tag web-bot-auth", vestauthHeaders(t, url, key, "web-bot-auth", "", 300), body, false, "", "", 200},
			{"repeat, no Content-Type", vestauthHeaders(t, url, key, refserver.NullTag, "", 300), body, true, "", "", 200},
			{"repeat with a Signature-Agent (ignored, never fetched)", vestauthHeaders(t, url, key, refserver.NullTag, lure.URL, 300), body, false, "", "", 200},
			{"another tag", vestauthHeaders(t, url, key, "agentid-key-possession", "", 300), body, false, "", "invalid_signature_input", 401},
			{"signed by another key", vestauthHeaders(t, url, signertest.Key(203), refserver.NullTag, "", 300), body, false, "", "unknown_key", 401},
			{"made for another host", vestauthHeaders(t, "http://evil-tool.example/x", key, refserver.NullTag, "", 300), body, false, "", "invalid_signature", 401},
			{"window over 10 minutes", vestauthHeaders(t, url, key, refserver.NullTag, "", 3600), body, false, "", "signature_window_too_long", 401},
			{"no public_jwk, Signature-Agent names a directory", vestauthHeaders(t, url, signertest.Key(209), refserver.NullTag, lure.URL, 300), []byte(`{}`), false, "", "invalid_request", 400},
			{"public_jwk null", vestauthHeaders(t, url, key, refserver.NullTag, lure.URL, 300), []byte(`{"public_jwk":null}`), false, "", "invalid_request", 400},
			{"empty body", vestauthHeaders(t, url, key, refserver.NullTag, lure.URL, 300), []byte{}, false, "", "invalid_request", 400},
			{"private JWK in the body", vestauthHeaders(t, url, key, refserver.NullTag, "", 300), []byte(`{"public_jwk":` + string(key.MarshalPrivateJWK()) + `}`), false, "", "invalid_jwk", 400},
			{"text/plain", vestauthHeaders(t, url, key, refserver.NullTag, "", 300), body, false, "text/plain", "unsupported_media_type", 415},
			{"unsigned", nil, body, false, "", "missing_signature", 401},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				req := e.compatReq(http.MethodPost, url, "", tt.headers, tt.body)
				switch {
				case tt.noCT:
					req.Header.Del("Content-Type")
				case tt.ct != "":
					req.Header.Set("Content-Type", tt.ct)
				}
				r := e.send(req)
				if tt.wantCode == "" {
					if r.status != tt.status {
						t.Fatalf("status = %d (%s), want %d", r.status, r.body, tt.status)
					}
					if got := r.json(t); got["uid"] != uid || got["is_new"] != false {
						t.Errorf("answer %s, want uid %s with is_new false", r.body, uid)
					}
					return
				}
				r.wantError(t, "answer", tt.status, tt.wantCode)
			})
		}
		if n := fetched.Load(); n != 0 {
			t.Errorf("the server fetched the Signature-Agent URL %d times, want never", n)
		}
		e.wantOnlyKey(uid, key.KeyID())

		// The same captured registration twice: the nonce is spent.
		h := vestauthHeaders(t, url, signertest.Key(204), refserver.NullTag, "", 300)
		if r := e.send(e.compatReq(http.MethodPost, url, "", h, jwkBody(signertest.Key(204).Public.JWK))); r.status != http.StatusOK {
			t.Fatalf("POST /register for a second key: %d (%s), want 200", r.status, r.body)
		}
		r := e.send(e.compatReq(http.MethodPost, url, "", h, jwkBody(signertest.Key(204).Public.JWK)))
		r.wantError(t, "replayed POST /register", http.StatusUnauthorized, middleware.CodeReplayedNonce)

		// A native registration and a compat one of the same key meet.
		if r := e.send(e.registerReq(signertest.Key(204))); r.status != http.StatusOK || r.json(t)["is_new"] != false {
			t.Errorf("POST /agents for the key registered by /register: %d %s, want 200 is_new false", r.status, r.body)
		}
	})
}

func TestCompatRegisterRateLimited(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		lim, err := ratelimit.New(ratelimit.Config{Rate: 1.0 / 3600, Burst: 1})
		if err != nil {
			t.Fatal(err)
		}
		e := compatEnv(t, db, func(c *refserver.Config) { c.RegisterLimit = lim })
		e.compatRegister(signertest.Key(205))
		url := e.base + "/register"
		r := e.send(e.compatReq(http.MethodPost, url, "", vestauthHeaders(t, url, signertest.Key(206), refserver.NullTag, "", 300), jwkBody(signertest.Key(206).Public.JWK)))
		r.wantError(t, "second POST /register from one address over the limit", http.StatusTooManyRequests, ratelimit.CodeRateLimited)
	})
}

func TestCompatWhoami(t *testing.T) {
	t.Parallel()
	eachEnv(t, vestauthCompat, func(t *testing.T, e *testEnv) {
		key := signertest.Key(207)
		uid := e.compatRegister(key)
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			h := e.vestauthAs(t, key, uid, "/whoami")
			r := e.send(e.compatReq(method, e.base+"/whoami", "", h, nil))
			if r.status != http.StatusOK {
				t.Fatalf("vestauth %s /whoami: status = %d (%s), want 200", method, r.status, r.body)
			}
			got := r.json(t)
			if got["uid"] != uid || got["kid"] != key.KeyID() || got["well_known_url"] != e.directoryURL(uid) {
				t.Errorf("vestauth %s /whoami answered %s, want uid %s kid %s well_known_url %s", method, r.body, uid, key.KeyID(), e.directoryURL(uid))
			}
		}
		// /whoami keeps the native policy: vestauth's register tag is not enough there.
		h := vestauthHeaders(t, e.base+"/whoami", key, refserver.NullTag, e.origin(uid), 300)
		if r := e.send(e.compatReq(http.MethodGet, e.base+"/whoami", "", h, nil)); r.status != http.StatusUnauthorized {
			t.Errorf("GET /whoami with tag=null: status = %d (%s), want 401", r.status, r.body)
		}
	})
}

func TestCompatRotate(t *testing.T) {
	t.Parallel()
	eachEnv(t, vestauthCompat, func(t *testing.T, e *testEnv) {
		cur, next := signertest.Key(210), signertest.Key(211)
		uid := e.compatRegister(cur)
		tests := []struct {
			name     string
			signing  signer.PrivateKey
			newKey   signer.PrivateKey
			origin   string
			window   int64
			status   int
			wantCode middleware.Code
		}{
			{"no Signature-Agent", cur, next, "", 300, 401, "invalid_signature_agent"},
			{"Signature-Agent on another host", cur, next, "http://" + uid + ".evil.example", 300, 401, "untrusted_signature_agent"},
			{"Signature-Agent names no agent", cur, next, "http://" + e.host, 300, 401, "untrusted_signature_agent"},
			{"Signature-Agent names another agent", cur, next, e.origin("agent-0123456789abcdef01234567"), 300, 401, "unknown_key"},
			{"signed by an unregistered key", signertest.Key(212), next, e.origin(uid), 300, 401, "unknown_key"},
			{"window over 5 minutes", cur, next, e.origin(uid), 301, 401, "signature_window_too_long"},
			{"to the current key", cur, cur, e.origin(uid), 300, 409, "key_in_use"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := e.compatRotate(tt.signing, tt.newKey, tt.origin, tt.window)
				r.wantError(t, "POST /rotate", tt.status, tt.wantCode)
			})
		}
		e.wantOnlyKey(uid, cur.KeyID())

		r := e.compatRotate(cur, next, e.origin(uid), 300)
		if r.status != http.StatusOK {
			t.Fatalf("vestauth POST /rotate: status = %d (%s), want 200", r.status, r.body)
		}
		if got := r.json(t); got["uid"] != uid || got["kid"] != next.KeyID() {
			t.Errorf("POST /rotate answered %s, want uid %s kid %s", r.body, uid, next.KeyID())
		}
		e.wantOnlyKey(uid, next.KeyID())
		e.send(e.whoamiReq(http.MethodGet, uid, cur)).wantError(t, "whoami with the rotated-out key", http.StatusUnauthorized, middleware.CodeRevokedKey)
		if r := e.send(e.whoamiReq(http.MethodGet, uid, next)); r.status != http.StatusOK {
			t.Errorf("whoami with the new key: %d %s, want 200", r.status, r.body)
		}
		// The old key can no longer rotate; the native route works with the new one.
		e.compatRotate(cur, signertest.Key(213), e.origin(uid), 300).wantError(t, "POST /rotate by the rotated-out key", http.StatusUnauthorized, middleware.CodeRevokedKey)
		if r := e.send(e.rotateReq(uid, next, signertest.Key(213))); r.status != http.StatusOK {
			t.Errorf("PUT /agents/%s/keys after a compat rotation: %d %s, want 200", uid, r.status, r.body)
		}
		e.wantOnlyKey(uid, signertest.Key(213).KeyID())
	})
}

// The attacks vestauth's own server accepts on /rotate (weaknesses 1, 2
// and 4 in docs/security.md), each rejected here, and the one the compat
// route cannot stop, pinned so the documentation stays true.
func TestCompatRotateAttacks(t *testing.T) {
	t.Parallel()
	eachEnv(t, vestauthCompat, func(t *testing.T, e *testEnv) {
		attacker := signertest.Key(229)

		t.Run("Host header swap", func(t *testing.T) {
			key := signertest.Key(220)
			uid := e.compatRegister(key)
			// Headers the agent made for a third-party tool…
			h := vestauthHeaders(t, "https://evil-tool.example/x", key, "web-bot-auth", e.origin(uid), 300)
			// …presented with that tool's Host: refused before any handler.
			r := e.send(e.compatReq(http.MethodPost, e.base+"/rotate", "evil-tool.example", h, jwkBody(attacker.Public.JWK)))
			r.wantError(t, "POST /rotate with Host evil-tool.example", http.StatusMisdirectedRequest, middleware.CodeMisdirectedRequest)
			// …presented with the service's Host: the authority does not match.
			e.send(e.rotateWith(h, attacker)).wantError(t, "POST /rotate with headers made for evil-tool.example", http.StatusUnauthorized, middleware.CodeInvalidSignature)
			e.wantOnlyKey(uid, key.KeyID())
		})

		t.Run("three concurrent copies of one captured rotation", func(t *testing.T) {
			key := signertest.Key(221)
			uid, h := e.compatAgent(t, key, "/rotate")
			var keys [3]signer.PrivateKey
			reqs := make([]*http.Request, len(keys))
			for i := range keys {
				keys[i] = signertest.Key(byte(230 + i))
				reqs[i] = e.rotateWith(h, keys[i])
			}
			won := -1
			answers := e.doAll(reqs)
			for i, a := range answers {
				switch {
				case a.status == 0:
					t.Fatalf("copy %d: no answer: %s", i, a.body)
				case a.status == http.StatusOK && won < 0:
					won = i
				case a.status == http.StatusOK:
					t.Errorf("copies %d and %d of one captured POST /rotate both succeeded", won, i)
				default:
					// replayed_nonce, or revoked_key when the winner's
					// rotation committed before this copy's key lookup.
					if code := a.errorCode(t); a.status != http.StatusUnauthorized || code != "replayed_nonce" && code != "revoked_key" {
						t.Errorf("copy %d: %d %s, want 401 replayed_nonce or revoked_key", i, a.status, code)
					}
				}
			}
			if won < 0 {
				t.Fatalf("no copy of the captured POST /rotate succeeded: %+v", answers)
			}
			e.wantOnlyKey(uid, keys[won].KeyID())
		})

		t.Run("replayed nonce after a failed rotation", func(t *testing.T) {
			key := signertest.Key(222)
			uid, h := e.compatAgent(t, key, "/rotate")
			// Verified, then refused by the transaction: the nonce is spent all the same.
			r := e.send(e.rotateWith(h, key))
			if !r.wantError(t, "POST /rotate to the current key", http.StatusConflict, refserver.CodeKeyInUse) {
				t.FailNow()
			}
			e.send(e.rotateWith(h, attacker)).wantError(t, "the same signature again with another key", http.StatusUnauthorized, middleware.CodeReplayedNonce)
			e.wantOnlyKey(uid, key.KeyID())
		})

		t.Run("a served /whoami cannot be replayed to /rotate", func(t *testing.T) {
			key := signertest.Key(223)
			uid, h := e.compatAgent(t, key, "/whoami")
			if r := e.send(e.compatReq(http.MethodGet, e.base+"/whoami", "", h, nil)); r.status != http.StatusOK {
				t.Fatalf("GET /whoami: %d %s, want 200", r.status, r.body)
			}
			e.send(e.rotateWith(h, attacker)).wantError(t, "the /whoami signature presented to POST /rotate", http.StatusUnauthorized, middleware.CodeReplayedNonce)
			e.wantOnlyKey(uid, key.KeyID())
		})

		t.Run("a /whoami signature made with idcli's write profile cannot rotate", func(t *testing.T) {
			key := signertest.Key(224)
			uid := e.compatRegister(key)
			// Covers @method and @path: a GET /whoami signature does not fit POST /rotate.
			req := e.sign(e.request(http.MethodGet, e.base+"/whoami", nil), key,
				signer.Options{Components: []string{"@method", "@authority", "@path"}, SignatureAgent: e.origin(uid)})
			h := map[string]string{}
			for _, k := range []string{"Signature", "Signature-Input", "Signature-Agent"} {
				h[k] = req.Header.Get(k)
			}
			e.send(e.rotateWith(h, attacker)).wantError(t, "a GET /whoami signature covering @method @path presented to POST /rotate", http.StatusUnauthorized, middleware.CodeInvalidSignature)
			e.wantOnlyKey(uid, key.KeyID())
		})

		// The documented limit (docs/migrating-from-vestauth.md): an
		// @authority-only signature for this host that was never presented
		// rotates, whatever route it was made for.
		t.Run("documented: an unused @authority-only signature rotates", func(t *testing.T) {
			key := signertest.Key(225)
			uid, h := e.compatAgent(t, key, "/whoami")
			r := e.send(e.rotateWith(h, attacker))
			if r.status != http.StatusOK {
				t.Fatalf("an unused /whoami signature presented to POST /rotate: %d %s; the documented weakness is gone, update docs/migrating-from-vestauth.md and docs/security.md", r.status, r.body)
			}
			e.wantOnlyKey(uid, attacker.KeyID())
		})
	})
}

// keyRows is the public_jwks table as (kid, agent uid, revoked) lines,
// ordered by kid.
func keyRows(t *testing.T, db *gorm.DB) []string {
	t.Helper()
	var rows []store.PublicJWK
	if err := db.Order("kid").Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = fmt.Sprintf("%s %s revoked=%v", r.Kid, r.AgentUID, r.RevokedAt != nil)
	}
	return out
}

// TestCompatRotateKeyInUse: vestauth's /rotate proves nothing about the new
// key, so a key already registered to any agent (another agent's, or the
// caller's own current or revoked key) is refused with 409 key_in_use and
// the database is left as it was. The native rotation, which proves
// possession, keeps its own answer (key_conflict).
func TestCompatRotateKeyInUse(t *testing.T) {
	t.Parallel()
	eachEnv(t, vestauthCompat, func(t *testing.T, e *testEnv) {
		rotate := func(uid string, signing, newKey signer.PrivateKey) response {
			t.Helper()
			return e.compatRotate(signing, newKey, e.origin(uid), 300)
		}

		victimKey, victimOld := signertest.Key(241), signertest.Key(240)
		victim := e.compatRegister(victimOld)
		if r := rotate(victim, victimOld, victimKey); r.status != http.StatusOK {
			t.Fatalf("victim rotation: %d %s", r.status, r.body)
		}
		callerOld, caller := signertest.Key(242), signertest.Key(243)
		uid := e.compatRegister(callerOld)
		if r := rotate(uid, callerOld, caller); r.status != http.StatusOK {
			t.Fatalf("caller rotation: %d %s", r.status, r.body)
		}

		tests := []struct {
			name   string
			newKey signer.PrivateKey
		}{
			{"another agent's active key", victimKey},
			{"another agent's revoked key", victimOld},
			{"the caller's own current key", caller},
			{"the caller's own revoked key", callerOld},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				before := keyRows(t, e.db)
				r := rotate(uid, caller, tt.newKey)
				r.wantError(t, "POST /rotate to "+tt.name, http.StatusConflict, refserver.CodeKeyInUse)
				if after := keyRows(t, e.db); strings.Join(after, "\n") != strings.Join(before, "\n") {
					t.Errorf("public_jwks changed:\nbefore %v\nafter  %v", before, after)
				}
			})
		}
		e.wantOnlyKey(uid, caller.KeyID())
		e.wantOnlyKey(victim, victimKey.KeyID())
		if r := e.send(e.whoamiReq(http.MethodGet, victim, victimKey)); r.status != http.StatusOK {
			t.Errorf("whoami of the victim after the refused rotations: %d %s, want 200", r.status, r.body)
		}

		// The native rotation proves possession of the new key; an already
		// registered one stays key_conflict there.
		e.send(e.rotateReq(uid, caller, callerOld)).wantError(t, fmt.Sprintf("PUT /agents/%s/keys to the caller's revoked key", uid), http.StatusConflict, refserver.CodeKeyConflict)
	})
}
