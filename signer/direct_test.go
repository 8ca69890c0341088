package signer_test

import (
	"errors"
	"testing"

	"github.com/agentid/agentid/signer"
)

func TestParseDirectKeySetURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, wantURL, wantID string
		wellKnown           bool
	}{
		{"https://agent.example", "https://agent.example/", "https://agent.example/", false},
		{"https://Agent.Example:443/", "https://agent.example/", "https://agent.example/", false},
		{"http://agent-x.localhost:3000", "http://agent-x.localhost:3000/", "http://agent-x.localhost:3000/", false},
		{"https://agent.example/keys/jwks.json", "https://agent.example/keys/jwks.json", "https://agent.example/keys/jwks.json", false},
		{"https://agent.example" + signer.DirectoryPath, "https://agent.example" + signer.DirectoryPath, "https://agent.example", true},
	}
	for _, tt := range tests {
		ks, err := signer.ParseDirectKeySetURL(tt.in)
		if err != nil {
			t.Errorf("ParseDirectKeySetURL(%q): %v", tt.in, err)
			continue
		}
		if ks.URL != tt.wantURL || ks.WellKnown != tt.wellKnown || ks.Identity() != tt.wantID {
			t.Errorf("ParseDirectKeySetURL(%q) = {URL:%q WellKnown:%v Identity:%q}, want {%q %v %q}", tt.in, ks.URL, ks.WellKnown, ks.Identity(), tt.wantURL, tt.wellKnown, tt.wantID)
		}
	}
	for _, bad := range []string{"agent.example", "agent.example/keys", "ftp://agent.example", "https://", "https://u@agent.example/"} {
		if _, err := signer.ParseDirectKeySetURL(bad); !errors.Is(err, signer.ErrInvalidSignatureAgent) {
			t.Errorf("ParseDirectKeySetURL(%q) = %v, want ErrInvalidSignatureAgent", bad, err)
		}
	}
}

func TestAgentMemberFormFlags(t *testing.T) {
	t.Parallel()
	sa, err := signer.ParseSignatureAgent([]string{`a="https://a.example", b=b.example, c="https://c.example";type=jwks_uri`})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ token, params bool }{{false, false}, {true, false}, {false, true}}
	for i, m := range sa.Members() {
		if m.Token != want[i].token || m.Params != want[i].params {
			t.Errorf("member %s: Token=%v Params=%v, want %v %v", m.Key, m.Token, m.Params, want[i].token, want[i].params)
		}
	}
}
