package refserver_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// approvalMode is the Config of registration mode approval, with
// vestauth's routes too.
func approvalMode(c *refserver.Config) {
	c.Registration = refserver.RegistrationApproval
	c.VestauthCompat = true
}

// wantEmptyDirectory checks that uid's directory is an empty key set served
// as every directory is (not a 404, so that third parties drop what they
// cached).
func (e *testEnv) wantEmptyDirectory(t *testing.T, what, uid string) {
	t.Helper()
	d := e.send(e.request(http.MethodGet, e.directoryURL(uid), nil))
	if d.status != http.StatusOK || strings.TrimSpace(string(d.body)) != `{"keys":[]}` {
		t.Errorf("%s: directory %d %s, want 200 {\"keys\":[]}", what, d.status, d.body)
	}
	if d.header.Get("Content-Type") != signer.DirectoryMediaType || d.header.Get("Cache-Control") != "max-age=60" ||
		d.header.Get("ETag") == "" || signer.VerifyContentDigest(d.header.Values("Content-Digest"), d.body) != nil {
		t.Errorf("%s: directory headers %v, want those of every directory", what, d.header)
	}
}

// whoamiCode returns the error code of uid's /whoami signed by key ("" for
// 200) and the answer.
func (e *testEnv) whoamiCode(t *testing.T, uid string, key signer.PrivateKey) (string, response) {
	t.Helper()
	r := e.send(e.whoamiReq(http.MethodGet, uid, key))
	if r.status == http.StatusOK {
		return "", r
	}
	return r.errorCode(t), r
}

// TestApprovalMode: in registration mode approval a new agent is pending:
// registration answers "state":"pending" (201, then 200 with is_new
// false), its directory is an empty key set, and its requests (whoami,
// rotation, directory signatures) are refused with 403 agent_pending on
// both instances until an operator approves it; then it verifies. A
// rejected agent stays refused with 403 agent_rejected, its directory
// empty; the operator's reason is told only to a request that verifies
// with its key.
func TestApprovalMode(t *testing.T) {
	t.Parallel()
	for _, backend := range dbtest.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			url := backend.URL(t)
			db := dbtest.Migrated(t, url)
			a := newTestEnvConfig(t, db, "", func(c *refserver.Config) { approvalMode(c); refserver.ManualKeySync(c) })
			b := a.sibling(db, func(c *refserver.Config) { approvalMode(c); refserver.ManualKeySync(c) })
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
			k1, k2, k3 := signertest.Key(161), signertest.Key(162), signertest.Key(163)

			r := a.send(a.registerReq(k1))
			body := r.json(t)
			uid, _ := body["uid"].(string)
			if r.status != http.StatusCreated || body["state"] != "pending" || body["is_new"] != true || !signer.ValidUID(uid) {
				t.Fatalf("register in approval mode: %d %s, want 201 with state pending", r.status, r.body)
			}
			r = b.send(b.registerReq(k1))
			if body := r.json(t); r.status != http.StatusOK || body["state"] != "pending" || body["is_new"] != false || body["uid"] != uid {
				t.Errorf("register the pending key again: %d %s, want 200, is_new false, state pending", r.status, r.body)
			}
			wantPending := func(what string) {
				t.Helper()
				for i, e := range envs {
					code, r := e.whoamiCode(t, uid, k1)
					if r.status != http.StatusForbidden || code != "agent_pending" || !strings.Contains(string(r.body), "not approved it yet") {
						t.Errorf("%s: instance %d: whoami %d %s, want 403 agent_pending", what, i, r.status, r.body)
					}
					e.wantEmptyDirectory(t, what, uid)
				}
				a.send(a.rotateReq(uid, k1, k3)).wantError(t, what+": rotate", http.StatusForbidden, "agent_pending")
				a.send(a.refreshReq(uid, k1, []dirSig{}, time.Now())).wantError(t, what+": refresh directory signatures", http.StatusForbidden, "agent_pending")
			}
			wantPending("pending")
			syncAll() // the instances cache the pending verdict
			wantPending("pending, cached")

			adb, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer adb.Close()
			octx := store.WithActor(ctx, "operator:alice")
			if _, changed, err := adb.ApproveAgent(octx, uid, "identity checked"); err != nil || !changed {
				t.Fatalf("approve: changed %v err %v", changed, err)
			}
			syncAll()
			for i, e := range envs {
				if code, r := e.whoamiCode(t, uid, k1); code != "" {
					t.Errorf("approved: instance %d: whoami %d %s, want 200", i, r.status, r.body)
				}
				if d := e.send(e.request(http.MethodGet, e.directoryURL(uid), nil)); !strings.Contains(string(d.body), k1.Public.JWK.X) {
					t.Errorf("approved: instance %d: directory %s lacks the key", i, d.body)
				}
			}
			if r := a.send(a.registerReq(k1)); r.status != http.StatusOK || r.json(t)["state"] != nil {
				t.Errorf("register the approved key again: %d %s, want 200 without a state", r.status, r.body)
			}
			if r := a.send(a.rotateReq(uid, k1, k3)); r.status != http.StatusOK {
				t.Errorf("approved: rotate: %d %s", r.status, r.body)
			}

			// A rejected agent: vestauth's registration is pending too.
			ruid := a.compatRegister(k2)
			if _, r := a.whoamiCode(t, ruid, k2); r.status != http.StatusForbidden {
				t.Fatalf("vestauth-registered agent in approval mode: whoami %d %s, want 403", r.status, r.body)
			}
			syncAll()
			const reason = "no contact address given"
			if _, changed, err := adb.RejectAgent(octx, ruid, reason); err != nil || !changed {
				t.Fatalf("reject: changed %v err %v", changed, err)
			}
			syncAll()
			for i, e := range envs {
				code, r := e.whoamiCode(t, ruid, k2)
				if r.status != http.StatusForbidden || code != "agent_rejected" || !strings.Contains(string(r.body), reason) {
					t.Errorf("rejected: instance %d: whoami %d %s, want 403 agent_rejected with the reason", i, r.status, r.body)
				}
				e.wantEmptyDirectory(t, "rejected", ruid)
				// A signature that does not verify with the agent's key
				// learns nothing of the agent.
				forged := e.whoamiReq(http.MethodGet, ruid, k2)
				forged.Header.Set("Signature", "sig1=:"+base64.StdEncoding.EncodeToString(make([]byte, 64))+":")
				fr := e.send(forged)
				if code := fr.errorCode(t); fr.status != http.StatusUnauthorized || code == "agent_rejected" || strings.Contains(string(fr.body), reason) {
					t.Errorf("rejected, forged signature: instance %d: %d %s, want 401 without the reason", i, fr.status, fr.body)
				}
				// Replayed: refused as a replay, the reason not told again.
				req := e.whoamiReq(http.MethodGet, ruid, k2)
				e.send(req.Clone(ctx))
				if rr := e.send(req); rr.status == http.StatusForbidden || strings.Contains(string(rr.body), reason) {
					t.Errorf("rejected, replayed whoami: instance %d: %d %s, want a replay refusal", i, rr.status, rr.body)
				}
			}
			rot := a.send(a.rotateReq(ruid, k2, signertest.Key(164)))
			if rot.wantError(t, "rejected: rotate", http.StatusForbidden, "agent_rejected") && strings.Contains(string(rot.body), reason) {
				t.Errorf("rejected: rotate (checked before the signature) tells the reason: %s", rot.body)
			}
			if r := a.send(a.registerReq(k2)); r.wantError(t, "rejected: register again", http.StatusForbidden, "agent_rejected") && !strings.Contains(string(r.body), reason) {
				t.Errorf("rejected: register again (proves the key) lacks the reason: %s", r.body)
			}
			if _, _, err := adb.ApproveAgent(octx, ruid, ""); !errors.Is(err, store.ErrNotPending) {
				t.Errorf("approve a rejected agent: %v, want ErrNotPending", err)
			}
			for i, e := range envs {
				for _, want := range []string{"change=approve", "change=reject", `by=operator:alice`} {
					if !strings.Contains(e.logs.String(), want) {
						t.Errorf("instance %d log lacks %s", i, want)
					}
				}
			}
		})
	}
}

// TestApprovalAcrossInstancesWithin1s: with the change log read as in
// production (no manual reads), an operator's approval and rejection
// through the database reach two instances that cached the pending
// verdict and directory within 1 s.
func TestApprovalAcrossInstancesWithin1s(t *testing.T) {
	t.Parallel()
	for _, backend := range dbtest.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			url := backend.URL(t)
			db := dbtest.Migrated(t, url)
			a := newTestEnvConfig(t, db, "", approvalMode)
			b := a.sibling(db, approvalMode)
			envs := []*testEnv{a, b}
			ctx := context.Background()
			adb, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer adb.Close()
			k1, k2 := signertest.Key(171), signertest.Key(172)
			uid1, uid2 := a.register(k1), a.register(k2)
			// Both instances read the log and cache the pending verdicts.
			deadline := time.Now().Add(3 * time.Second)
			for _, e := range envs {
				for e.srv.KeySource().ChangeReads() < 2 && time.Now().Before(deadline) {
					e.whoamiCode(t, uid1, k1)
					time.Sleep(50 * time.Millisecond)
				}
				e.whoamiCode(t, uid2, k2)
				e.wantEmptyDirectory(t, "pending", uid1)
			}

			// reached polls every instance until ok holds for it, and
			// returns how long the slowest took.
			reached := func(what string, ok func(e *testEnv) bool) time.Duration {
				t.Helper()
				start := time.Now()
				var slowest time.Duration
				for i, e := range envs {
					for !ok(e) {
						if time.Since(start) > 3*time.Second {
							t.Fatalf("%s: instance %d never applied it", what, i)
						}
						time.Sleep(10 * time.Millisecond)
					}
					slowest = max(slowest, time.Since(start))
				}
				return slowest
			}
			if _, _, err := adb.ApproveAgent(ctx, uid1, ""); err != nil {
				t.Fatal(err)
			}
			if d := reached("approval", func(e *testEnv) bool {
				code, _ := e.whoamiCode(t, uid1, k1)
				dir := e.send(e.request(http.MethodGet, e.directoryURL(uid1), nil))
				return code == "" && strings.Contains(string(dir.body), k1.Public.JWK.X)
			}); d > time.Second {
				t.Errorf("approval reached both instances after %v, want within 1 s", d)
			}
			if _, _, err := adb.RejectAgent(ctx, uid2, "spam"); err != nil {
				t.Fatal(err)
			}
			if d := reached("rejection", func(e *testEnv) bool {
				code, _ := e.whoamiCode(t, uid2, k2)
				return code == "agent_rejected"
			}); d > time.Second {
				t.Errorf("rejection reached both instances after %v, want within 1 s", d)
			}
		})
	}
}
