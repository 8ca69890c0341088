package keyfetch_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
)

// registryServer serves a registry list at /registry.txt, honouring
// If-None-Match and If-Modified-Since; the test swaps the list's answer.
type registryServer struct {
	*dirServer
	mu            sync.Mutex
	status        int    // 0: 200
	contentType   string // "": text/plain; charset=utf-8
	body          []byte
	etag, lastMod string
	full, not     atomic.Int64 // 200 answers, 304 answers
}

func newRegistryServer(t *testing.T) *registryServer {
	t.Helper()
	r := &registryServer{dirServer: newDirServer(t, serveStatus(http.StatusNotFound))}
	r.handle("/registry.txt", func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.etag != "" {
			w.Header().Set("ETag", r.etag)
		}
		if r.lastMod != "" {
			w.Header().Set("Last-Modified", r.lastMod)
		}
		if r.status == 0 && ((r.etag != "" && req.Header.Get("If-None-Match") == r.etag) ||
			(r.etag == "" && r.lastMod != "" && req.Header.Get("If-Modified-Since") == r.lastMod)) {
			r.not.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		ct := r.contentType
		if ct == "" {
			ct = "text/plain; charset=utf-8"
		}
		w.Header().Set("Content-Type", ct)
		if r.status != 0 {
			w.WriteHeader(r.status)
		} else {
			r.full.Add(1)
		}
		_, _ = w.Write(r.body)
	})
	return r
}

// serve sets the list's answer.
func (r *registryServer) serve(status int, contentType string, body []byte, etag, lastMod string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status, r.contentType, r.body, r.etag, r.lastMod = status, contentType, body, etag, lastMod
}

func (r *registryServer) listURL() string { return r.URL + "/registry.txt" }

// port returns the port of a loopback server's URL.
func port(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

// registryWorld is a registry on one loopback port listing cards served on
// two other ports, which TrustedHosts does not name.
type registryWorld struct {
	reg          *registryServer
	agents, jwks *dirServer
	key, other   signer.PublicKey
	list         string
	cfg          keyfetch.Config
}

func newRegistryWorld(t *testing.T) *registryWorld {
	t.Helper()
	w := &registryWorld{reg: newRegistryServer(t), key: testKey(1), other: testKey(2)}
	w.agents = newDirServer(t, serveKeys("max-age=60", "", w.key))
	w.jwks = newDirServer(t, serveStatus(http.StatusNotFound))
	w.jwks.handle("/jwks.json", serveBody(keyfetch.JWKSetMediaType, "max-age=60", "", jwksOf(w.other)))
	card, _ := json.Marshal(map[string]any{
		"client_name": "Example\nBot\u202e", "client_uri": "https://bot.example/about", "contacts": []string{"mailto:ops@bot.example"},
		"web_bot_auth": map[string]any{"purpose": strings.Repeat("p", 300), "trigger": "fetcher", "rfc9309-product-token": "ExampleBot"},
		"jwks":         map[string]any{"keys": []any{w.key.JWK}},
	})
	w.agents.handle("/card.json", serveBody("application/json", "", `"c1"`, string(card)))
	remote, _ := json.Marshal(map[string]any{"name": "Remote Bot", "contact": "remote@bot.example", "purpose": "search", "jwks_uri": w.jwks.URL + "/jwks.json"})
	w.agents.handle("/remote-card.json", serveBody("application/json", "", "", string(remote)))
	w.list = "# agents we trust\r\n\r\n" + w.agents.URL + "/card.json\r\n   # an indented comment\n" +
		w.agents.URL + "/remote-card.json\n" + w.agents.URL + "/card.json\n" +
		"not a url\nftp://bot.example/card.json\nhttps://origin-only.example\n\n"
	w.reg.serve(0, "", []byte(w.list), `"r1"`, "")
	w.cfg = keyfetch.Config{
		TrustedHosts:         []string{"127.0.0.1:" + port(t, w.reg.URL)},
		AllowHTTP:            true,
		AllowPrivateNetworks: true,
		Registries:           []string{w.reg.listURL()},
	}
	return w
}

// TestRegistryTrustsListedCards: the cards a registry lists are trusted
// once it is read (their origins, and the jwks_uri a card names, exactly),
// their descriptions are exposed per key set, and the list's comments,
// blank lines, duplicates and unusable lines are handled.
func TestRegistryTrustsListedCards(t *testing.T) {
	t.Parallel()
	w := newRegistryWorld(t)
	f := keyfetch.New(w.cfg)
	ctx := t.Context()
	dir := agentSet(t, w.agents.URL)
	_, err := f.Key(ctx, dir, w.key.Thumbprint)
	if keyfetch.ReasonOf(err) != keyfetch.ReasonUntrustedHost || !strings.Contains(err.Error(), "none of the 1 registries lists it") {
		t.Fatalf("before the registry is read: err = %v (reason %q), want untrusted_host naming the registries", err, keyfetch.ReasonOf(err))
	}
	if err := f.RefreshRegistries(ctx); err != nil {
		t.Fatalf("RefreshRegistries: %v", err)
	}
	for _, tc := range []struct {
		name string
		set  signer.KeySet
		kid  string
		want string
	}{
		{"card origin's directory", dir, w.key.Thumbprint, "ok"},
		{"the card itself", keySet(t, w.agents.URL+"/card.json", "cimd"), w.key.Thumbprint, "ok"},
		{"card naming a jwks_uri on another host", keySet(t, w.agents.URL+"/remote-card.json", "cimd"), w.other.Thumbprint, "ok"},
		{"that jwks_uri named directly", keySet(t, w.jwks.URL+"/jwks.json", "jwks_uri"), w.other.Thumbprint, "ok"},
		{"another URL on the jwks_uri host", keySet(t, w.jwks.URL+"/other.json", "jwks_uri"), w.other.Thumbprint, "untrusted"},
	} {
		if _, err := f.Key(ctx, tc.set, tc.kid); errKind(err) != tc.want {
			t.Errorf("%s: Key = %v, want %s", tc.name, err, tc.want)
		}
	}

	card, ok := f.CardInfo(dir)
	if !ok || card.Name != "ExampleBot" || card.ClientURI != "https://bot.example/about" || len(card.Contacts) != 1 || card.Contacts[0] != "mailto:ops@bot.example" ||
		card.Purpose != strings.Repeat("p", 256) || card.Trigger != "fetcher" || card.ProductToken != "ExampleBot" ||
		card.URL != w.agents.URL+"/card.json" || card.Registry != w.reg.listURL() || card.Fetched.IsZero() {
		t.Errorf("CardInfo(directory) = %+v, %v; want the first listed card, control characters dropped, purpose cut to 256 bytes", card, ok)
	}
	remote, ok := f.CardInfo(keySet(t, w.agents.URL+"/remote-card.json", "cimd"))
	if !ok || remote.Name != "Remote Bot" || remote.Purpose != "search" || len(remote.Contacts) != 1 || remote.Contacts[0] != "remote@bot.example" || remote.JWKSURI != w.jwks.URL+"/jwks.json" {
		t.Errorf("CardInfo(remote card) = %+v, %v; want the remote card read with the early draft's names", remote, ok)
	}
	// The remote card's jwks_uri is on another origin: the card did not
	// lead there on its own origin's word, so its claims stay off that key
	// set (which stays trusted, to be fetched through the card).
	if c, ok := f.CardInfo(keySet(t, w.jwks.URL+"/jwks.json", "jwks_uri")); ok {
		t.Errorf("CardInfo(jwks_uri on another origin) = %+v, want none", c)
	}
	if c, ok := f.CardInfo(agentSet(t, "https://unlisted.example")); ok {
		t.Errorf("CardInfo(unlisted) = %+v, want none", c)
	}

	st := f.Registries()
	if len(st) != 1 || st[0].Entries != 2 || st[0].Cards != 2 || st[0].Err != nil || st[0].Updated.IsZero() || len(st[0].Problems) != 3 {
		t.Fatalf("Registries() = %+v, want 2 entries (duplicate dropped), 2 cards, 3 problems (the unusable lines)", st)
	}
	for i, want := range []string{"line 7: \"not a url\" is not an absolute URL", "line 8:", "line 9: \"https://origin-only.example\" names an origin"} {
		if !strings.Contains(st[0].Problems[i], want) {
			t.Errorf("problem %d = %q, want it to contain %q", i, st[0].Problems[i], want)
		}
	}
}

// TestRegistryConditionalRefresh: a refresh revalidates the list with its
// ETag or, without one, its Last-Modified date; a 304 keeps the list.
func TestRegistryConditionalRefresh(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, etag, lastMod string }{
		{"ETag", `"r1"`, ""},
		{"Last-Modified", "", "Wed, 25 Nov 2026 10:00:00 GMT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newRegistryWorld(t)
			w.reg.serve(0, "", []byte(w.list), tc.etag, tc.lastMod)
			f := keyfetch.New(w.cfg)
			for i := range 3 {
				if err := f.RefreshRegistries(t.Context()); err != nil {
					t.Fatalf("refresh %d: %v", i, err)
				}
			}
			if full, not := w.reg.full.Load(), w.reg.not.Load(); full != 1 || not != 2 {
				t.Errorf("registry answered 200 %d times and 304 %d times, want 1 and 2", full, not)
			}
			if st := f.Registries(); st[0].Entries != 2 || st[0].Err != nil {
				t.Errorf("after 304s: %+v, want the 2 entries kept", st[0])
			}
			if _, err := f.Key(t.Context(), agentSet(t, w.agents.URL), w.key.Thumbprint); err != nil {
				t.Errorf("Key after 304s: %v", err)
			}
		})
	}
}

// TestRegistryFailedRefreshKeepsList: a refresh that fails keeps the last
// good list in force; a list that drops a card untrusts it, and the key
// sets cached from it are dropped.
func TestRegistryFailedRefreshKeepsList(t *testing.T) {
	t.Parallel()
	w := newRegistryWorld(t)
	f := keyfetch.New(w.cfg)
	ctx := t.Context()
	if err := f.RefreshRegistries(ctx); err != nil {
		t.Fatal(err)
	}
	dir := agentSet(t, w.agents.URL)
	if _, err := f.Key(ctx, dir, w.key.Thumbprint); err != nil {
		t.Fatal(err)
	}
	w.reg.serve(http.StatusInternalServerError, "", []byte("down"), "", "")
	err := f.RefreshRegistries(ctx)
	var fe *keyfetch.FetchError
	if !errors.As(err, &fe) || fe.StatusCode != http.StatusInternalServerError {
		t.Fatalf("refresh against a 500: err = %v, want a *FetchError with status 500", err)
	}
	if st := f.Registries(); st[0].Entries != 2 || st[0].Err == nil {
		t.Errorf("after a failed refresh: %+v, want the 2 entries kept and the error reported", st[0])
	}
	card := keySet(t, w.agents.URL+"/card.json", "cimd") // not cached yet: trust is checked afresh
	if _, err := f.Key(ctx, card, w.key.Thumbprint); err != nil {
		t.Errorf("Key after a failed refresh: %v, want the last good list to trust the card", err)
	}

	w.reg.serve(0, "", []byte("# empty\n"), `"r3"`, "")
	if err := f.RefreshRegistries(ctx); err != nil {
		t.Fatal(err)
	}
	for _, set := range []signer.KeySet{dir, card, keySet(t, w.jwks.URL+"/jwks.json", "jwks_uri")} {
		if _, err := f.Key(ctx, set, w.key.Thumbprint); errKind(err) != "untrusted" {
			t.Errorf("Key(%s) after the registry dropped it = %v, want untrusted (cached set dropped)", set.URL, err)
		}
	}
	if _, ok := f.CardInfo(dir); ok {
		t.Error("CardInfo still answers for a dropped card")
	}
}

// TestRegistryHostileLists: a list that is too large, binary, not plain
// text, has more entries than MaxRegistryEntries, or redirects is refused
// and the last good list stays in force.
func TestRegistryHostileLists(t *testing.T) {
	t.Parallel()
	many := func(n int) []byte {
		var b bytes.Buffer
		for i := range n {
			fmt.Fprintf(&b, "http://127.0.0.1:1/card%d.json\n", i) // nothing listens on port 1
		}
		return b.Bytes()
	}
	tests := []struct {
		name        string
		status      int
		contentType string
		body        []byte
		want        string
	}{
		{"larger than MaxRegistryBytes", 0, "", append(bytes.Repeat([]byte("# padding line\n"), 80000), 'x'), "body exceeds 1048576 bytes"},
		{"binary", 0, "", []byte("https://a.example/card.json\n\x00\x01\x02\xff"), "not UTF-8 text"},
		{"not UTF-8", 0, "", []byte("https://a.example/card.json\n\xc3\x28\n"), "not UTF-8 text"},
		{"thousands of lines", 0, "", many(keyfetch.DefaultMaxRegistryEntries + 1), "more than 1000 entries"},
		{"another media type", 0, "application/octet-stream", []byte("https://a.example/card.json\n"), `media type "application/octet-stream" is not text/plain`},
		{"another charset", 0, "text/plain; charset=utf-16", []byte("https://a.example/card.json\n"), `charset "utf-16"`},
		{"redirect", http.StatusFound, "", nil, "status 302"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newRegistryWorld(t)
			f := keyfetch.New(w.cfg)
			if err := f.RefreshRegistries(t.Context()); err != nil {
				t.Fatal(err)
			}
			w.reg.serve(tt.status, tt.contentType, tt.body, "", "")
			err := f.RefreshRegistries(t.Context())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
			if st := f.Registries(); st[0].Entries != 2 || st[0].Err == nil {
				t.Errorf("after a hostile list: %+v, want the 2 good entries kept", st[0])
			}
			if _, err := f.Key(t.Context(), agentSet(t, w.agents.URL), w.key.Thumbprint); err != nil {
				t.Errorf("Key after a hostile list: %v, want the last good list in force", err)
			}
		})
	}
	// Exactly MaxRegistryEntries lines are accepted, even when no card
	// answers.
	w := newRegistryWorld(t)
	w.reg.serve(0, "", many(keyfetch.DefaultMaxRegistryEntries), "", "")
	f := keyfetch.New(w.cfg)
	if err := f.RefreshRegistries(t.Context()); err != nil {
		t.Fatalf("a list of exactly %d entries: %v", keyfetch.DefaultMaxRegistryEntries, err)
	}
	if st := f.Registries(); st[0].Entries != keyfetch.DefaultMaxRegistryEntries || st[0].Cards != 0 || len(st[0].Problems) != 20 {
		t.Errorf("entries = %d, cards = %d, problems = %d; want %d entries, no card, 20 problems (capped)", st[0].Entries, st[0].Cards, len(st[0].Problems), keyfetch.DefaultMaxRegistryEntries)
	}
}

// TestRegistryConfig: a registry must itself be trusted.
func TestRegistryConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  keyfetch.Config
		want string
	}{
		{"untrusted host", keyfetch.Config{TrustedHosts: []string{"agents.example"}, Registries: []string{"https://registry.example/list.txt"}}, "matches no TrustedHosts pattern"},
		{"http without AllowHTTP", keyfetch.Config{TrustedHosts: []string{"registry.example"}, Registries: []string{"http://registry.example/list.txt"}}, "AllowHTTP is off"},
		{"not a URL", keyfetch.Config{TrustedHosts: []string{"registry.example"}, Registries: []string{"registry.example"}}, "not an absolute http(s) URL"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "Registries entry") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want a Registries entry error containing %q", tc.name, err, tc.want)
		}
	}
	ok := keyfetch.Config{TrustedHosts: []string{"registry.example"}, Registries: []string{"https://registry.example/list.txt"}}
	if err := ok.Validate(); err != nil {
		t.Errorf("trusted registry: Validate = %v", err)
	}
}

// FuzzParseRegistry: any list is read without a panic; what is accepted is
// at most MaxRegistryEntries distinct card URLs, each one the trust
// policy's scheme and URL rules accept, and at most 20 problems.
func FuzzParseRegistry(f *testing.F) {
	f.Add([]byte("# registry\nhttps://a.example/card.json\n\nhttps://a.example/card.json\r\nnot a url\n"))
	f.Add([]byte("https://[::1]:8443/c.json\nhttp://b.example/c\n\x00"))
	f.Add([]byte("https://a.example\n   # x\nhttps://a.example/c?x=1#frag\n"))
	fetcher := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"registry.example"}, MaxRegistryEntries: 5})
	f.Fuzz(func(t *testing.T, body []byte) {
		entries, problems, err := fetcher.ParseRegistry(body)
		if err != nil {
			if entries != nil {
				t.Fatalf("refused list returned entries %q", entries)
			}
			return
		}
		if len(entries) > 5 || len(problems) > 20 {
			t.Fatalf("%d entries, %d problems: want at most 5 and 20", len(entries), len(problems))
		}
		seen := map[string]bool{}
		for _, e := range entries {
			if seen[e] {
				t.Fatalf("duplicate entry %q", e)
			}
			seen[e] = true
			if !strings.HasPrefix(e, "https://") || strings.ContainsAny(e, " \t\r\n#") {
				t.Fatalf("entry %q is not an https URL without spaces or fragment", e)
			}
		}
	})
}

// TestCardInfoFromCachedCard: without a registry, a card key set that was
// fetched describes its agent too; a directory key set has no card.
func TestCardInfoFromCachedCard(t *testing.T) {
	t.Parallel()
	k := testKey(3)
	s := newDirServer(t, serveKeys("max-age=60", "", k))
	card, _ := json.Marshal(map[string]any{"client_name": "Cached Bot", "web_bot_auth": map[string]any{"purpose": "ai-input"}, "jwks": map[string]any{"keys": []any{k.JWK}}})
	s.handle("/card.json", serveBody("application/json", "max-age=60", "", string(card)))
	f := keyfetch.New(testConfig(newClock()))
	set := keySet(t, s.URL+"/card.json", "cimd")
	if _, ok := f.CardInfo(set); ok {
		t.Fatal("CardInfo before any fetch answered")
	}
	if _, err := f.Key(t.Context(), set, k.Thumbprint); err != nil {
		t.Fatal(err)
	}
	c, ok := f.CardInfo(set)
	if !ok || c.Name != "Cached Bot" || c.Purpose != "ai-input" || c.URL != set.URL || c.Registry != "" {
		t.Errorf("CardInfo = %+v, %v; want the fetched card", c, ok)
	}
	dir := agentSet(t, s.URL)
	if _, err := f.Key(t.Context(), dir, k.Thumbprint); err != nil {
		t.Fatal(err)
	}
	if c, ok := f.CardInfo(dir); ok {
		t.Errorf("CardInfo(directory) = %+v, want none", c)
	}
}
