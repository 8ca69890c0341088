package signer_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer"
)

const testUID = "agent-0123456789abcdef01234567"

func TestValidUID(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want bool
	}{
		{testUID, true},
		{"agent-0123456789ABCDEF01234567", false},
		{"agent-0123456789abcdef0123456", false},
		{"agent-0123456789abcdef012345678", false},
		{"agent_0123456789abcdef01234567", false},
		{"agent-0123456789abcdeg01234567", false},
		{"", false},
	} {
		if got := signer.ValidUID(tt.in); got != tt.want {
			t.Errorf("ValidUID(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestNewUID(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		uid, err := signer.NewUID(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !signer.ValidUID(uid) || seen[uid] {
			t.Fatalf("NewUID() = %q: invalid or repeated", uid)
		}
		seen[uid] = true
	}
	if _, err := signer.NewUID(strings.NewReader("short")); err == nil {
		t.Error("NewUID with a short reader: no error")
	}
}

func TestUIDFromOrigin(t *testing.T) {
	t.Parallel()
	tests := []struct{ origin, want string }{
		{"https://" + testUID + ".agentid.example", testUID},
		{"http://" + testUID + ".localhost:3000", testUID},
		{"https://agentid.example", ""},
		{"https://agent-0123.agentid.example", ""},
		{"https://AGENT-0123456789ABCDEF01234567.agentid.example", ""},
		{"https://" + testUID, ""},
	}
	for _, tt := range tests {
		if got := signer.UIDFromOrigin(tt.origin); got != tt.want {
			t.Errorf("UIDFromOrigin(%q) = %q, want %q", tt.origin, got, tt.want)
		}
	}
}

func TestParseServiceURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "http://localhost:3000", want: "http://localhost:3000"},
		{in: "https://AgentID.example:443/", want: "https://agentid.example"},
		{in: "http://localhost:80", want: "http://localhost"},
		{in: "agentid.example", want: "https://agentid.example"},
		{in: "https://[::1]:8443", want: "https://[::1]:8443"},
		{in: "", wantErr: "empty"},
		{in: "ftp://x.example", wantErr: "scheme"},
		{in: "https://u:p@x.example", wantErr: "user information"},
		{in: "https://x.example/api", wantErr: "path"},
		{in: "https://x.example?q", wantErr: "query"},
		{in: "https://x.example#f", wantErr: "fragment"},
		{in: "https://x.example:", wantErr: "host[:port]"},
		{in: "http://localhost:18081:80", wantErr: "URL"},
	}
	for _, tt := range tests {
		got, err := signer.ParseServiceURL(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, signer.ErrInvalidServiceURL) {
				t.Errorf("ParseServiceURL(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got.String() != tt.want {
			t.Errorf("ParseServiceURL(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	s, _ := signer.ParseServiceURL("http://localhost:3000")
	if got, want := s.DirectoryURL(testUID), "http://"+testUID+".localhost:3000"+signer.DirectoryPath; got != want {
		t.Errorf("DirectoryURL = %q, want %q", got, want)
	}
	for host, want := range map[string]string{
		testUID + ".localhost:3000":       testUID,
		"localhost:3000":                  "",
		"x" + testUID + ".localhost:3000": "",
		testUID + "localhost:3000":        "",
		testUID + ".localhost:30000":      "",
	} {
		if got := s.UIDOfHost(host); got != want {
			t.Errorf("UIDOfHost(%q) = %q, want %q", host, got, want)
		}
	}
}

func TestAgentMemberKeySet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		field    string
		wantURL  string // "" means refused with ErrInvalidSignatureAgent
		wantKind signer.KeySetKind
	}{
		{`sig1="https://Agent.Example:443"`, "https://agent.example" + signer.DirectoryPath, signer.KindDirectory},
		{`sig1="agent.example/"`, "https://agent.example" + signer.DirectoryPath, signer.KindDirectory},
		{`sig1="https://agent.example/keys.json";type=jwks_uri`, "https://agent.example/keys.json", signer.KindJWKS},
		{`sig1="https://agent.example/card.json";type="cimd"`, "https://agent.example/card.json", signer.KindCard},
		{`sig1="https://agent.example/keys";type=directory`, "https://agent.example/keys", signer.KindDirectory},
		{`sig1="https://agent.example/keys";type=1`, "", 0},
		{`sig1="https://agent.example/keys";type=?1`, "", 0},
		{`sig1="https://agent.example/keys";type=other`, "", 0},
		{`sig1="https://u@agent.example"`, "", 0},
		{`sig1="http://[fe80::1%25eth0]"`, "", 0},
		{`sig1="https://agent.example/a b"`, "", 0},
		{`sig1="https://agent.example/a\\b"`, "", 0},
		{`sig1="ftp://agent.example"`, "", 0},
	}
	for _, tt := range tests {
		sa, err := signer.ParseSignatureAgent([]string{tt.field})
		if err != nil {
			t.Errorf("ParseSignatureAgent(%s) = %v", tt.field, err)
			continue
		}
		ks, err := sa.Members()[0].KeySet()
		if tt.wantURL == "" {
			if !errors.Is(err, signer.ErrInvalidSignatureAgent) {
				t.Errorf("%s: KeySet = %+v, %v; want ErrInvalidSignatureAgent", tt.field, ks, err)
			}
			continue
		}
		if err != nil || ks.URL != tt.wantURL || ks.Kind != tt.wantKind {
			t.Errorf("%s: KeySet = %+v, %v; want %s kind %v", tt.field, ks, err, tt.wantURL, tt.wantKind)
		}
	}
}
