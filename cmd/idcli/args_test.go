package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer"
)

// dashKeys returns n fixed keys whose key ids (RFC 7638 thumbprints,
// base64url) begin with "-", as about one key in 64 does.
func dashKeys(n int) []signer.PrivateKey {
	var keys []signer.PrivateKey
	for i := 0; len(keys) < n; i++ {
		seed := sha256.Sum256([]byte{byte(i >> 8), byte(i)})
		k := signer.NewPrivateKey(ed25519.NewKeyFromSeed(seed[:]))
		if strings.HasPrefix(k.KeyID(), "-") {
			keys = append(keys, k)
		}
	}
	return keys
}

// TestRevokeDashKeyID: `idcli server keys revoke UID KID` revokes a key
// whose kid begins with "-" however the operator writes it (the kid after
// the uid, after "--", with flags before and after), on the database of a
// running server: the key is revoked there and the server refuses it. It
// used to fail with "unknown flag" and leave the compromised key active.
// A mistyped flag after the arguments is still an unknown flag.
func TestRevokeDashKeyID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := dbtest.PostgresURL(t)
	dir := t.TempDir()
	if r := runCLI(ctx, dir, nil, "server", "db:migrate", "--database-url", dbURL); r.err != nil {
		t.Fatal(r.err)
	}
	srv := startServerOn(t, freePort(t), dir, dbURL, "--bind", "127.0.0.1", "--rate-limit", "off")
	environ := map[string]string{"DATABASE_URL": dbURL, "USER": "tester"}

	cases := []struct {
		name string
		args func(uid, kid string) []string
	}{
		{"UID -KID", func(uid, kid string) []string { return []string{"server", "keys", "revoke", uid, kid} }},
		{"-- UID -KID", func(uid, kid string) []string { return []string{"server", "keys", "revoke", "--", uid, kid} }},
		{"UID -- -KID", func(uid, kid string) []string { return []string{"server", "keys", "revoke", uid, "--", kid} }},
		{"flags before", func(uid, kid string) []string {
			return []string{"server", "keys", "revoke", "--json", "--database-url", dbURL, uid, kid}
		}},
		{"flags after", func(uid, kid string) []string {
			return []string{"server", "keys", "revoke", uid, kid, "--json", "--database-url=" + dbURL}
		}},
		{"flags between", func(uid, kid string) []string {
			return []string{"server", "keys", "revoke", uid, "--json", kid, "--database-url", dbURL}
		}},
		{"flags before and after, then --", func(uid, kid string) []string {
			return []string{"server", "keys", "revoke", "--json", "--database-url", dbURL, "--", uid, kid}
		}},
	}
	keys := dashKeys(len(cases))
	for i, tt := range cases {
		key := keys[i]
		reg := clitest.MustSend(t, http.DefaultClient, srv.registerReq(t, key))
		if reg.Status != http.StatusCreated {
			t.Fatalf("%s: register: %d %s", tt.name, reg.Status, reg.Body)
		}
		uid := jsonField(t, reg.Body, "uid")
		if st, code := srv.send(t, clitest.WhoamiRequest(t, srv.base, uid, key)); st != http.StatusOK {
			t.Fatalf("%s: whoami before the revocation: %d %s", tt.name, st, code)
		}
		args := tt.args(uid, key.KeyID())
		r := runCLI(ctx, dir, environ, args...)
		if r.err != nil {
			t.Errorf("%s: idcli %s: %v\n%s", tt.name, strings.Join(args, " "), r.err, r.stderr)
			continue
		}
		if slices.Contains(args, "--json") {
			var out struct {
				Key     struct{ Kid string } `json:"key"`
				Changed bool                 `json:"changed"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || !out.Changed || out.Key.Kid != key.KeyID() {
				t.Errorf("%s: output %q, want the key %s revoked", tt.name, r.stdout, key.KeyID())
			}
		} else if !strings.Contains(r.stdout, "key "+key.KeyID()+" of "+uid+" revoked") {
			t.Errorf("%s: output %q, want the key %s revoked", tt.name, r.stdout, key.KeyID())
		}
		shown := runCLI(ctx, dir, environ, "server", "agents", "show", uid, "--json")
		var agent struct {
			ActiveKeys int `json:"active_keys"`
			Keys       []struct {
				Kid       string     `json:"kid"`
				RevokedAt *time.Time `json:"revoked_at"`
			} `json:"keys"`
		}
		if err := json.Unmarshal([]byte(shown.stdout), &agent); err != nil || agent.ActiveKeys != 0 || len(agent.Keys) != 1 || agent.Keys[0].Kid != key.KeyID() || agent.Keys[0].RevokedAt == nil {
			t.Errorf("%s: agents show after the revocation: %s %v, want its one key revoked", tt.name, shown.stdout, shown.err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			st, code := srv.send(t, clitest.WhoamiRequest(t, srv.base, uid, key))
			if st == http.StatusUnauthorized && code == "revoked_key" {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: whoami with the revoked key: %d %s, want 401 revoked_key", tt.name, st, code)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// The help says how.
	if r := runCLI(ctx, dir, nil, "server", "keys", "revoke", "--help"); !strings.Contains(r.stdout, "idcli server keys revoke UID -KID") || !strings.Contains(r.stdout, "idcli server keys revoke -- UID -KID") {
		t.Errorf("server keys revoke --help does not say how to revoke a kid that begins with -:\n%s", r.stdout)
	}

	// A mistyped flag after the arguments is still an unknown flag, not
	// an argument, and nothing is revoked.
	uid := "agent-0123456789abcdef01234567"
	for _, args := range [][]string{
		{"server", "keys", "revoke", uid, keys[0].KeyID(), "--jsn"},
		{"server", "keys", "revoke", uid, "--jsn", keys[0].KeyID()},
		{"server", "agents", "show", uid, "--jsn"},
	} {
		r := runCLI(ctx, dir, environ, args...)
		if r.err == nil || !strings.Contains(r.err.Error(), "unknown flag --jsn (did you mean --json?)") {
			t.Errorf("idcli %s: %v, want unknown flag --jsn (did you mean --json?)", strings.Join(args, " "), r.err)
		}
	}
}
