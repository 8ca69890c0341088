package adminapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// hostileValues are what an operator's token holder (or a script fed
// someone else's data) may put in a path segment or a query value,
// percent-encoded as sent, that no path variable or query parameter
// takes: NUL, invalid UTF-8, an overlong NUL, a control character, and
// 10 KB.
var hostileValues = []string{
	"%00", "%00%00", "a%ffb", "%ff", "%C0%80", "%0A", "agent-%00" + strings.Repeat("0", 23),
	strings.Repeat("a", 10240), strings.Repeat("%ff", 3414),
}

// hugeNumbers are past every id (which are at most 2^63-1): refused by
// every variable and parameter but the free-text actor.
var hugeNumbers = []string{"9223372036854775808", "18446744073709551615", "18446744073709551616",
	"99999999999999999999999999999999"}

// oddValues may be good values of some parameter (an actor is free
// text, an id may have leading zeros): never a 5xx.
var oddValues = []string{"0", "-1", "+1", "1e3", "01", "9223372036854775807", "%20", "%27%20OR%201=1--", "%E2%80%AE"}

// hostileParams are the query parameters any admin route reads, and one
// none reads.
var hostileParams = []string{"state", "created_since", "kid", "invitation", "after", "limit",
	"agent", "action", "actor", "since", "before", "x%00"}

// hostileBodies are JSON bodies with hostile members.
var hostileBodies = []string{
	`{"reason":"\u0000"}`, "{\"reason\":\"a\xffb\"}", `{"reason":"` + strings.Repeat("a", 3000) + `"}`,
	`{"reason":"` + strings.Repeat("a", 10240) + `"}`, `{"reason":9223372036854775808}`,
	`{"note":"\u0000","uses":1}`, `{"uses":9223372036854775808}`, `{"uses":-9223372036854775809}`,
	`{"uses":1e400}`, `{"expires_in":18446744073709551616}`, `{"expires_in":-1}`, `{"uses":0.5}`,
	`{"\u0000":1}`, "{\"\xff\":1}",
}

// TestHostileInputs: every admin route, with each hostile value in each
// of its path variables, in each query parameter, and each hostile body,
// answers a 4xx JSON error: never a 5xx (the database is never handed
// what it would refuse), never a success.
func TestHostileInputs(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		tok := "Bearer " + e.token("root", store.Scopes()...)
		uid := e.agent(40, 41)
		kid := signertest.Key(41).KeyID()
		_, inv, err := e.db.CreateInvite(context.Background(), "", 1, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		good := map[string]string{"{uid}": uid, "{pending}": uid, "{kid}": kid, "{id}": fmt.Sprint(inv.ID)}
		fill := func(path string, hostileVar, value string) string {
			for v, g := range good {
				if v == hostileVar {
					g = value
				}
				path = strings.ReplaceAll(path, v, g)
			}
			return path
		}
		// check wants a 4xx JSON error (only no 5xx when odd).
		check := func(what string, a answer, odd bool) {
			t.Helper()
			switch {
			case a.status >= 500:
				t.Errorf("%s: %d %.300s, want no 5xx", what, a.status, a.body)
			case !odd && (a.status < 400 || a.errorCode() == "?"):
				t.Errorf("%s: %d %.300s, want a 4xx JSON error", what, a.status, a.body)
			}
		}
		type value struct {
			s   string
			odd func(param string) bool
		}
		var values []value
		for _, h := range hostileValues {
			values = append(values, value{h, func(string) bool { return false }})
		}
		for _, h := range hugeNumbers {
			values = append(values, value{h, func(p string) bool { return p == "actor" }})
		}
		for _, h := range oddValues {
			values = append(values, value{h, func(string) bool { return true }})
		}
		calls := 0
		for _, c := range scopeCases {
			for _, v := range []string{"{uid}", "{pending}", "{kid}", "{id}"} {
				if !strings.Contains(c.path, v) {
					continue
				}
				for _, h := range values {
					path := fill(c.path, v, h.s)
					check(c.method+" "+signer.Truncate(path), e.call(c.method, path, "", tok), h.odd(""))
					calls++
				}
			}
			for _, p := range hostileParams {
				for _, h := range values {
					path := fill(c.path, "", "") + "?" + p + "=" + h.s
					check(c.method+" "+signer.Truncate(path), e.call(c.method, path, "", tok), h.odd(p))
					calls++
				}
			}
			if c.method == http.MethodGet {
				continue
			}
			for _, b := range hostileBodies {
				check(fmt.Sprintf("%s %s body %.80q", c.method, c.path, b), e.call(c.method, fill(c.path, "", ""), b, tok), false)
				calls++
			}
		}
		// Nothing changed: the agent and its keys, the invitation.
		if info, err := e.db.ShowAgent(context.Background(), uid); err != nil || info.ActiveKeys != 2 || info.DisabledAt != nil {
			t.Errorf("the agent after %d hostile calls: %+v %v", calls, info, err)
		}
		if list, err := e.db.ListInvites(context.Background()); err != nil || len(list) != 1 || list[0].RevokedAt != nil {
			t.Errorf("the invitations after %d hostile calls: %+v %v", calls, list, err)
		}
	})
}
