package refserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/signertest"
)

// keyStatus is GET /keys/{kid}/status on the service host.
func (e *testEnv) keyStatus(kid string) response {
	e.t.Helper()
	return e.send(e.request(http.MethodGet, e.base+"/keys/"+kid+"/status", nil))
}

// wantKeyStatus checks a 200 answer of GET /keys/{kid}/status: exactly
// kid, status and (for a key rotated away or revoked) revoked_at, the
// cache and CORS headers.
func (e *testEnv) wantKeyStatus(what, kid, status string) {
	e.t.Helper()
	r := e.keyStatus(kid)
	if r.status != http.StatusOK {
		e.t.Errorf("%s: %d %s, want 200", what, r.status, r.body)
		return
	}
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		e.t.Fatalf("%s: %s: %v", what, r.body, err)
	}
	wantMembers := []string{"kid", "status"}
	if status == store.KeyRotated || status == store.KeyRevoked {
		wantMembers = append(wantMembers, "revoked_at")
		if at, _ := m["revoked_at"].(string); at == "" {
			e.t.Errorf("%s: revoked_at %v", what, m["revoked_at"])
		} else if ts, err := time.Parse(time.RFC3339, at); err != nil || time.Since(ts) > time.Minute {
			e.t.Errorf("%s: revoked_at %s is not a recent RFC 3339 time", what, at)
		}
	}
	var members []string
	for k := range m {
		members = append(members, k)
	}
	slices.Sort(members)
	slices.Sort(wantMembers)
	if m["kid"] != kid || m["status"] != status || !slices.Equal(members, wantMembers) {
		e.t.Errorf("%s: %s, want kid %s, status %s and only %v", what, r.body, kid, status, wantMembers)
	}
	if cc := r.header.Get("Cache-Control"); cc != "public, max-age=30" {
		e.t.Errorf("%s: Cache-Control %q", what, cc)
	}
	if r.header.Get("Access-Control-Allow-Origin") != "*" || r.header.Get("Content-Type") != "application/json" {
		e.t.Errorf("%s: headers %v", what, r.header)
	}
}

// TestKeyStatus: the public status of a key through its life: active,
// suspended while its agent is disabled or pending, rotated away, revoked
// by an operator, revoked for good once its agent is deleted; HEAD too; the route
// answers on the service host only and to GET and HEAD only.
func TestKeyStatus(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		db := store.New(e.db)
		k1, k2 := signertest.Key(71), signertest.Key(72)
		uid := e.register(k1)
		e.wantKeyStatus("registered", k1.KeyID(), store.KeyActive)
		if _, _, err := db.SetAgentDisabled(ctx, uid, true, "abuse"); err != nil {
			t.Fatal(err)
		}
		e.wantKeyStatus("agent disabled", k1.KeyID(), store.KeySuspended)
		r := e.keyStatus(k1.KeyID())
		if strings.Contains(string(r.body), uid) || strings.Contains(string(r.body), "abuse") {
			t.Errorf("the status names the agent or the reason: %s", r.body)
		}
		if _, _, err := db.SetAgentDisabled(ctx, uid, false, ""); err != nil {
			t.Fatal(err)
		}
		if resp := e.send(e.rotateReq(uid, k1, k2)); resp.status != http.StatusOK {
			t.Fatalf("rotate: %d %s", resp.status, resp.body)
		}
		e.wantKeyStatus("rotated away", k1.KeyID(), store.KeyRotated)
		e.wantKeyStatus("the new key", k2.KeyID(), store.KeyActive)
		if _, _, err := db.RevokeKey(ctx, uid, k2.KeyID(), "leaked"); err != nil {
			t.Fatal(err)
		}
		e.wantKeyStatus("revoked", k2.KeyID(), store.KeyRevoked)
		if r := e.keyStatus(k2.KeyID()); strings.Contains(string(r.body), "leaked") {
			t.Errorf("the status shows the operator's reason: %s", r.body)
		}

		k3 := signertest.Key(73)
		pending := "agent-0000000000000000000000aa"
		if err := db.CreateAgent(ctx, store.NewAgent{UID: pending, Kid: k3.KeyID(), JWK: k3.Public.JWK.MarshalPublic(), Now: time.Now().UTC(), Pending: true}); err != nil {
			t.Fatal(err)
		}
		e.wantKeyStatus("agent pending", k3.KeyID(), store.KeySuspended)

		head := e.send(e.request(http.MethodHead, e.base+"/keys/"+k3.KeyID()+"/status", nil))
		if head.status != http.StatusOK || len(head.body) != 0 || head.header.Get("Cache-Control") == "" {
			t.Errorf("HEAD: %d %q %v", head.status, head.body, head.header)
		}
		post := e.send(e.request(http.MethodPost, e.base+"/keys/"+k3.KeyID()+"/status", nil))
		if post.wantError(t, "POST", http.StatusMethodNotAllowed, "method_not_allowed") && post.header.Get("Allow") != "GET, HEAD" {
			t.Errorf("POST: Allow %q", post.header.Get("Allow"))
		}
		onAgent := e.send(e.request(http.MethodGet, e.origin(uid)+"/keys/"+k3.KeyID()+"/status", nil))
		onAgent.wantError(t, "on an agent host", http.StatusNotFound, "not_found")
		elsewhere := e.request(http.MethodGet, e.base+"/keys/"+k3.KeyID()+"/status", nil)
		elsewhere.Host = "elsewhere.test"
		e.send(elsewhere).wantError(t, "on another host", http.StatusMisdirectedRequest, "misdirected_request")

		if err := db.DeleteAgent(ctx, uid); err != nil {
			t.Fatal(err)
		}
		e.wantKeyStatus("a deleted agent's rotated key", k1.KeyID(), store.KeyRevoked)
		e.wantKeyStatus("a deleted agent's revoked key", k2.KeyID(), store.KeyRevoked)
		r = e.keyStatus(signertest.Key(74).KeyID())
		if r.wantError(t, "unknown key", http.StatusNotFound, "not_found") && r.header.Get("Cache-Control") != "no-store" {
			t.Errorf("404: Cache-Control %q, want no-store", r.header.Get("Cache-Control"))
		}
	})
}

// TestKeyStatusHostile: kids that cannot be a thumbprint, and respellings
// of a good one (escapes, a query), are refused 4xx before the database
// is read: the database is closed, and a well-formed kid answers 503.
func TestKeyStatusHostile(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		kid := signertest.Key(75).KeyID()
		e.register(signertest.Key(75))
		e.wantKeyStatus("before", kid, store.KeyActive)
		sqlDB, err := e.db.DB()
		if err != nil {
			t.Fatal(err)
		}
		sqlDB.Close()
		// The last character of a thumbprint carries 4 bits and 2 zero
		// ones: "B" sets a stray bit.
		stray := kid[:42] + "B"
		if strings.HasSuffix(kid, "B") {
			stray = kid[:42] + "C"
		}
		for _, c := range []struct {
			name, path string
			status     int
			code       string
		}{
			{"44 characters", "/keys/" + kid + "A/status", 400, "invalid_request"},
			{"42 characters", "/keys/" + kid[:42] + "/status", 400, "invalid_request"},
			{"10 kB", "/keys/" + strings.Repeat("A", 10_000) + "/status", 400, "invalid_request"},
			{"standard base64", "/keys/" + kid[:42] + "+/status", 400, "invalid_request"},
			{"padding", "/keys/" + kid[:42] + "=/status", 400, "invalid_request"},
			{"dot", "/keys/" + kid[:42] + "./status", 400, "invalid_request"},
			{"stray bits", "/keys/" + stray + "/status", 400, "invalid_request"},
			{"uid", "/keys/agent-0123456789abcdef01234567/status", 400, "invalid_request"},
			{"SQL", "/keys/'%20OR%201=1--/status", 400, "invalid_request"},
			{"percent-encoded first character", "/keys/" + fmt.Sprintf("%%%02X", kid[0]) + kid[1:] + "/status", 400, "invalid_request"},
			{"encoded NUL", "/keys/" + kid[:42] + "%00/status", 400, "invalid_request"},
			{"encoded newline", "/keys/" + kid[:21] + "%0A" + kid[21:] + "/status", 400, "invalid_request"},
			{"query", "/keys/" + kid + "/status?x=1", 400, "invalid_request"},
			{"bare ?", "/keys/" + kid + "/status?", 400, "invalid_request"},
			{"encoded slash", "/keys/" + kid[:21] + "%2F" + kid[21:] + "/status", 404, "not_found"},
			{"empty", "/keys//status", 404, "not_found"},
			{"trailing slash", "/keys/" + kid + "/status/", 404, "not_found"},
			{"dot segment", "/keys/" + kid + "/../status", 404, "not_found"},
			{"good kid, database down", "/keys/" + kid + "/status", 503, "database_unavailable"},
		} {
			r := e.send(e.request(http.MethodGet, e.base+c.path, nil))
			r.wantError(t, c.name, c.status, middleware.Code(c.code))
		}
	})
}
