package middleware

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// TestCheckPathAttacks: each path a normalising server would read as
// another path (or a servlet container as another segment) is refused
// with invalid_request, however it is spelled.
func TestCheckPathAttacks(t *testing.T) {
	for _, raw := range []string{
		"/public/../api/secret",
		"/public/%2e%2e/api/x",
		"/public/%2E%2E/api/x",
		"/public/.%2e/api/x",
		"/public//account/x",
		"//api/x",
		"/public/x/../account/x",
		"/robots.txt%2F..%2Fadmin",
		"/robots.txt%2f..%2fadmin",
		"/public/./api",
		"/public/..",
		"/public/.",
		"/public\\..\\api\\x",
		"/public/%5c../api",
		"/public/%252e%252e/api/x",
		"/public/%25252e/api",
		"/public/..;/api/x",
		"/api;x/secret",
		"/public/%3b/api",
		"/api./secret",
		"/api.../secret",
		"/public/%00/api",
		"/public/%0a",
		"/public/%7F",
		"*",
	} {
		u, err := url.ParseRequestURI(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		e := CheckPath(u)
		if e == nil || e.Code != CodeInvalidRequest {
			t.Errorf("CheckPath(%q) = %v, want invalid_request", raw, e)
		}
	}
}

// TestCheckPathNormal: the paths services use pass, and u.Path (what a
// route matches) is then the path the service reads.
func TestCheckPathNormal(t *testing.T) {
	for _, raw := range []string{
		"/", "/api", "/api/", "/api/x/y", "/.well-known/http-message-signatures-directory",
		"/files/a.json", "/caf%C3%A9", "/a%20b", "/%61pi/x", "/a-b_c~d", "/v1/x:y@z!$&'()*+,=",
	} {
		u, err := url.ParseRequestURI(raw)
		if err != nil {
			t.Fatal(err)
		}
		if e := CheckPath(u); e != nil {
			t.Errorf("CheckPath(%q) = %v, want nil", raw, e)
		}
	}
}

// TestCheckPathLong: a path of a million bytes is decided either way in
// one pass (the benchmark shows the cost per byte is flat).
func TestCheckPathLong(t *testing.T) {
	long := strings.Repeat("/a", 1<<19)
	if e := CheckPath(&url.URL{Path: long}); e != nil {
		t.Errorf("long normal path: %v", e)
	}
	if e := CheckPath(&url.URL{Path: long + "/.."}); e == nil {
		t.Error("long path ending in .. passed")
	}
	if e := CheckPath(&url.URL{Path: "/x" + strings.Repeat(".", 1<<18), RawPath: "/x" + strings.Repeat("%2e", 1<<18)}); e == nil {
		t.Error("long encoded path passed")
	}
}

// BenchmarkCheckPath: a typical API path, then paths of 1 KiB and 64 KiB
// (the same cost per byte: one pass, no allocation).
func BenchmarkCheckPath(b *testing.B) {
	b.Run("api", func(b *testing.B) {
		u, _ := url.ParseRequestURI("/api/v1/things/1234?x=1")
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if CheckPath(u) != nil {
				b.Fatal("refused")
			}
		}
	})
	for _, n := range []int{1 << 10, 1 << 16} {
		u := &url.URL{Path: strings.Repeat("/abc", n/4)}
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if CheckPath(u) != nil {
					b.Fatal("refused")
				}
			}
		})
	}
}
