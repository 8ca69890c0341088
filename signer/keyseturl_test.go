package signer_test

import (
	"testing"

	"github.com/agentid/agentid/signer"
)

// TestParseKeySetURLNormalises: every spelling of one URL (RFC 3986
// §6.2.2–6.2.3) resolves to one key-set URL and one identity; what is not
// the same URL (another query, another path) stays apart.
func TestParseKeySetURLNormalises(t *testing.T) {
	t.Parallel()
	const origin = "https://agent.example"
	const dir = origin + "/.well-known/http-message-signatures-directory"
	tests := []struct {
		in, wantURL, wantID string
		wellKnown           bool
	}{
		{"https://agent.example", dir, origin, true},
		{"agent.example", dir, origin, true},
		{"HTTPS://AGENT.Example", dir, origin, true},
		{"https://agent.example:443", dir, origin, true},
		{"https://agent.example/", dir, origin, true},
		{"https://agent.example/?", dir, origin, true},
		{"https://agent.example?", dir, origin, true},
		{"https://agent.example/./", dir, origin, true},
		{"https://agent.example/a/..", dir, origin, true},
		{"https://agent.example/.well-known/http-message-signatures-directory", dir, origin, true},
		{"https://agent.example/%2Ewell-known/http-message-signatures-directory", dir, origin, true},
		{"https://agent.example/%2ewell%2Dknown/http-message-signatures-directory", dir, origin, true},
		{"https://agent.example/x/../.well-known/./http-message-signatures-directory", dir, origin, true},
		{"https://agent.example/.well-known/http-message-signatures-directory?", dir, origin, true},
		// A query is part of the URL fetched and of the identity.
		{"https://agent.example?r=1", origin + "/?r=1", origin + "/?r=1", false},
		{"https://agent.example/?r=1", origin + "/?r=1", origin + "/?r=1", false},
		{"https://agent.example/.well-known/http-message-signatures-directory?r=1", dir + "?r=1", dir + "?r=1", true},
		{"https://agent.example/keys?a=%7e%2f", origin + "/keys?a=~%2F", origin + "/keys?a=~%2F", false},
		// Paths: unreserved characters decoded, other escapes uppercased.
		{"https://agent.example/k%65ys/%7euser/%2fa", origin + "/keys/~user/%2Fa", origin + "/keys/~user/%2Fa", false},
		{"https://agent.example/keys/../jwks.json", origin + "/jwks.json", origin + "/jwks.json", false},
		{"https://agent.example/keys/./", origin + "/keys/", origin + "/keys/", false},
		{"http://agent.example:80/jwks.json", "http://agent.example/jwks.json", "http://agent.example/jwks.json", false},
		{"http://agent.example:8080", "http://agent.example:8080/.well-known/http-message-signatures-directory", "http://agent.example:8080", true},
	}
	for _, tt := range tests {
		ks, err := signer.ParseKeySetURL(tt.in)
		if err != nil {
			t.Errorf("ParseKeySetURL(%q): %v", tt.in, err)
			continue
		}
		if ks.URL != tt.wantURL || ks.Identity() != tt.wantID || ks.WellKnown != tt.wellKnown {
			t.Errorf("ParseKeySetURL(%q) = URL %q, identity %q, well-known %v; want %q, %q, %v", tt.in, ks.URL, ks.Identity(), ks.WellKnown, tt.wantURL, tt.wantID, tt.wellKnown)
		}
		// Normalising is idempotent.
		again, err := signer.ParseKeySetURL(ks.URL)
		if err != nil || again.URL != ks.URL {
			t.Errorf("ParseKeySetURL(%q) = %q, %v; want it unchanged", ks.URL, again.URL, err)
		}
	}
	for _, bad := range []string{"https://agent.example/%zz", "https://agent.example/%4", "https://agent.example/?q=%", "ftp://agent.example"} {
		if ks, err := signer.ParseKeySetURL(bad); err == nil {
			t.Errorf("ParseKeySetURL(%q) = %q, want an error", bad, ks.URL)
		}
	}
}
