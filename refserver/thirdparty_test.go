package refserver_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// thirdParty is a site of someone else that verifies this service's agents
// the way any third party does: keyfetch fetches their key directories
// over HTTP from the reference server, the middleware checks signatures.
// Its clock is its own (it starts at the real time and moves only when
// the test advances it), so that its cache lifetimes are exact.
type thirdParty struct {
	name  string
	site  *httptest.Server
	clock *signertest.Clock
	keys  *keyfetch.Fetcher
}

// thirdPartyMaxTTL is the longest a third party of these tests keeps a key
// set without refetching it: keyfetch clamps the directory's max-age=60
// down to it.
const thirdPartyMaxTTL = 2 * time.Second

// newThirdParty starts a site verifying e's agents; with requireSigned it
// requires directories signed by the agent (RequireSignedDirectories).
// MaxStale is keyfetch's default (1 h): what it keeps through an outage.
func newThirdParty(t *testing.T, e *testEnv, name string, requireSigned bool) *thirdParty {
	t.Helper()
	clock := signertest.NewClock(time.Now())
	keys := keyfetch.New(keyfetch.Config{
		TrustedHosts:             []string{"*." + e.host},
		AllowHTTP:                true,
		AllowPrivateNetworks:     true,
		HTTPClient:               e.client, // dials the reference server for every agent host
		MinTTL:                   thirdPartyMaxTTL / 2,
		MaxTTL:                   thirdPartyMaxTTL,
		RequireSignedDirectories: requireSigned,
		Now:                      clock.Now,
	})
	site := httptest.NewUnstartedServer(nil)
	site.Config.Handler = mustNew(t, middleware.Config{Keys: keys, Authorities: []string{site.Listener.Addr().String()}}).Middleware(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a, _ := middleware.AgentFrom(r.Context())
			_, _ = w.Write([]byte(a.SignatureAgent))
		}))
	site.Start()
	t.Cleanup(site.Close)
	return &thirdParty{name: name, site: site, clock: clock, keys: keys}
}

// call sends the site a request signed by key for agent uid and returns
// the status and, on a refusal, the error code.
func (p *thirdParty) call(t *testing.T, e *testEnv, uid string, key signer.PrivateKey) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.site.URL+"/orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := signer.Sign(req, key, signer.Options{SignatureAgent: e.origin(uid)}); err != nil {
		t.Fatal(err)
	}
	resp, err := p.site.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := response{status: resp.StatusCode, header: resp.Header}
	if r.body, err = io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	if r.status == http.StatusOK {
		return r.status, ""
	}
	return r.status, r.errorCode(t)
}

// TestDisableReachesThirdPartyVerifiers: an operator's disable (AgentDB,
// as `idcli server agents disable` calls it) reaches a third-party
// verifier behind keyfetch within that verifier's cache lifetime, as a
// revocation does, not after its stale window (MaxStale, 1 h): a disabled
// agent's directory is an authoritative empty key set, never a 404, which
// keyfetch rightly reads as an outage. That holds for a verifier that
// requires agent-signed directories too (an empty set grants nothing, so
// it needs no signature). enable brings the agent back at each third
// party within the same lifetime, and revoking its only key withdraws it
// the same way.
func TestDisableReachesThirdPartyVerifiers(t *testing.T) {
	t.Parallel()
	eachEnv(t, refserver.ManualKeySync, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		sync := func() {
			t.Helper()
			if !e.srv.KeySource().SyncChanges(ctx) {
				t.Fatal("SyncChanges failed")
			}
		}
		sync()
		key := signertest.Key(0x37)
		uid := e.register(key)
		now := time.Now()
		sig := e.signDir(uid, key, []signer.JWK{key.Public.JWK}, now, time.Hour)
		if r := e.send(e.refreshReq(uid, key, []dirSig{sig}, now)); r.status != http.StatusOK {
			t.Fatalf("directory signatures: %d %s", r.status, r.body)
		}
		parties := []*thirdParty{
			newThirdParty(t, e, "unsigned directories accepted", false),
			newThirdParty(t, e, "signed directories required", true),
		}
		// expect checks every third party: at once (from its cache), and
		// once its cache lifetime has passed (refetched).
		expect := func(step string, nowStatus int, nowCode string, laterStatus int, laterCode string) {
			t.Helper()
			for _, p := range parties {
				if st, code := p.call(t, e, uid, key); st != nowStatus || code != nowCode {
					t.Errorf("%s: %s: at once: %d %q, want %d %q", step, p.name, st, code, nowStatus, nowCode)
				}
				p.clock.Advance(thirdPartyMaxTTL)
				if st, code := p.call(t, e, uid, key); st != laterStatus || code != laterCode {
					t.Errorf("%s: %s: after its cache lifetime (%v, its stale window is %v): %d %q, want %d %q",
						step, p.name, thirdPartyMaxTTL, keyfetch.DefaultMaxStale, st, code, laterStatus, laterCode)
				}
			}
		}
		expect("before any change", 200, "", 200, "")

		adb := store.New(e.db)
		if _, changed, err := adb.SetAgentDisabled(ctx, uid, true, "idcli server agents disable (user tester)"); err != nil || !changed {
			t.Fatalf("disable: changed %v, %v", changed, err)
		}
		sync()
		// What the third parties will read: an empty key set, as for an
		// agent whose only key was revoked, at both of its URLs.
		for _, u := range []string{e.directoryURL(uid), e.origin(uid) + "/"} {
			d := e.send(e.request(http.MethodGet, u, nil))
			if d.status != http.StatusOK || strings.TrimSpace(string(d.body)) != `{"keys":[]}` || d.header.Get("Cache-Control") != "max-age=60" {
				t.Errorf("disabled agent's directory at %s: %d %s %q, want 200 {\"keys\":[]} max-age=60", u, d.status, d.body, d.header.Get("Cache-Control"))
			}
		}
		expect("disabled", 200, "", 401, "unknown_key")

		if _, changed, err := adb.SetAgentDisabled(ctx, uid, false, "idcli server agents enable (user tester)"); err != nil || !changed {
			t.Fatalf("enable: changed %v, %v", changed, err)
		}
		sync()
		// The unknown key forces one refresh of the fresh empty set (at
		// most one per RefreshCooldown), so the agent is back at once.
		expect("enabled again", 200, "", 200, "")

		if _, changed, err := adb.RevokeKey(ctx, uid, key.KeyID(), "idcli server keys revoke (user tester)"); err != nil || !changed {
			t.Fatalf("revoke: changed %v, %v", changed, err)
		}
		sync()
		expect("only key revoked", 200, "", 401, "unknown_key")
	})
}

// mustNew returns middleware.New(cfg), failing tb on an error.
func mustNew(tb testing.TB, cfg middleware.Config) *middleware.Verifier {
	tb.Helper()
	v, err := middleware.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}
