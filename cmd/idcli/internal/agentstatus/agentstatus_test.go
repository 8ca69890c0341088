package agentstatus_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/agentid/agentid/cmd/idcli/internal/agentstatus"
	"github.com/agentid/agentid/signer/agent"
	"github.com/agentid/agentid/signer/signertest"
)

// TestCheckAnswers: each answer of /whoami maps to its state; a service
// that answers for another agent, or not as agentid does, gives no state;
// control characters in the service's words never reach the terminal; the
// request is signed by the agent's key for its origin.
func TestCheckAnswers(t *testing.T) {
	t.Parallel()
	const uid = "agent-0123456789abcdef01234567"
	key := signertest.Key(7)
	errBody := func(status int, code, msg string) string {
		return `{"error":{"status":` + strconv.Itoa(status) + `,"code":"` + code + `","message":"` + msg + `"}}`
	}
	cases := []struct {
		name   string
		status int
		body   string
		state  string
		reason string
		errSub string
	}{
		{"active", 200, `{"uid":"` + uid + `"}`, agentstatus.StateActive, "", ""},
		{"pending", 403, errBody(403, "agent_pending", "agent "+uid+" is pending review"), agentstatus.StatePending, "", ""},
		{"rejected", 403, errBody(403, "agent_rejected", "agent "+uid+" was rejected by the operator of this service: spam: twice"), agentstatus.StateRejected, "spam: twice", ""},
		{"rejected, no reason told", 403, errBody(403, "agent_rejected", "agent "+uid+" was rejected by the operator of this service"), agentstatus.StateRejected, "", ""},
		{"escapes dropped", 403, errBody(403, "agent_rejected", "agent "+uid+" was rejected by the operator of this service: \\u001b[31mred\\u0007\\u009b"), agentstatus.StateRejected, "[31mred", ""},
		{"disabled", 403, errBody(403, "forbidden", "disabled"), agentstatus.StateDisabled, "", ""},
		{"revoked", 401, errBody(401, "revoked_key", "revoked"), agentstatus.StateRevoked, "", ""},
		{"unknown", 401, errBody(401, "unknown_key", "unknown"), agentstatus.StateUnknown, "", ""},
		{"another agent's 200", 200, `{"uid":"agent-ffffffffffffffffffffffff"}`, "", "", "not for " + uid},
		{"not agentid", 404, `<html>nope</html>`, "", "", "no agentid error"},
		{"database down", 503, errBody(503, "database_unavailable", "retry"), "", "", "503 database_unavailable: retry"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/whoami" || !strings.Contains(r.Header.Get("Signature-Agent"), uid+".") ||
					!strings.Contains(r.Header.Get("Signature-Input"), `keyid="`+key.KeyID()+`"`) {
					http.Error(w, "unsigned", http.StatusTeapot)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(c.status)
				w.Write([]byte(c.body))
			}))
			defer srv.Close()
			creds := agent.Credentials{UID: uid, Key: key, Hostname: srv.URL}
			st, err := agentstatus.Check(context.Background(), creds, nil)
			switch {
			case c.errSub != "":
				if err == nil || !strings.Contains(err.Error(), c.errSub) {
					t.Errorf("Check: %+v %v, want an error with %q", st, err, c.errSub)
				}
			case err != nil || st.State != c.state || st.Reason != c.reason || st.UID != uid || st.Kid != key.KeyID():
				t.Errorf("Check: %+v %v, want state %q reason %q", st, err, c.state, c.reason)
			}
			if strings.ContainsAny(st.Message+st.Reason, "\x1b\x07\u009b") {
				t.Errorf("control characters kept: %q", st.Message)
			}
		})
	}
}
