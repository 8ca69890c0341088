package rules_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/middleware/policy"
	"github.com/agentid/agentid/middleware/rules"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// permissiveHost is a key host as most static hosting is: it serves the
// agent's key directory at every path and under every query (the owner of
// the host can make any URL on it answer with the keys). Its address is
// 127.0.0.1:PORT; agents on it are named <label>.localhost:PORT, which
// keyfetch resolves to loopback itself.
func permissiveHost(t *testing.T, keys ...signer.PrivateKey) (port string) {
	t.Helper()
	var jwks []signer.JWK
	for _, k := range keys {
		jwks = append(jwks, k.Public.JWK)
	}
	body, _ := json.Marshal(map[string]any{"keys": jwks})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", signer.DirectoryMediaType)
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	_, port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	return port
}

// respellings are Signature-Agent members naming the key set of the agent
// at origin (http://host:port) as its owner can at will on a host that
// serves its keys everywhere: queries, the explicit directory path, a
// trailing slash, another path, case, the default port spelled out, a
// percent-encoding, ;type=jwks_uri.
func respellings(origin string) []string {
	dir := origin + signer.DirectoryPath
	out := []string{`sig1="` + origin + `"`}
	for i := 1; i <= 10; i++ {
		out = append(out, fmt.Sprintf(`sig1="%s?n=%d"`, dir, i))
	}
	return append(out,
		`sig1="`+origin+`/?n=1"`,
		`sig1="`+dir+`/"`,
		`sig1="`+origin+`/keys/jwks.json"`,
		`sig1="`+origin+`/keys/jwks.json?v=2"`,
		`sig1="`+strings.ToUpper(origin)+`"`,
		`sig1="`+strings.Replace(dir, "/.well-known/", "/%2Ewell-known/", 1)+`?x"`,
		`sig1="`+origin+`";type=jwks_uri`,
		`sig1="`+dir+`?n=11";type=jwks_uri`,
		`sig1="`+dir+`?n=12";type=directory`,
	)
}

// gateServer is the verifier (Observe) and the gate over real HTTP, with a
// service behind them counting what reaches it.
func gateServer(t *testing.T, cfg rules.Config) (url string, reached *atomic.Int32) {
	t.Helper()
	reached = &atomic.Int32{}
	srv := httptest.NewUnstartedServer(nil)
	keys := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"*.localhost:*"}, AllowHTTP: true, AllowPrivateNetworks: true})
	g, err := rules.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{srv.Listener.Addr().String()}, Mode: middleware.Observe})
	if err != nil {
		t.Fatal(err)
	}
	g.SetRefuse(v.WriteError)
	srv.Config.Handler = v.Middleware(g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})))
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, reached
}

// sendAs signs GET url with key (the Signature-Agent member is not covered,
// as the deployed profile allows, so that any spelling can be sent with
// one signing code path) and sends it with Signature-Agent member.
func sendAs(t *testing.T, url string, key signer.PrivateKey, member string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/api/x", nil)
	if err := signer.Sign(req, key, signer.Options{SignatureAgent: "https://placeholder.example", Legacy: true}); err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Signature-Agent", member)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct{ Code string } `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Error.Code
}

// TestDenyListRespelled: an agent on deny.identities whose host serves its
// keys under any URL sends the plain origin, then ten queries and every
// other spelling its owner can choose: each is refused 403 forbidden, and
// none reaches the service. (Before, each query was a new identity, let
// through.)
func TestDenyListRespelled(t *testing.T) {
	key := signertest.Key(0xd1)
	port := permissiveHost(t, key)
	origin := "http://bad.localhost:" + port
	url, reached := gateServer(t, rules.Config{Deny: policy.List{Identities: []string{origin}}})
	for _, m := range respellings(origin) {
		if status, code := sendAs(t, url, key, m); status != http.StatusForbidden || code != string(middleware.CodeForbidden) {
			t.Errorf("Signature-Agent: %s: %d %s, want 403 forbidden", m, status, code)
		}
	}
	// A denied key-set URL with a path is denied under its queries too, and
	// another path on the host is not that key set.
	url2, reached2 := gateServer(t, rules.Config{Deny: policy.List{Identities: []string{origin + "/keys/jwks.json"}}})
	for _, m := range []string{`sig1="` + origin + `/keys/jwks.json?n=1"`, `sig1="` + origin + `/keys/jwks.json/";type=jwks_uri`, `sig1="` + origin + `/keys/./jwks.json?n=2"`} {
		if status, _ := sendAs(t, url2, key, m); status != http.StatusForbidden {
			t.Errorf("deny of a key-set URL: Signature-Agent: %s: %d, want 403", m, status)
		}
	}
	if status, _ := sendAs(t, url2, key, `sig1="`+origin+`/other.json"`); status != http.StatusNoContent {
		t.Errorf("deny of a key-set URL: another path: %d, want 204", status)
	}
	if n := reached.Load() + reached2.Load(); n != 1 {
		t.Errorf("the service was reached %d times, want once (the other path)", n)
	}
}

// TestBudgetRespelled: an agent with a per-agent limit of 3 sends its
// plain origin and every respelling: three pass in all, the rest get 429,
// whatever the spelling. (Before, each spelling had a budget of its own.)
func TestBudgetRespelled(t *testing.T) {
	key := signertest.Key(0xd2)
	port := permissiveHost(t, key)
	origin := "http://agent.localhost:" + port
	lim, err := agentlimit.New(agentlimit.Config{Agent: agentlimit.Limit{Quota: 3, Window: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	url, reached := gateServer(t, rules.Config{Limiter: lim})
	limited := 0
	for _, m := range respellings(origin) {
		status, code := sendAs(t, url, key, m)
		switch {
		case status == http.StatusTooManyRequests && code == string(middleware.CodeRateLimited):
			limited++
		case status != http.StatusNoContent:
			t.Errorf("Signature-Agent: %s: %d %s, want 204 or 429", m, status, code)
		}
	}
	if n := len(respellings(origin)); reached.Load() != 3 || limited != n-3 {
		t.Errorf("%d passed and %d were limited of %d, want 3 and %d", reached.Load(), limited, n, n-3)
	}
}

// TestAllowUIDsOnlyForTheService: allow.uids names an agent of the
// configured service; an agent elsewhere whose host has the same first
// label (agent-….other.localhost: another owner, another key) is refused,
// and uid rules without a service do not start.
func TestAllowUIDsOnlyForTheService(t *testing.T) {
	key, other := signertest.Key(0xd3), signertest.Key(0xd4)
	port := permissiveHost(t, key, other)
	const uid = "agent-aaaaaaaaaaaaaaaaaaaaaaaa"
	service := "http://trusted.localhost:" + port
	url, reached := gateServer(t, rules.Config{Allow: policy.List{UIDs: []string{uid}, Services: []string{service}}})
	if status, _ := sendAs(t, url, key, `sig1="http://`+uid+`.trusted.localhost:`+port+`"`); status != http.StatusNoContent {
		t.Errorf("the service's agent: %d, want 204", status)
	}
	for _, host := range []string{uid + ".other.localhost", uid + ".trusted.localhost.other.localhost", uid + "-x.trusted.localhost"} {
		if status, code := sendAs(t, url, other, `sig1="http://`+host+`:`+port+`"`); status != http.StatusForbidden {
			t.Errorf("%s: %d %s, want 403", host, status, code)
		}
	}
	if reached.Load() != 1 {
		t.Errorf("the service was reached %d times, want once", reached.Load())
	}
	for _, p := range []policy.List{{UIDs: []string{uid}}, {UIDs: []string{"agent-*"}, Services: []string{}}} {
		_, err := rules.New(rules.Config{Deny: p})
		if err == nil || !strings.Contains(err.Error(), "need the agentid service") || strings.Contains(err.Error(), "\n") {
			t.Errorf("deny %+v without a service: %v, want a one-line refusal naming the missing service", p, err)
		}
	}
}
