package agentlimit_test

import (
	"net/netip"
	"testing"

	"github.com/agentid/agentid/middleware/agentlimit"
)

func TestParsePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.5":         "10.0.0.5/32",
		" 172.16.0.0/12 ":  "172.16.0.0/12",
		"10.1.2.3/8":       "10.0.0.0/8",
		"::ffff:10.0.0.1":  "10.0.0.1/32",
		"2001:db8::1":      "2001:db8::1/128",
		"2001:db8::/32":    "2001:db8::/32",
		"fe80::1%eth0":     "",
		"10.0.0.5:80":      "",
		"":                 "",
		"proxy.example":    "",
		"10.0.0.0/33":      "",
		"10.0.0.5, 10.0.0": "",
	} {
		p, err := agentlimit.ParsePrefix(in)
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
	for in, want := range map[string]string{
		"10.0.0.5":               "10.0.0.5",
		"10.0.0.5:443":           "10.0.0.5",
		"[2001:db8::1]:443":      "2001:db8::1",
		"[2001:db8::1]":          "2001:db8::1",
		"[fe80::1%eth0]:80":      "fe80::1",
		"[::ffff:192.0.2.1]:443": "192.0.2.1",
		"unknown":                "",
		"":                       "",
	} {
		a, ok := agentlimit.ParseAddr(in)
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
