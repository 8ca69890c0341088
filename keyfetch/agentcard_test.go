package keyfetch_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/agentid/agentid/keyfetch"
)

// TestAgentCard: AgentCard finds a verified agent's card by its key-set
// URL alone: a card fetched as the key set itself (;type=cimd), and the
// card a registry lists for the origin of a directory; an agent with
// neither has none.
func TestAgentCard(t *testing.T) {
	t.Parallel()
	w := newRegistryWorld(t)
	ctx := t.Context()

	// Without registries: the card key set, once fetched.
	plain := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"127.0.0.1:" + port(t, w.agents.URL)}, AllowHTTP: true, AllowPrivateNetworks: true})
	cardURL := w.agents.URL + "/card.json"
	if c, ok := plain.AgentCard(cardURL); ok {
		t.Errorf("AgentCard before any fetch = %+v, want none", c)
	}
	if _, err := plain.Key(ctx, keySet(t, cardURL, "cimd"), w.key.Thumbprint); err != nil {
		t.Fatal(err)
	}
	if c, ok := plain.AgentCard(cardURL); !ok || c.Name != "ExampleBot" || c.Registry != "" {
		t.Errorf("AgentCard(card key set) = %+v, %v; want the fetched card, no registry", c, ok)
	}
	dirURL := agentSet(t, w.agents.URL).URL
	if name, purpose := plain.AgentName(dirURL); name != "" || purpose != "" {
		t.Errorf("AgentName(directory, no registry) = %q, %q; want none", name, purpose)
	}

	// With the registry: the directory of a listed card's origin.
	f := keyfetch.New(w.cfg)
	if err := f.RefreshRegistries(ctx); err != nil {
		t.Fatal(err)
	}
	if name, purpose := f.AgentName(dirURL); name != "ExampleBot" || len(purpose) != 256 {
		t.Errorf("AgentName(listed directory) = %q, %q; want the registry's card", name, purpose)
	}
	if name, _ := f.AgentName("http://127.0.0.2:1/.well-known/http-message-signatures-directory"); name != "" {
		t.Errorf("AgentName(unlisted) = %q, want none", name)
	}
}

// TestCardClaimsOnlyWhereTheCardLed: a card a trusted registry lists
// describes only the key sets it led to: itself (its "jwks", or the
// jwks_uri it names wherever that is), a jwks_uri on its own origin, and
// its origin's well-known directory. A hostile card naming a victim's
// directory as its jwks_uri attaches nothing to the victim.
func TestCardClaimsOnlyWhereTheCardLed(t *testing.T) {
	t.Parallel()
	victimKey, ownKey := testKey(31), testKey(32)
	victim := newDirServer(t, serveKeys("max-age=60", "", victimKey))
	victimDir := agentSet(t, victim.URL).URL
	hostile := newDirServer(t, serveStatus(http.StatusNotFound))
	hostile.handle("/card.json", serveBody("application/json", "", "", `{"client_name":"Evil Bot","web_bot_auth":{"purpose":"ai-training"},"jwks_uri":"`+victimDir+`"}`))
	own := newDirServer(t, serveStatus(http.StatusNotFound))
	own.handle("/card.json", serveBody("application/json", "", "", `{"client_name":"Own Bot","web_bot_auth":{"purpose":"search"},"jwks_uri":"`+own.URL+`/keys/jwks.json"}`))
	own.handle("/keys/jwks.json", serveBody(keyfetch.JWKSetMediaType, "", "", jwksOf(ownKey)))
	reg := newRegistryServer(t)
	reg.serve(0, "", []byte(hostile.URL+"/card.json\n"+own.URL+"/card.json\n"), "", "")
	f := keyfetch.New(keyfetch.Config{
		TrustedHosts: []string{"127.0.0.1:" + port(t, reg.URL), "127.0.0.1:" + port(t, victim.URL)},
		AllowHTTP:    true, AllowPrivateNetworks: true, Registries: []string{reg.listURL()},
	})
	ctx := t.Context()
	if err := f.RefreshRegistries(ctx); err != nil {
		t.Fatal(err)
	}
	// The victim is verified under its own identity, with its own keys.
	if _, err := f.Key(ctx, agentSet(t, victim.URL), victimKey.Thumbprint); err != nil {
		t.Fatalf("the victim's key: %v", err)
	}
	for _, tc := range []struct {
		name, keySet, want string
	}{
		{"the victim's directory, named by the hostile card", victimDir, ""},
		{"the victim's origin", victim.URL, ""},
		{"the victim's directory respelled with a query", victimDir + "?n=1", ""},
		{"the hostile card itself", hostile.URL + "/card.json", "Evil Bot"},
		{"the hostile card's origin's directory", agentSet(t, hostile.URL).URL, "Evil Bot"},
		{"a jwks_uri on the card's own origin", own.URL + "/keys/jwks.json", "Own Bot"},
		{"the own card itself", own.URL + "/card.json", "Own Bot"},
		{"another key set on the own card's origin", own.URL + "/keys/other.json", ""},
		{"the own card's origin's directory with a query", agentSet(t, own.URL).URL + "?n=1", "Own Bot"},
	} {
		if name, _ := f.AgentName(tc.keySet); name != tc.want {
			t.Errorf("%s (%s): AgentName = %q, want %q", tc.name, tc.keySet, name, tc.want)
		}
	}
}

// TestCardRules: a card with both "jwks" and "jwks_uri" (RFC 7591 §2), or
// whose "client_id" is not the URL it was fetched from, is refused, as a
// key set (;type=cimd) and in a registry (no trust from it, no claims); a
// client_id that respells the URL, or none at all, is accepted.
func TestCardRules(t *testing.T) {
	t.Parallel()
	key := testKey(33)
	inline := `"jwks":` + jwksOf(key)
	srv := newDirServer(t, serveStatus(http.StatusNotFound))
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path, body string
		ok               bool
		problem          string
	}{
		{"both jwks and jwks_uri", "/both.json", `{` + inline + `,"jwks_uri":"{origin}/jwks.json"}`, false, `both "jwks" and "jwks_uri"`},
		{"client_id of another card", "/other.json", `{"client_id":"{origin}/card.json",` + inline + `}`, false, `"client_id"`},
		{"client_id on another host", "/host.json", `{"client_id":"https://bot.example/host.json",` + inline + `}`, false, `"client_id"`},
		{"client_id of the origin", "/origin.json", `{"client_id":"{origin}",` + inline + `}`, false, `"client_id"`},
		{"client_id not a string", "/num.json", `{"client_id":7,` + inline + `}`, false, `"client_id"`},
		{"client_id with a query", "/query.json", `{"client_id":"{origin}/query.json?x=1",` + inline + `}`, false, `"client_id"`},
		{"client_id exactly", "/card.json", `{"client_id":"{origin}/card.json",` + inline + `}`, true, ""},
		{"client_id respelled", "/respelled.json", `{"client_id":"HTTP://` + strings.ToUpper(u.Host) + `/./%72espelled.json",` + inline + `}`, true, ""},
		{"no client_id (early drafts)", "/early.json", `{` + inline + `}`, true, ""},
	}
	srv.handle("/jwks.json", serveBody(keyfetch.JWKSetMediaType, "", "", jwksOf(testKey(34))))
	var list strings.Builder
	for _, tc := range cases {
		body := strings.ReplaceAll(tc.body, "{origin}", srv.URL)
		srv.handle(tc.path, serveBody("application/json", "", "", body))
		list.WriteString(srv.URL + tc.path + "\n")
	}
	ctx := t.Context()
	direct := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"127.0.0.1:" + port(t, srv.URL)}, AllowHTTP: true, AllowPrivateNetworks: true})
	for _, tc := range cases {
		_, err := direct.Key(ctx, keySet(t, srv.URL+tc.path, "cimd"), key.Thumbprint)
		if (err == nil) != tc.ok || (!tc.ok && !strings.Contains(fmt.Sprint(err), tc.problem)) {
			t.Errorf("%s: Key = %v, want ok %v (an error naming %s)", tc.name, err, tc.ok, tc.problem)
		}
	}

	// In a registry: a refused card is a problem; the others are read.
	// Each card lives on the same origin, so only the card key sets
	// themselves tell whether a card was read.
	reg := newRegistryServer(t)
	reg.serve(0, "", []byte(list.String()), "", "")
	f := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"127.0.0.1:" + port(t, reg.URL)}, AllowHTTP: true, AllowPrivateNetworks: true, Registries: []string{reg.listURL()}})
	if err := f.RefreshRegistries(ctx); err != nil {
		t.Fatal(err)
	}
	st := f.Registries()[0]
	if st.Entries != len(cases) || st.Cards != 3 {
		t.Errorf("registry: %d entries, %d cards read, want %d and 3 (problems %q)", st.Entries, st.Cards, len(cases), st.Problems)
	}
	for _, tc := range cases {
		c, _ := f.CardInfo(keySet(t, srv.URL+tc.path, "cimd"))
		if read := !c.Fetched.IsZero(); read != tc.ok {
			t.Errorf("%s: registry card read = %v, want %v", tc.name, read, tc.ok)
		}
		if !tc.ok && !containsSub(st.Problems, tc.path) {
			t.Errorf("%s: registry problems %q do not name %s", tc.name, st.Problems, tc.path)
		}
	}
}

// TestRegistryTrailingComments: a registry line's comment starts at a "#"
// at the start of the line or after a blank, so "URL # primary" lists URL;
// a "#" inside a URL is a fragment and the line is unusable; lines may end
// with LF, CRLF or CR.
func TestRegistryTrailingComments(t *testing.T) {
	t.Parallel()
	key := testKey(35)
	srv := newDirServer(t, serveStatus(http.StatusNotFound))
	for _, p := range []string{"/a.json", "/b.json", "/c.json", "/d.json", "/e.json"} {
		srv.handle(p, serveBody("application/json", "", "", `{"client_name":"`+p+`","jwks":`+jwksOf(key)+`}`))
	}
	o := srv.URL
	list := "# agents\r\n" + o + "/a.json # primary\r\n" + o + "/b.json\t#tab comment\r" + o + "/c.json#fragment\n" +
		"   " + o + "/d.json   #\n" + o + "/e.json ## two\n#" + o + "/commented.json\n"
	reg := newRegistryServer(t)
	reg.serve(0, "", []byte(list), "", "")
	f := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"127.0.0.1:" + port(t, reg.URL)}, AllowHTTP: true, AllowPrivateNetworks: true, Registries: []string{reg.listURL()}})
	if err := f.RefreshRegistries(t.Context()); err != nil {
		t.Fatal(err)
	}
	st := f.Registries()[0]
	if st.Entries != 4 || st.Cards != 4 || len(st.Problems) != 1 || !strings.Contains(st.Problems[0], "line 4:") {
		t.Fatalf("Registries() = %+v, want 4 cards (a, b, d, e) and one problem (line 4, the fragment)", st)
	}
	for _, p := range []string{"/a.json", "/b.json", "/d.json", "/e.json"} {
		if c, ok := f.CardInfo(keySet(t, o+p, "cimd")); !ok || c.Name != p {
			t.Errorf("CardInfo(%s) = %+v, %v; want the card listed with a trailing comment", p, c, ok)
		}
	}
}
