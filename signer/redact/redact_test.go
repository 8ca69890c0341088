package redact_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer/redact"
)

// TestURL is the table of respellings: a credential in the query is
// hidden whatever its parameter's name and spelling (case, percent
// encoding, repeated, after ';', with no name at all), and so are the user
// information (password and user name, which tokens also travel as) and
// the fragment, with or without a scheme, in URLs net/url refuses and in
// strings that are not URLs. Every secret of the table contains "s3c".
func TestURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"token", "https://r.example/list?token=s3c", "https://r.example/list?token=xxxxx"},
		{"upper case", "https://r.example/list?TOKEN=s3c", "https://r.example/list?TOKEN=xxxxx"},
		{"mixed case, underscore", "https://r.example/list?Access_Token=s3c", "https://r.example/list?Access_Token=xxxxx"},
		{"percent-encoded name", "https://r.example/list?%74oken=s3c", "https://r.example/list?%74oken=xxxxx"},
		{"double-encoded name", "https://r.example/list?%2574oken=s3c", "https://r.example/list?%2574oken=xxxxx"},
		{"plus and space in the name", "https://r.example/list?api+key=s3c&api%20key=s3c", "https://r.example/list?api+key=xxxxx&api%20key=xxxxx"},
		{"any name", "https://r.example/list?x-amz-credential=s3c&sv=s3c&v=2", "https://r.example/list?x-amz-credential=xxxxx&sv=xxxxx&v=xxxxx"},
		{"repeated", "https://r.example/list?token=s3c1&token=s3c2&token=", "https://r.example/list?token=xxxxx&token=xxxxx&token="},
		{"semicolon separator", "https://r.example/list?v=1;sig=s3c", "https://r.example/list?v=xxxxx;sig=xxxxx"},
		{"encoded separator", "https://r.example/list?v=1%26token=s3c", "https://r.example/list?v=xxxxx"},
		{"value with = and ?", "https://r.example/list?token=a=s3c?b", "https://r.example/list?token=xxxxx"},
		{"bare value", "https://r.example/list?s3c", "https://r.example/list?xxxxx"},
		{"empty items", "https://r.example/list?&&token=s3c&", "https://r.example/list?&&token=xxxxx&"},
		{"empty query", "https://r.example/list?", "https://r.example/list?"},
		{"@ in the query is not user information", "https://r.example/list?to=a@s3c.example", "https://r.example/list?to=xxxxx"},
		{"fragment", "https://r.example/cb#access_token=s3c", "https://r.example/cb#xxxxx"},
		{"empty fragment", "https://r.example/cb#", "https://r.example/cb#"},
		{"? and @ in the fragment", "https://r.example/#a?token=s3c@x", "https://r.example/#xxxxx"},
		{"password", "redis://:s3c@127.0.0.1:6379/0", "redis://xxxxx@127.0.0.1:6379/0"},
		{"user and password", "postgres://agentid:s3c@db.internal:5432/prod", "postgres://xxxxx@db.internal:5432/prod"},
		{"token as user name", "https://s3c:x-oauth-basic@github.example/list", "https://xxxxx@github.example/list"},
		{"token alone as user", "https://s3c@r.example/list", "https://xxxxx@r.example/list"},
		{"params in user information", "https://token=s3c@r.example/list", "https://xxxxx@r.example/list"},
		{"@ in the password", "https://u:s3c@s3c@r.example/", "https://xxxxx@r.example/"},
		{"encoded @ in the password", "https://u:s3c%40s3c@r.example/", "https://xxxxx@r.example/"},
		{"@ in the path", "https://r.example/a@b", "https://r.example/a@b"},
		{"no scheme", "u:s3c@r.example/list?token=s3c", "xxxxx@r.example/list?token=xxxxx"},
		{"no scheme, no user", "r.example/list?token=s3c", "r.example/list?token=xxxxx"},
		{"scheme-relative", "//u:s3c@r.example/?token=s3c", "//xxxxx@r.example/?token=xxxxx"},
		{"upper-case scheme", "HTTPS://u:s3c@r.example/", "HTTPS://xxxxx@r.example/"},
		{"net/url refuses it", "postgres://u:s3c@h/%zz?k=s3c", "postgres://xxxxx@h/%zz?k=xxxxx"},
		{"bad host", "http://[::1/?token=s3c", "http://[::1/?token=xxxxx"},
		{"space in the authority", "http://u:s3c x@h/", "http://xxxxx@h/"},
		{"backslash", `https://u:s3c@r.example\@evil.example/`, `https://xxxxx@evil.example/`},
		{"sqlite pragma", "sqlite:///var/lib/agentid.db?_pragma=key(s3c)", "sqlite:///var/lib/agentid.db?_pragma=xxxxx"},
		{"nothing to hide", "https://r.example:8443/list.txt", "https://r.example:8443/list.txt"},
		{"host:port list", "10.0.0.1:6379,10.0.0.2:6379", "10.0.0.1:6379,10.0.0.2:6379"},
		{"opaque", "sqlite::memory:", "sqlite::memory:"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := redact.URL(tt.in)
			if got != tt.want {
				t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if strings.Contains(got, "s3c") {
				t.Errorf("URL(%q) = %q shows a secret", tt.in, got)
			}
			if again := redact.URL(got); again != got {
				t.Errorf("URL(URL(%q)) = %q, want %q (idempotent)", tt.in, again, got)
			}
			checkAsNetURLReadsIt(t, tt.in, got)
		})
	}
}

// checkAsNetURLReadsIt fails when net/url, reading out (URL of in), finds
// user information other than the mask, a query value other than the mask,
// or a fragment other than the mask.
func checkAsNetURLReadsIt(t *testing.T, in, out string) {
	t.Helper()
	u, err := url.Parse(out)
	if err != nil {
		return // nothing net/url would show
	}
	if u.User != nil {
		if _, has := u.User.Password(); has || u.User.Username() != redact.Mask {
			t.Errorf("URL(%q) = %q: net/url reads user information %q", in, out, u.User.String())
		}
	}
	for _, item := range strings.FieldsFunc(u.RawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
		if _, v, ok := strings.Cut(item, "="); ok && v != "" && v != redact.Mask || !ok && item != redact.Mask {
			t.Errorf("URL(%q) = %q: net/url reads query item %q", in, out, item)
		}
	}
	if u.Fragment != "" && u.Fragment != redact.Mask {
		t.Errorf("URL(%q) = %q: net/url reads fragment %q", in, out, u.Fragment)
	}
}

// FuzzURL: for any string, URL is idempotent and leaves nothing net/url
// would read as user information, a query value or a fragment.
func FuzzURL(f *testing.F) {
	for _, s := range []string{
		"https://u:p@h/p?token=t#f", "//u@h?x", "u:p@h/x?a=b;c=d", "http://[::1/?t=x", "a@b@c?d@e#f@g",
		"postgres://u:p@h/%zz", "mailto:a@b", `https://u@h\@e/`, "10.0.0.1:6379,10.0.0.2:6379",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := redact.URL(s)
		if again := redact.URL(out); again != out {
			t.Fatalf("URL(URL(%q)) = %q, want %q", s, again, out)
		}
		checkAsNetURLReadsIt(t, s, out)
	})
}
