package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestProxyOtherHostRefused: a request the agent signed for evil.example
// (an attacker's site), sent to a proxy serving app.example with Host
// evil.example, is refused with 421 misdirected_request in required and
// optional modes and marked invalid (X-Agent-Reason misdirected_request)
// in observe mode, and the agent's key set is never fetched; the same
// agent signing for app.example is verified.
func TestProxyOtherHostRefused(t *testing.T) {
	t.Parallel()
	key := signertest.Key(0x3a)
	up := newEchoUpstream(t)

	for _, mode := range []string{"required", "optional", "observe"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			// A key-set server per mode: the modes run in parallel, and
			// one's fetch must not count as another's.
			var fetches atomic.Int32
			dir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fetches.Add(1)
				w.Header().Set("Content-Type", signer.DirectoryMediaType)
				fmt.Fprintf(w, `{"keys":[%s]}`, key.Public.JWK.MarshalPublic())
			}))
			t.Cleanup(dir.Close)
			px, _ := startProxy(t, "--upstream", up.URL, "--mode", mode, "--authority", "app.example",
				"--trust", "127.0.0.1:*", "--allow-http", "--allow-private")
			path := "/other-host/" + mode
			send := func(host string) clitest.Answer {
				r := signedGet(t, "http://"+host+path, key, dir.URL, signer.Options{})
				r.URL, _ = r.URL.Parse(px + path)
				r.Host = host
				return clitest.MustSend(t, http.DefaultClient, r)
			}
			before := fetches.Load()
			a := send("evil.example")
			if n := fetches.Load() - before; n != 0 {
				t.Errorf("the key set was fetched %d times for a request signed for another host, want 0", n)
			}
			seen := up.got(path)
			if mode == "observe" {
				if a.Status != http.StatusOK || len(seen) != 1 || seen[0].Get("X-Agent-Verdict") != "invalid" || seen[0].Get("X-Agent-Reason") != "misdirected_request" {
					t.Errorf("observe: %d, upstream saw %v; want it forwarded as invalid misdirected_request", a.Status, seen)
				}
			} else if a.Status != http.StatusMisdirectedRequest || a.Code != "misdirected_request" || len(seen) != 0 {
				t.Errorf("%s: %d %s, upstream saw %d requests; want 421 misdirected_request and none", mode, a.Status, a.Code, len(seen))
			}
			if a := send("app.example"); a.Status != http.StatusOK {
				t.Errorf("signed for app.example: %d %s, want 200", a.Status, a.Body)
			}
			if got := up.got(path); len(got) == 0 || got[len(got)-1].Get("X-Agent-Verdict") != "verified" {
				t.Errorf("signed for app.example: the upstream did not see it verified")
			}
		})
	}
}
