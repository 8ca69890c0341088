package signer_test

import (
	"strings"
	"testing"

	"github.com/agentid/agentid/signer"
)

func TestValidAuthority(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		"localhost":          true,
		"localhost:3000":     true,
		"a.b-c_d.example":    true,
		"127.0.0.1:80":       true,
		"[::1]:443":          true,
		"[::1]":              true,
		"localhost:18081:80": false,
		"localhost:":         false,
		":80":                false,
		"local host":         false,
		"[::1]x":             false,
		"host:123456":        false,
		"host:8a":            false,
		"":                   false,
		"[]":                 false,
		"[::1]:":             false,
		"[1.2.3.4]":          false,
		"[fe80::1%eth0]":     false,
		"[::g]":              false,
		".":                  false,
		"a..b":               false,
		"example.com.":       false,
		"-":                  true, // one label of [a-z0-9-_]
		"UPPER":              false,
	} {
		if got := signer.ValidAuthority(in); got != want {
			t.Errorf("ValidAuthority(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestValidHostname(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 63)
	for in, want := range map[string]bool{
		"example.com":                   true,
		"a_b-c.d":                       true,
		"127.0.0.1":                     true,
		long + ".x":                     true,
		long + "a.x":                    false,
		strings.Repeat("a.", 126) + "a": true,
		strings.Repeat("a.", 127) + "a": false,
		"":                              false,
		".":                             false,
		"a..b":                          false,
		".a":                            false,
		"a.":                            false,
		"a:b":                           false,
		"Example.com":                   false,
	} {
		if got := signer.ValidHostname(in); got != want {
			t.Errorf("ValidHostname(%q) = %v, want %v", in, got, want)
		}
	}
}
