package clientaddr_test

import (
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/agentid/agentid/middleware/clientaddr"
)

// TestAddr is the table of every edge of the rules in docs/security.md
// ("Client address behind trusted proxies"): who wrote each input decides
// whether it is read.
func TestAddr(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.1/32"),
		netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("fd00::/8"),
	}
	rd := clientaddr.New(trusted, "")
	for _, tc := range []struct {
		name, peer string
		lines      []string // header field lines, in order
		want       string   // Key
		wantBad    string   // the unreadable entry the walk stopped at
	}{
		// The peer: the kernel's, always read.
		{"no header, untrusted peer", "192.0.2.7:5555", nil, "192.0.2.7", ""},
		{"untrusted peer with a header: header ignored", "203.0.113.9:4000", []string{"198.51.100.1"}, "203.0.113.9", ""},
		{"untrusted peer claiming a trusted hop: ignored", "203.0.113.9:4000", []string{"10.0.0.5"}, "203.0.113.9", ""},
		{"unparsable peer (Unix socket) as is", "@", []string{"198.51.100.1"}, "@", ""},
		{"IPv4-mapped peer unmapped, then trusted", "[::ffff:10.0.0.2]:4000", []string{"198.51.100.1"}, "198.51.100.1", ""},

		// A trusted peer: the header, from the right.
		{"no header, trusted peer: the peer", "10.0.0.2:4000", nil, "10.0.0.2", ""},
		{"one hop", "10.0.0.2:4000", []string{"198.51.100.1"}, "198.51.100.1", ""},
		{"spoofed prefix: client-written entries left of the client", "10.0.0.2:4000", []string{"1.1.1.1, 2.2.2.2, 198.51.100.1"}, "198.51.100.1", ""},
		{"spoofed prefix claiming trusted addresses", "10.0.0.2:4000", []string{"10.0.0.9, 172.16.0.1, 198.51.100.1"}, "198.51.100.1", ""},
		{"spoofed garbage left of the client is never read", "10.0.0.2:4000", []string{"not-an-ip, 198.51.100.1"}, "198.51.100.1", ""},
		{"chain of trusted proxies skipped", "10.0.0.2:4000", []string{"1.1.1.1, 203.0.113.9, 172.16.0.1, 10.9.9.9"}, "203.0.113.9", ""},
		{"all hops trusted: the leftmost", "10.0.0.2:4000", []string{"10.0.0.5, 10.0.0.6"}, "10.0.0.5", ""},
		{"all hops trusted, one entry", "10.0.0.2:4000", []string{"10.3.3.3"}, "10.3.3.3", ""},

		// Bad hops: the last readable address.
		{"bad rightmost entry: the peer", "10.0.0.2:4000", []string{"198.51.100.1, not-an-ip"}, "10.0.0.2", "not-an-ip"},
		{"bad entry behind a trusted hop: that hop", "10.0.0.2:4000", []string{"203.0.113.9, unknown, 10.0.0.7"}, "10.0.0.7", "unknown"},
		{"obfuscated RFC 7239 name", "10.0.0.2:4000", []string{"_hidden"}, "10.0.0.2", "_hidden"},
		{"Forwarded syntax is not an address", "10.0.0.2:4000", []string{"for=198.51.100.1"}, "10.0.0.2", "for=198.51.100.1"},
		{"quoted entry", "10.0.0.2:4000", []string{`"198.51.100.1"`}, "10.0.0.2", `"198.51.100.1"`},
		{"half a bracket", "10.0.0.2:4000", []string{"[2001:db8::1"}, "10.0.0.2", "[2001:db8::1"},

		// Empty entries are not entries (HTTP list syntax).
		{"empty entries skipped", "10.0.0.2:4000", []string{"198.51.100.1, ,"}, "198.51.100.1", ""},
		{"only empty entries: the peer", "10.0.0.2:4000", []string{" , ", ""}, "10.0.0.2", ""},
		{"empty last line", "10.0.0.2:4000", []string{"198.51.100.1", ""}, "198.51.100.1", ""},
		{"tabs and spaces trimmed", "10.0.0.2:4000", []string{"\t198.51.100.1\t"}, "198.51.100.1", ""},

		// Several header lines are one list, in order.
		{"several lines, last line last", "10.0.0.2:4000", []string{"1.1.1.1", "198.51.100.7, 10.1.1.1"}, "198.51.100.7", ""},
		{"several lines, client on an earlier line", "10.0.0.2:4000", []string{"1.1.1.1, 198.51.100.7", "10.1.1.1"}, "198.51.100.7", ""},

		// Entry forms.
		{"IPv4 with a port", "10.0.0.2:4000", []string{"198.51.100.1:5555"}, "198.51.100.1", ""},
		{"IPv6 bare", "[::1]:4000", []string{"2001:db8:1:2:3::4"}, "2001:db8:1:2::/64", ""},
		{"IPv6 in brackets", "[::1]:4000", []string{"[2001:db8:1:2:3::4]"}, "2001:db8:1:2::/64", ""},
		{"IPv6 in brackets with a port", "[::1]:4000", []string{"[2001:db8:1:2:3::4]:80"}, "2001:db8:1:2::/64", ""},
		{"IPv6 zone dropped", "[::1]:4000", []string{"fe80::1%eth0"}, "fe80::/64", ""},
		{"IPv6 zone in brackets with a port", "[::1]:4000", []string{"[fe80::1%25eth0]:80"}, "fe80::/64", ""},
		{"trusted hop with a zone is still trusted", "[::1]:4000", []string{"198.51.100.3, fd00::5%eth1"}, "198.51.100.3", ""},
		{"IPv4-mapped entry unmapped", "10.0.0.2:4000", []string{"::ffff:198.51.100.1"}, "198.51.100.1", ""},
		{"IPv4-mapped trusted hop skipped", "10.0.0.2:4000", []string{"198.51.100.4, [::ffff:10.0.0.3]:80"}, "198.51.100.4", ""},

		// IPv6 grouping: by /64, whatever the hop.
		{"IPv6 peer grouped by /64", "[2001:db8:1:2:3:4:5:6]:443", nil, "2001:db8:1:2::/64", ""},
		{"IPv6 neighbours in one /64 share", "[::1]:4000", []string{"2001:db8:1:2:ffff::1"}, "2001:db8:1:2::/64", ""},
		{"IPv6 next /64 apart", "[::1]:4000", []string{"2001:db8:1:3::1"}, "2001:db8:1:3::/64", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.peer
			for _, v := range tc.lines {
				r.Header.Add("x-forwarded-for", v)
			}
			if got := rd.Key(r); got != tc.want {
				t.Errorf("Key = %q, want %q", got, tc.want)
			}
			if _, bad := rd.Addr(r); bad != tc.wantBad {
				t.Errorf("bad hop = %q, want %q", bad, tc.wantBad)
			}
		})
	}
}

// TestHeader: the header is configurable, and only that header is read;
// with no trusted proxy no header is.
func TestHeader(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.2:1"
	r.Header.Set("X-Forwarded-For", "198.51.100.1")
	r.Header.Set("X-Real-Ip", "198.51.100.2")
	for _, tc := range []struct {
		rd   *clientaddr.Reader
		want string
	}{
		{clientaddr.New(trusted, ""), "198.51.100.1"},
		{clientaddr.New(trusted, "x-real-ip"), "198.51.100.2"},
		{clientaddr.New(trusted, "X-Client-Ip"), "10.0.0.2"},
		{clientaddr.New(nil, ""), "10.0.0.2"},
		{&clientaddr.Reader{}, "10.0.0.2"},
	} {
		if got := tc.rd.Key(r); got != tc.want {
			t.Errorf("Key = %q, want %q", got, tc.want)
		}
	}
}

// TestAddrCostBoundedByTrustedHops: a client-written list of any length
// costs nothing: the walk stops at the first untrusted entry from the
// right, and allocates nothing.
func TestAddrCostBoundedByTrustedHops(t *testing.T) {
	rd := clientaddr.New([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, "")
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.2:1"
	long := make([]byte, 0, 1<<20)
	for len(long) < 1<<20-20 {
		long = append(long, "1.1.1.1,"...)
	}
	r.Header.Set("X-Forwarded-For", string(long)+" 198.51.100.1")
	if allocs := testing.AllocsPerRun(10, func() {
		if a, _ := rd.Addr(r); a != netip.MustParseAddr("198.51.100.1") {
			t.Fatalf("Addr = %v", a)
		}
	}); allocs != 0 {
		t.Errorf("Addr allocates %v times, want 0", allocs)
	}
}

func TestParsePrefix(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"10.0.0.5":              "10.0.0.5/32",
		" 172.16.0.0/12 ":       "172.16.0.0/12",
		"10.1.2.3/8":            "10.0.0.0/8",
		"::ffff:10.0.0.1":       "10.0.0.1/32",
		"::ffff:10.0.0.0/104":   "10.0.0.0/8",
		"::ffff:0:0/96":         "0.0.0.0/0",
		"2001:db8::1":           "2001:db8::1/128",
		"2001:db8::/32":         "2001:db8::/32",
		"2001:db8::1/64":        "2001:db8::/64",
		"fe80::1%eth0":          "",
		"10.0.0.5:80":           "",
		"":                      "",
		"proxy.example":         "",
		"10.0.0.0/33":           "",
		"10.0.0.5, 10.0.0":      "",
		"[2001:db8::1]":         "",
		"2001:db8::1%eth0/64":   "",
		"::ffff:10.0.0.1/12000": "",
	} {
		p, err := clientaddr.ParsePrefix(in)
		if want == "" {
			if err == nil {
				t.Errorf("ParsePrefix(%q) = %v, want an error", in, p)
			}
			continue
		}
		if err != nil || p != netip.MustParsePrefix(want) {
			t.Errorf("ParsePrefix(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
}

func TestParseAddr(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"10.0.0.5":               "10.0.0.5",
		"10.0.0.5:443":           "10.0.0.5",
		"[2001:db8::1]:443":      "2001:db8::1",
		"[2001:db8::1]":          "2001:db8::1",
		"2001:db8::1":            "2001:db8::1",
		"[fe80::1%eth0]:80":      "fe80::1",
		"fe80::1%eth0":           "fe80::1",
		"[::ffff:192.0.2.1]:443": "192.0.2.1",
		"unknown":                "",
		"":                       "",
		"[2001:db8::1":           "",
		"2001:db8::1]":           "",
		"[]":                     "",
		"10.0.0.5:":              "",
		"10.0.0.5:http":          "",
		"[2001:db8::1]:x":        "",
		"[2001:db8::1]80":        "",
		"1234567":                "",
	} {
		a, ok := clientaddr.ParseAddr(in)
		if want == "" {
			if ok {
				t.Errorf("ParseAddr(%q) = %v, want none", in, a)
			}
			continue
		}
		if !ok || a != netip.MustParseAddr(want) {
			t.Errorf("ParseAddr(%q) = %v, %v; want %s", in, a, ok, want)
		}
	}
}
