package refserver_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

// TestOperatorChangesAcrossInstances: an operator's disable, enable and
// revoke through the database (AgentDB, as idcli server agents|keys does)
// reach two instances once each reads the change log: a disabled agent's
// requests are 403 forbidden and its directory an empty key set, a revoked
// key is revoked_key; each instance logs the change it applies, naming who
// made it.
func TestOperatorChangesAcrossInstances(t *testing.T) {
	t.Parallel()
	for _, backend := range dbtest.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			url := backend.URL(t)
			db := dbtest.Migrated(t, url)
			a := newTestEnvConfig(t, db, "", refserver.ManualKeySync)
			b := a.sibling(db, refserver.ManualKeySync)
			ctx := context.Background()
			envs := []*testEnv{a, b}
			syncAll := func() {
				t.Helper()
				for _, e := range envs {
					if !e.srv.KeySource().SyncChanges(ctx) {
						t.Fatal("SyncChanges failed")
					}
				}
			}
			syncAll()
			k1, k2, other := signertest.Key(141), signertest.Key(142), signertest.Key(143)
			uid := a.register(k1)
			otherUID := a.register(other)
			if r := a.send(a.rotateReq(uid, k1, k2)); r.status != http.StatusOK {
				t.Fatalf("rotate: %d %s", r.status, r.body)
			}
			check := func(what string, key signer.PrivateKey, wantStatus int, wantCode string, wantDir int) {
				t.Helper()
				for i, e := range envs {
					r := e.send(e.whoamiReq(http.MethodGet, uid, key))
					code := ""
					if r.status != http.StatusOK {
						code = r.errorCode(t)
					}
					if r.status != wantStatus || code != wantCode {
						t.Errorf("%s: instance %d: whoami %d %q (%s), want %d %q", what, i, r.status, code, r.body, wantStatus, wantCode)
					}
					if d := e.send(e.request(http.MethodGet, e.directoryURL(uid), nil)); d.status != wantDir {
						t.Errorf("%s: instance %d: directory %d, want %d", what, i, d.status, wantDir)
					}
				}
			}
			check("before any change (both cache k2)", k2, 200, "", 200)

			adb, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer adb.Close()
			const actor = "idcli server agents disable (user tester on host1)"
			ctx = store.WithActor(ctx, actor)
			info, changed, err := adb.SetAgentDisabled(ctx, uid, true, "abuse")
			if err != nil || !changed || info.DisabledAt == nil || info.ActiveKeys != 1 || len(info.Keys) != 2 {
				t.Fatalf("disable: %+v changed %v err %v", info, changed, err)
			}
			if _, changed, err := adb.SetAgentDisabled(ctx, uid, true, actor); err != nil || changed {
				t.Errorf("disable again: changed %v err %v, want no change", changed, err)
			}
			syncAll()
			check("disabled", k2, 403, "forbidden", 200)
			for i, e := range envs {
				// An empty key set, not a 404: third parties drop the keys
				// they cached (a 404 reads as an outage to them).
				if d := e.send(e.request(http.MethodGet, e.directoryURL(uid), nil)); strings.TrimSpace(string(d.body)) != `{"keys":[]}` {
					t.Errorf("instance %d: disabled agent's directory = %s, want {\"keys\":[]}", i, d.body)
				}
			}
			if r := a.send(a.registerReq(k2)); r.status != http.StatusForbidden {
				t.Errorf("registering a disabled agent's key: %d %s, want 403", r.status, r.body)
			}
			if r := a.send(a.rotateReq(uid, k2, signertest.Key(144))); r.status != http.StatusForbidden {
				t.Errorf("rotating a disabled agent's key: %d %s, want 403", r.status, r.body)
			}
			// Other agents are untouched.
			if r := b.send(b.whoamiReq(http.MethodGet, otherUID, other)); r.status != http.StatusOK {
				t.Errorf("another agent while uid is disabled: %d %s", r.status, r.body)
			}

			if _, changed, err := adb.SetAgentDisabled(ctx, uid, false, "idcli server agents enable (user tester on host1)"); err != nil || !changed {
				t.Fatalf("enable: changed %v err %v", changed, err)
			}
			syncAll()
			check("enabled again", k2, 200, "", 200)

			k, changed, err := adb.RevokeKey(ctx, uid, k2.KeyID(), "idcli server keys revoke (user tester on host1)")
			if err != nil || !changed || k.RevokedAt == nil {
				t.Fatalf("revoke: %+v changed %v err %v", k, changed, err)
			}
			if _, changed, err := adb.RevokeKey(ctx, uid, k2.KeyID(), "again"); err != nil || changed {
				t.Errorf("revoke again: changed %v err %v, want no change", changed, err)
			}
			syncAll()
			check("key revoked", k2, 401, "revoked_key", 200)
			if d := a.send(a.request(http.MethodGet, a.directoryURL(uid), nil)); strings.Contains(string(d.body), k2.KeyID()) {
				t.Errorf("directory still lists the revoked key: %s", d.body)
			}
			if r := a.send(a.registerReq(k2)); r.status != http.StatusConflict {
				t.Errorf("registering a revoked key again: %d %s, want 409", r.status, r.body)
			}

			// Wrong targets: named errors, nothing changed.
			if _, _, err := adb.RevokeKey(ctx, uid, other.KeyID(), actor); !errors.Is(err, store.ErrNoSuchKey) {
				t.Errorf("revoke another agent's key through uid: %v, want ErrNoSuchKey", err)
			}
			if _, _, err := adb.SetAgentDisabled(ctx, "agent-aaaaaaaaaaaaaaaaaaaaaaaa", true, actor); !errors.Is(err, store.ErrNoSuchAgent) {
				t.Errorf("disable an unknown agent: %v, want ErrNoSuchAgent", err)
			}
			if r := b.send(b.whoamiReq(http.MethodGet, otherUID, other)); r.status != http.StatusOK {
				t.Errorf("another agent after a refused revoke: %d %s", r.status, r.body)
			}

			for i, e := range envs {
				logs := e.logs.String()
				for _, want := range []string{"change=disable", "change=enable", "change=revoke", `by="idcli server agents disable (user tester on host1)"`, "uid=" + uid} {
					if !strings.Contains(logs, want) {
						t.Errorf("instance %d log lacks %s:\n%s", i, want, logs)
					}
				}
			}
		})
	}
}

// TestRegistrationModes: closed registration refuses POST /agents (and
// vestauth's POST /register) with 403 forbidden naming the mode; token
// registration needs a valid invitation token in the Agentid-Invite
// header, covered by the signature, and spends one use per new agent.
func TestRegistrationModes(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		open := newTestEnvConfig(t, db, "", nil)
		existing := signertest.Key(151)
		existingUID := open.register(existing)

		closed := open.sibling(db, func(c *refserver.Config) { c.Registration = refserver.RegistrationClosed; c.VestauthCompat = true })
		r := closed.send(closed.registerReq(signertest.Key(152)))
		if r.wantError(t, "closed: POST /agents", http.StatusForbidden, "forbidden") && !strings.Contains(string(r.body), `registration mode \"closed\"`) {
			t.Errorf("closed: message does not name the mode: %s", r.body)
		}
		r = closed.send(closed.request(http.MethodPost, closed.base+"/register", []byte(`{}`)))
		r.wantError(t, "closed: POST /register", http.StatusForbidden, "forbidden")
		if r := closed.send(closed.whoamiReq(http.MethodGet, existingUID, existing)); r.status != http.StatusOK {
			t.Errorf("closed: a registered agent's whoami = %d %s, want 200", r.status, r.body)
		}

		tok := open.sibling(db, func(c *refserver.Config) { c.Registration = refserver.RegistrationToken })
		adb := store.New(db)
		token, info, err := adb.CreateInvite(ctx, "for test", 2, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(token, info.Prefix) || len(token) < 40 {
			t.Fatalf("token %q, prefix %q", token, info.Prefix)
		}
		var stored int64
		db.Raw("SELECT count(*) FROM invite_tokens WHERE prefix = ? AND note = ?", info.Prefix, "for test").Scan(&stored)
		if stored != 1 {
			t.Fatalf("invite rows = %d", stored)
		}
		inviteReq := func(key signer.PrivateKey, token string, covered bool) *http.Request {
			req := tok.request(http.MethodPost, tok.base+"/agents", jwkBody(key.Public.JWK))
			comps := append([]string(nil), signer.WriteComponents...)
			if token != "" {
				req.Header.Set(signer.InviteHeader, token)
				if covered {
					comps = append(comps, "agentid-invite")
				}
			}
			return tok.sign(req, key, signer.Options{Components: comps})
		}
		r = tok.send(inviteReq(signertest.Key(153), "", false))
		if r.wantError(t, "token: no token", http.StatusForbidden, "forbidden") && !strings.Contains(string(r.body), "Agentid-Invite") {
			t.Errorf("token: message does not say how to pass the token: %s", r.body)
		}
		tok.send(inviteReq(signertest.Key(153), token, false)).wantError(t, "token: token not covered by the signature", http.StatusUnauthorized, "missing_components")
		tok.send(inviteReq(signertest.Key(153), token+"x", true)).wantError(t, "token: wrong token", http.StatusForbidden, "forbidden")
		tok.send(inviteReq(signertest.Key(153), strings.ToUpper(token), true)).wantError(t, "token: respelled token", http.StatusForbidden, "forbidden")
		tok.send(inviteReq(signertest.Key(153), strings.Repeat("a", 4000), true)).wantError(t, "token: huge token", http.StatusForbidden, "forbidden")
		dup := inviteReq(signertest.Key(153), token, true)
		dup.Header.Add(signer.InviteHeader, token)
		tok.send(dup).wantError(t, "token: two Agentid-Invite headers", http.StatusBadRequest, "invalid_request")
		if n := countRows(t, db, &store.Agent{}); n != 1 {
			t.Fatalf("agents after refused registrations = %d, want 1", n)
		}

		// Two uses: two concurrent registrations with new keys and a third
		// one; exactly two agents are created.
		var wg sync.WaitGroup
		statuses := make([]int, 3)
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := tok.do(inviteReq(signertest.Key(byte(160+i)), token, true))
				if err != nil {
					t.Error(err)
					return
				}
				statuses[i] = resp.status
			}()
		}
		wg.Wait()
		created, refused := 0, 0
		for _, s := range statuses {
			switch s {
			case http.StatusCreated:
				created++
			case http.StatusForbidden:
				refused++
			}
		}
		if created != 2 || refused != 1 {
			t.Errorf("three registrations with a two-use token: statuses %v, want two 201 and one 403", statuses)
		}
		if n := countRows(t, db, &store.Agent{}); n != 3 {
			t.Errorf("agents = %d, want 3", n)
		}
		// A registered key registers again with a usable token (no new
		// agent, no use spent); a used-up token is refused whatever the
		// key (TestInvitationRuleWhateverTheKey).
		spare, _, _ := adb.CreateInvite(ctx, "spare", 1, 0)
		if r := tok.send(inviteReq(existing, spare, true)); r.status != http.StatusOK {
			t.Errorf("token: an already registered key: %d %s, want 200", r.status, r.body)
		}
		tok.send(inviteReq(existing, token, true)).wantError(t, "token: an already registered key with a used-up token", http.StatusForbidden, "forbidden")
		list, err := adb.ListInvites(ctx)
		if err != nil || len(list) != 2 || list[1].UsesLeft != 0 || list[1].Used != 2 || list[0].UsesLeft != 1 {
			t.Errorf("invites after use: %+v %v, want 0 uses left, 2 used", list, err)
		}

		// Revoked and expired tokens are refused.
		t2, i2, _ := adb.CreateInvite(ctx, "", 5, 0)
		if _, changed, err := adb.RevokeInvite(ctx, i2.ID); err != nil || !changed {
			t.Fatalf("revoke invite: %v %v", changed, err)
		}
		tok.send(inviteReq(signertest.Key(170), t2, true)).wantError(t, "token: revoked token", http.StatusForbidden, "forbidden")
		t3, _, _ := adb.CreateInvite(ctx, "", 5, time.Millisecond)
		time.Sleep(5 * time.Millisecond)
		tok.send(inviteReq(signertest.Key(171), t3, true)).wantError(t, "token: expired token", http.StatusForbidden, "forbidden")
		if _, _, err := adb.RevokeInvite(ctx, 999999); !errors.Is(err, store.ErrNoSuchToken) {
			t.Errorf("revoke an unknown invite: %v, want ErrNoSuchToken", err)
		}
		// The token is never stored in clear.
		var hits int64
		db.Raw("SELECT count(*) FROM invite_tokens WHERE note LIKE ? OR prefix = ?", "%"+token+"%", token).Scan(&hits)
		if hits != 0 {
			t.Error("a token is stored in clear")
		}
	})
}

// TestListAgentsLargePage: a page of more agents than one statement may
// name (idcli server agents list --limit allows 100,000; PostgreSQL takes
// at most 65,535 bound values, SQLite 32,766) lists every agent with its
// active keys: the key counts are read in batches.
func TestListAgentsLargePage(t *testing.T) {
	t.Parallel()
	for _, backend := range dbtest.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			db := dbtest.Migrated(t, backend.URL(t))
			const n = 1201 // more than two batches
			now := time.Now().UTC()
			agents := make([]store.Agent, n)
			keys := make([]store.PublicJWK, 0, n)
			for i := range agents {
				uid := fmt.Sprintf("agent-%024x", i)
				agents[i] = store.Agent{UID: uid, CreatedAt: now, UpdatedAt: now}
				if i%2 == 0 { // every other agent has one active key
					keys = append(keys, store.PublicJWK{Kid: fmt.Sprintf("kid-%d", i), AgentUID: uid, JWK: store.JSON(`{}`), CreatedAt: now})
				}
			}
			if err := db.CreateInBatches(agents, 200).Error; err != nil {
				t.Fatal(err)
			}
			if err := db.CreateInBatches(keys, 200).Error; err != nil {
				t.Fatal(err)
			}
			list, err := store.New(db).ListAgents(context.Background(), "", n+10, false)
			if err != nil {
				t.Fatalf("ListAgents: %v", err)
			}
			if len(list) != n {
				t.Fatalf("ListAgents listed %d agents, want %d", len(list), n)
			}
			for i, a := range list {
				if want := 1 - i%2; a.UID != agents[i].UID || a.ActiveKeys != want {
					t.Fatalf("agent %d = %s with %d active keys, want %s with %d", i, a.UID, a.ActiveKeys, agents[i].UID, want)
				}
			}
		})
	}
}

// TestSignedWritesOfAgentDisabledMeanwhile: an instance that has not read
// the change log yet still verifies a just-disabled agent's signature from
// its cache, but the write itself, under the agent's row lock that the
// operator's disable takes too, is refused with 403 forbidden: no rotation
// and no new directory signatures for a disabled agent, even in that
// window.
func TestSignedWritesOfAgentDisabledMeanwhile(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		e := newTestEnvConfig(t, db, "", refserver.ManualKeySync)
		e.srv.KeySource().SetMonoClock((&monoClock{}).Now) // its cache stays trusted
		ctx := context.Background()
		if !e.srv.KeySource().SyncChanges(ctx) {
			t.Fatal("SyncChanges failed")
		}
		key := signertest.Key(145)
		uid := e.register(key)
		if r := e.send(e.whoamiReq(http.MethodGet, uid, key)); r.status != http.StatusOK {
			t.Fatalf("whoami: %d %s", r.status, r.body)
		}
		if _, _, err := store.New(db).SetAgentDisabled(ctx, uid, true, "test"); err != nil {
			t.Fatal(err)
		}
		if r := e.send(e.whoamiReq(http.MethodGet, uid, key)); r.status != http.StatusOK {
			t.Fatalf("whoami before the log is read: %d %s, want 200 (cached: the window this test is about)", r.status, r.body)
		}
		now := time.Now()
		sig := e.signDir(uid, key, []signer.JWK{key.Public.JWK}, now, time.Hour)
		for what, req := range map[string]*http.Request{
			"rotation":             e.rotateReq(uid, key, signertest.Key(146)),
			"directory signatures": e.refreshReq(uid, key, []dirSig{sig}, now),
		} {
			if r := e.send(req); r.status != http.StatusForbidden || r.errorCode(t) != "forbidden" {
				t.Errorf("%s by the disabled agent: %d %s, want 403 forbidden", what, r.status, r.body)
			}
		}
		info, err := store.New(db).ShowAgent(ctx, uid)
		if err != nil || len(info.Keys) != 1 {
			t.Errorf("agent after the refused writes: %+v %v, want its one key", info, err)
		}
		if n := countRows(t, db, &store.DirectorySignature{}, "agent_uid = ?", uid); n != 0 {
			t.Errorf("%d directory signatures stored, want none", n)
		}
	})
}
