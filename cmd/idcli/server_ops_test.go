package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestServerOperatorCommands: `idcli server agents disable|enable` and
// `idcli server keys revoke`, run on the PostgreSQL database of two
// running `idcli server start` instances, take effect on both: every
// request begun more than 1 s after the command returned gets the new
// answer (403 forbidden and an empty key set as the directory of a
// disabled agent, revoked_key for a revoked key); each change is a log
// line naming it and the command.
func TestServerOperatorCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := dbtest.PostgresURL(t)
	dir := t.TempDir()
	if r := runCLI(ctx, dir, nil, "server", "db:migrate", "--database-url", dbURL); r.err != nil {
		t.Fatal(r.err)
	}
	a := startServerOn(t, freePort(t), dir, dbURL, "--bind", "127.0.0.1")
	b := startServerOn(t, freePort(t), dir, dbURL, "--bind", "127.0.0.1")
	servers := []*startedServer{a, b}
	ops := func(args ...string) cliResult {
		t.Helper()
		r := runCLI(ctx, dir, map[string]string{"DATABASE_URL": dbURL, "USER": "tester"}, append([]string{"server"}, args...)...)
		if r.err != nil {
			t.Fatalf("idcli server %s: %v\n%s", strings.Join(args, " "), r.err, r.stderr)
		}
		return r
	}

	key, other := signertest.Key(0xa1), signertest.Key(0xa2)
	reg := clitest.MustSend(t, http.DefaultClient, a.registerReq(t, key))
	var body struct{ UID string }
	if err := json.Unmarshal([]byte(reg.Body), &body); err != nil || reg.Status != http.StatusCreated {
		t.Fatalf("register: %d %s", reg.Status, reg.Body)
	}
	uid := body.UID
	otherReg := clitest.MustSend(t, http.DefaultClient, b.registerReq(t, other))
	if otherReg.Status != http.StatusCreated {
		t.Fatalf("register other: %d %s", otherReg.Status, otherReg.Body)
	}

	whoami := func(s *startedServer, k signer.PrivateKey) func() (int, string) {
		return func() (int, string) { return s.send(t, clitest.WhoamiRequest(t, s.base, uid, k)) }
	}
	directory := func(s *startedServer) func() (int, string) {
		return func() (int, string) {
			d := clitest.MustDo(t, http.MethodGet, s.base+signer.DirectoryPath, uid+".localhost:"+s.port, nil, nil)
			if d.Status == http.StatusOK && strings.TrimSpace(d.Body) == `{"keys":[]}` {
				return d.Status, "no key"
			}
			return d.Status, d.Code
		}
	}
	// within checks that try answers wantStatus (and wantCode) on every
	// attempt begun more than 1 s after since, polling until it does.
	within := func(what string, since time.Time, try func() (int, string), wantStatus int, wantCode string) {
		t.Helper()
		for {
			began := time.Now()
			status, code := try()
			if status == wantStatus && code == wantCode {
				return
			}
			if began.After(since.Add(time.Second)) {
				t.Fatalf("%s: a request begun %v after the change answered %d %q, want %d %q",
					what, began.Sub(since).Round(time.Millisecond), status, code, wantStatus, wantCode)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for i, s := range servers {
		for range 3 { // both instances cache the key
			if st, code := whoami(s, key)(); st != http.StatusOK {
				t.Fatalf("instance %d before any change: %d %s", i, st, code)
			}
		}
	}

	r := ops("agents", "disable", uid, "--json")
	changed := time.Now()
	var dis struct {
		Agent struct {
			UID        string     `json:"uid"`
			DisabledAt *time.Time `json:"disabled_at"`
		} `json:"agent"`
		Changed bool `json:"changed"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &dis); err != nil || !dis.Changed || dis.Agent.UID != uid || dis.Agent.DisabledAt == nil {
		t.Fatalf("agents disable --json: %s (%v)", r.stdout, err)
	}
	if !strings.Contains(r.stderr, `msg="agent disabled" uid=`+uid) || !strings.Contains(r.stderr, `by="idcli server agents disable (user tester on `) {
		t.Errorf("agents disable: log line missing or incomplete: %q", r.stderr)
	}
	for i, s := range servers {
		within("instance "+string(rune('A'+i))+": whoami of a disabled agent", changed, whoami(s, key), http.StatusForbidden, "forbidden")
		within("instance "+string(rune('A'+i))+": directory of a disabled agent", changed, directory(s), http.StatusOK, "no key")
	}
	if r := ops("agents", "disable", uid); !strings.Contains(r.stdout, "already disabled") {
		t.Errorf("agents disable twice: %q", r.stdout)
	}
	r = ops("agents", "list", "--disabled", "--json")
	var list struct {
		Agents []struct {
			UID string `json:"uid"`
		} `json:"agents"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Agents) != 1 || list.Agents[0].UID != uid {
		t.Errorf("agents list --disabled --json: %s", r.stdout)
	}
	if r := ops("agents", "list"); !strings.Contains(r.stdout, uid) || !strings.Contains(r.stdout, "disabled since") {
		t.Errorf("agents list: %s", r.stdout)
	}

	ops("agents", "enable", uid)
	changed = time.Now()
	for i, s := range servers {
		within("instance "+string(rune('A'+i))+": whoami once enabled", changed, whoami(s, key), http.StatusOK, "")
		within("instance "+string(rune('A'+i))+": directory once enabled", changed, directory(s), http.StatusOK, "")
	}

	r = ops("keys", "revoke", uid, key.KeyID())
	changed = time.Now()
	if !strings.Contains(r.stdout, "revoked") || !strings.Contains(r.stdout, "no active key left") {
		t.Errorf("keys revoke: %q", r.stdout)
	}
	if !strings.Contains(r.stderr, `msg="key revoked" uid=`+uid+` kid=`+key.KeyID()) {
		t.Errorf("keys revoke: log line missing: %q", r.stderr)
	}
	for i, s := range servers {
		within("instance "+string(rune('A'+i))+": whoami with a revoked key", changed, whoami(s, key), http.StatusUnauthorized, "revoked_key")
		within("instance "+string(rune('A'+i))+": directory without a key", changed, directory(s), http.StatusOK, "no key")
	}
	r = ops("agents", "show", uid, "--json")
	var shown struct {
		ActiveKeys int `json:"active_keys"`
		Keys       []struct {
			Kid       string     `json:"kid"`
			RevokedAt *time.Time `json:"revoked_at"`
		} `json:"keys"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || shown.ActiveKeys != 0 || len(shown.Keys) != 1 || shown.Keys[0].RevokedAt == nil {
		t.Errorf("agents show --json after revoke: %s", r.stdout)
	}
	// The other agent was never touched.
	if st, code := b.send(t, clitest.WhoamiRequest(t, b.base, strings.TrimSpace(jsonField(t, otherReg.Body, "uid")), other)); st != http.StatusOK {
		t.Errorf("another agent: %d %s", st, code)
	}

	// Wrong arguments: one line, nothing changed.
	for _, args := range [][]string{{"agents", "disable", "bob"}, {"keys", "revoke", uid, "nokid"}, {"agents", "show", "agent-aaaaaaaaaaaaaaaaaaaaaaaa"}} {
		r := runCLI(ctx, dir, map[string]string{"DATABASE_URL": dbURL}, append([]string{"server"}, args...)...)
		if r.err == nil || strings.Contains(r.err.Error(), "\n") {
			t.Errorf("idcli server %v: error %v, want one line", args, r.err)
		}
	}
}

func jsonField(t *testing.T, body, field string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	s, _ := m[field].(string)
	return s
}

// TestServerRegistrationModes: instances started with --registration
// closed and --registration token on one database (SQLite, PostgreSQL)
// refuse `idcli agent init` with a clear error, and the token instance registers an agent given an invitation
// token from `idcli server tokens create`, once per use.
func TestServerRegistrationModes(t *testing.T) {
	t.Parallel()
	for _, backend := range dbtest.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			t.Parallel()
			testServerRegistrationModes(t, backend.URL(t))
		})
	}
}

func testServerRegistrationModes(t *testing.T, dbURL string) {
	ctx := context.Background()
	dir := t.TempDir()
	if r := runCLI(ctx, dir, nil, "server", "db:migrate", "--database-url", dbURL); r.err != nil {
		t.Fatal(r.err)
	}
	closed := startServerOn(t, freePort(t), dir, dbURL, "--bind", "127.0.0.1", "--registration", "closed")
	tok := startServerOn(t, freePort(t), dir, dbURL, "--bind", "127.0.0.1", "--registration", "token")

	initAgent := func(base string, extra ...string) cliResult {
		return runCLI(ctx, t.TempDir(), nil, append([]string{"agent", "init", "--hostname", base}, extra...)...)
	}
	r := initAgent(closed.base)
	if r.err == nil || !strings.Contains(r.err.Error(), "registration on this service is closed") || !strings.Contains(r.err.Error(), "forbidden") {
		t.Errorf("agent init on a closed service: %v, want a forbidden error naming the closed mode", r.err)
	}
	r = initAgent(tok.base)
	if r.err == nil || !strings.Contains(r.err.Error(), "invitation token") || !strings.Contains(r.err.Error(), "--invite") {
		t.Errorf("agent init without a token: %v, want an error saying how to pass one", r.err)
	}

	cr := runCLI(ctx, dir, map[string]string{"DATABASE_URL": dbURL}, "server", "tokens", "create", "--uses", "1", "--note", "bob", "--json")
	if cr.err != nil {
		t.Fatal(cr.err)
	}
	token := jsonField(t, cr.stdout, "token")
	if !strings.HasPrefix(token, "agentid_inv_") {
		t.Fatalf("tokens create --json: %s", cr.stdout)
	}
	if strings.Contains(cr.stderr, token) {
		t.Errorf("the token reached the log line: %s", cr.stderr)
	}
	agentDir := t.TempDir()
	r = runCLI(ctx, agentDir, nil, "agent", "init", "--hostname", tok.base, "--invite", token)
	if r.err != nil || !strings.Contains(r.stdout, "✔ agent created") {
		t.Fatalf("agent init --invite: %v\n%s", r.err, r.stdout)
	}
	// The agent registering its key again with the token that created it
	// (now used up) is answered; another key with that token is refused.
	r = runCLI(ctx, agentDir, nil, "agent", "init", "--hostname", tok.base, "--invite", token)
	if r.err != nil || !strings.Contains(r.stdout, "• agent exists") {
		t.Errorf("agent init again with its own used-up token: %v\n%s", r.err, r.stdout)
	}
	r = initAgent(tok.base, "--invite", token)
	if r.err == nil || !strings.Contains(r.err.Error(), "not valid") {
		t.Errorf("agent init with a used-up token: %v, want an error saying the token is not valid", r.err)
	}
	if r = initAgent(closed.base, "--invite", token); r.err == nil {
		t.Error("agent init --invite on a closed service succeeded")
	}
	lr := runCLI(ctx, dir, map[string]string{"DATABASE_URL": dbURL}, "server", "tokens", "list")
	if lr.err != nil || !strings.Contains(lr.stdout, "used up (1 uses)") || strings.Contains(lr.stdout, token) {
		t.Errorf("tokens list: %v\n%s", lr.err, lr.stdout)
	}
	if rr := runCLI(ctx, dir, map[string]string{"DATABASE_URL": dbURL}, "server", "tokens", "revoke", "1"); rr.err != nil || !strings.Contains(rr.stdout, "revoked") {
		t.Errorf("tokens revoke: %v %s", rr.err, rr.stdout)
	}
}
