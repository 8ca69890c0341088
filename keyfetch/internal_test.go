package keyfetch

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/signer"
)

func TestPublicAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr string
		want bool
	}{
		{"8.8.8.8", true},
		{"1.1.1.1", true},
		{"172.32.0.1", true},
		{"100.128.0.1", true},
		{"2606:4700:4700::1111", true},
		{"::ffff:8.8.8.8", true},
		{"64:ff9b::808:808", true},
		{"127.0.0.1", false},
		{"127.255.255.254", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"192.168.1.1", false},
		{"100.64.0.1", false},
		{"100.127.255.255", false},
		{"169.254.169.254", false},
		{"0.0.0.0", false},
		{"0.1.2.3", false},
		{"224.0.0.1", false},
		{"255.255.255.255", false},
		{"::1", false},
		{"::", false},
		{"fe80::1", false},
		{"fe80::1%eth0", false},
		{"fc00::1", false},
		{"fd12:3456::1", false},
		{"ff02::1", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:10.0.0.1", false},
		{"::ffff:169.254.169.254", false},
		{"::127.0.0.1", false},
		{"64:ff9b::7f00:1", false},
		{"64:ff9b::a9fe:a9fe", false},
		{"2002:7f00:1::", false},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			t.Parallel()
			a := netip.MustParseAddr(tt.addr)
			if got := publicAddr(a); got != tt.want {
				t.Errorf("publicAddr(%s) = %v, want %v", tt.addr, got, tt.want)
			}
			err := dialControl("tcp", netip.AddrPortFrom(a, 443).String(), nil)
			if got := err == nil; got != tt.want {
				t.Errorf("dialControl(%s) = %v, want allowed %v", tt.addr, err, tt.want)
			}
			if err != nil && !errors.Is(err, ErrPrivateAddress) {
				t.Errorf("dialControl error = %v, want it to wrap ErrPrivateAddress", err)
			}
		})
	}
}

func TestCacheIsBoundedByMaxOrigins(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", signer.DirectoryMediaType)
		_, _ = w.Write([]byte(`{"keys":[]}`))
	}))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	f := New(Config{TrustedHosts: []string{"127.0.0.1:*", "localhost:*", "*.localhost:*"}, AllowHTTP: true, AllowPrivateNetworks: true, MaxOrigins: 2})
	agents := []string{srv.URL, "http://localhost:" + port, "http://a.localhost:" + port, "http://b.localhost:" + port}
	var last signer.KeySet
	for _, a := range agents {
		set, err := signer.ParseKeySetURL(a)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.Key(context.Background(), set, "kid")
		last = set
	}
	if n := f.entries.Len(); n > 2 {
		t.Errorf("cached key sets = %d, want at most 2", n)
	}
	if f.load(keyOf(last)) == nil {
		t.Errorf("the newest key set was evicted, want it kept")
	}
}

// TestEvictionKeepsStaleSets fills a two-entry cache with a set whose
// refresh failed (its last good keys still serving) and a dead entry
// (nothing to serve, failure forgotten): a third key set evicts the dead
// one, never the stale set.
func TestEvictionKeepsStaleSets(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() || r.URL.Path == "/dead" {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", signer.DirectoryMediaType)
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = w.Write([]byte(`{"keys":[]}`))
	}))
	defer srv.Close()
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f := New(Config{TrustedHosts: []string{"127.0.0.1:*"}, AllowHTTP: true, AllowPrivateNetworks: true, MaxOrigins: 2, Now: clock})
	set := func(path string) signer.KeySet {
		s, err := signer.ParseKeySetURL(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	stale, dead, newer := set(""), set("/dead"), set("/newer")
	ctx := context.Background()
	_, _ = f.Key(ctx, stale, "kid")
	_, _ = f.Key(ctx, dead, "kid")
	failing.Store(true)
	mu.Lock()
	now = now.Add(2 * time.Minute) // stale expired, dead's failure forgotten
	mu.Unlock()
	_, _ = f.Key(ctx, stale, "kid") // the refresh fails: the last good set stays
	if e := f.load(keyOf(stale)); e == nil || e.err == nil || !e.has {
		t.Fatalf("stale entry = %+v, want a failed refresh keeping its set", e)
	}
	failing.Store(false)
	_, _ = f.Key(ctx, newer, "kid")
	if f.load(keyOf(dead)) != nil {
		t.Errorf("the dead entry was kept, want it evicted")
	}
	if f.load(keyOf(stale)) == nil {
		t.Errorf("the stale set was evicted, want it kept")
	}
	if f.load(keyOf(newer)) == nil {
		t.Errorf("the newest key set was evicted, want it kept")
	}
}
