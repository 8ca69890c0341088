package main

import (
	"fmt"
	"testing"

	"github.com/agentid/agentid/keyfetch"
)

// TestLocalDevFlags: every local-development flag a key set needs is
// named at once, from its URL alone or from the refusal.
func TestLocalDevFlags(t *testing.T) {
	private := fmt.Errorf("fetch: %w: 10.0.0.5", keyfetch.ErrPrivateAddress)
	for _, tc := range []struct {
		url          string
		cause        error
		http, privOK bool
		want         string
	}{
		{"http://127.0.0.1:3000", nil, false, false, "--allow-http and --allow-private"},
		{"http://agent-x.localhost:3000/keys.json", nil, false, false, "--allow-http and --allow-private"},
		{"http://[::1]:3000", nil, true, false, "--allow-private"},
		{"http://192.168.1.10", nil, false, true, "--allow-http"},
		{"https://10.0.0.5", nil, false, false, "--allow-private"},
		{"https://keys.example", private, false, false, "--allow-private"},
		{"https://keys.example", nil, false, false, ""},
		{"http://keys.example", nil, true, false, ""},
	} {
		missing, _ := localDevFlags([]string{tc.url}, tc.cause, tc.http, tc.privOK)
		if got := missing.String(); got != tc.want {
			t.Errorf("%s (cause %v, given %v %v): %q, want %q", tc.url, tc.cause, tc.http, tc.privOK, got, tc.want)
		}
	}
}

// TestRerunWith: the command line to run again is the one run, quoted for
// a shell where needed, with the flags before any "--".
func TestRerunWith(t *testing.T) {
	env := &cliEnv{args: []string{"tool", "verify", "GET", "http://127.0.0.1:3000/a b", "-H", "X: it's", "--", "-x"}}
	got := rerunWith(env, missingFlags{"--allow-http", "--allow-private"})
	want := `idcli tool verify GET 'http://127.0.0.1:3000/a b' -H 'X: it'\''s' --allow-http --allow-private -- -x`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
