package redact_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer/redact"
)

// digest is what HostOnly appends to name s: '#' and the first 8 hex
// digits of its SHA-256.
func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "#" + hex.EncodeToString(sum[:])[:8]
}

// TestHostOnly is the table of capability URLs (a secret in the path,
// the query, the fragment or the user information) and of strings that
// are not quite URLs: none shows anything after its host. Every secret of
// the table contains "s3c".
func TestHostOnly(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"slack", "https://hooks.slack.com/services/T0A1B2C3D/B0E4F5G6H/s3cXyZ0123456789abcdEFGH", "https://hooks.slack.com/…"},
		{"discord", "https://discord.com/api/webhooks/123456789012345678/s3c-AbCdEf_0123456789", "https://discord.com/…"},
		{"discord, github suffix", "https://discord.com/api/webhooks/1234/s3cTOKEN/github", "https://discord.com/…"},
		{"query", "https://hooks.example/in?token=s3c", "https://hooks.example/…"},
		{"query, no path", "https://hooks.example?token=s3c", "https://hooks.example/…"},
		{"fragment", "https://hooks.example#s3c", "https://hooks.example/…"},
		{"port", "https://hooks.example:8443/s3c", "https://hooks.example:8443/…"},
		{"user information", "https://ops:s3c@hooks.example/in", "https://hooks.example/…"},
		{"@ in the password", "https://ops:s3c@s3c@hooks.example/", "https://hooks.example/"},
		{"/ in the password", "https://ops:s3c/s3c@hooks.example/", "…"},
		{"no path", "https://hooks.example", "https://hooks.example"},
		{"root path", "https://hooks.example/", "https://hooks.example/"},
		{"backslash", `https://hooks.example\s3c@evil.example/`, "https://hooks.example/…"},
		{"IPv4", "http://127.0.0.1:8080/s3c", "http://127.0.0.1:8080/…"},
		{"IPv6", "https://[2001:db8::1]:8443/s3c", "https://[2001:db8::1]:8443/…"},
		{"zoned IPv6", "https://[fe80::1%25eth0]/s3c", "https://[fe80::1%25eth0]/…"},
		{"unclosed bracket", "https://[s3c/x", "…"},
		{"bad port", "https://hooks.example:s3c/x", "…"},
		{"space in the host", "https://s3c x/y", "…"},
		{"percent in a name", "https://s3c%41.example/x", "…"},
		{"upper-case scheme", "HTTPS://Hooks.Example/s3c", "HTTPS://Hooks.Example/…"},
		{"scheme-relative", "//hooks.example/s3c", "//hooks.example/…"},
		{"no scheme", "hooks.example/services/s3c", "…"},
		{"a token alone", "s3cXyZ0123456789", "…"},
		{"scheme without //", "https:hooks.example/s3c", "…"},
		{"empty authority", "https:///s3c", "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := redact.HostOnly(tt.in)
			if want := tt.want + digest(tt.in); got != want {
				t.Errorf("HostOnly(%q) = %q, want %q", tt.in, got, want)
			}
			if strings.Contains(got, "s3c") {
				t.Errorf("HostOnly(%q) = %q shows a secret", tt.in, got)
			}
			checkHostOnly(t, tt.in, got)
		})
	}
	if got := redact.HostOnly(""); got != "" {
		t.Errorf(`HostOnly("") = %q, want ""`, got)
	}
}

// TestHostOnlyTellsURLsApart: two webhooks of one host have two names,
// and a name's digits are the start of the URL's hex SHA-256 (the key a
// store keeps it by).
func TestHostOnlyTellsURLsApart(t *testing.T) {
	t.Parallel()
	a := "https://hooks.slack.com/services/T0/B1/s3c1"
	b := "https://hooks.slack.com/services/T0/B1/s3c2"
	if redact.HostOnly(a) == redact.HostOnly(b) {
		t.Errorf("HostOnly names %q and %q alike: %q", a, b, redact.HostOnly(a))
	}
	sum := sha256.Sum256([]byte(a))
	if _, d, _ := strings.Cut(redact.HostOnly(a), "#"); !strings.HasPrefix(hex.EncodeToString(sum[:]), d) || len(d) != 8 {
		t.Errorf("HostOnly(%q) digits %q, want the first 8 of its SHA-256", a, d)
	}
}

// checkHostOnly fails unless out is a name: what precedes "/…", "/" or
// the digest is "…" or a scheme and a host of in, which net/url, if it
// reads it, reads without path, query, fragment or user information.
func checkHostOnly(t *testing.T, in, out string) {
	t.Helper()
	if in == "" {
		return
	}
	head, ok := strings.CutSuffix(out, digest(in))
	if !ok {
		t.Fatalf("HostOnly(%q) = %q, want it to end with %s", in, out, digest(in))
	}
	head = strings.TrimSuffix(strings.TrimSuffix(head, "/…"), "/")
	if head == "…" {
		return
	}
	_, host, ok := strings.Cut(head, "//")
	if !ok || host == "" || strings.ContainsAny(host, "/\\?#@ ") || !strings.Contains(in, host) {
		t.Fatalf("HostOnly(%q) = %q: %q is not a scheme and a host of the URL", in, out, head)
	}
	if u, err := url.Parse(head); err == nil && (u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "") {
		t.Errorf("HostOnly(%q) = %q: net/url reads %q as more than a scheme and a host (%#v)", in, out, head, u)
	}
}

// FuzzHostOnly: for any string, HostOnly shows at most a scheme and a
// host of it, and the digest of the whole.
func FuzzHostOnly(f *testing.F) {
	for _, s := range []string{
		"https://u:p@h/p?token=t#f", "//u@h?x", "https://h:1/x", "http://[::1]:2/", "a@b@c?d@e#f@g",
		`https://u@h\@e/`, "https://[fe80::1%25x]/", "x://h", "https://h:/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkHostOnly(t, s, redact.HostOnly(s))
	})
}
