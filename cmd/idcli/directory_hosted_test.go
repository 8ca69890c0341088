package main

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/cfrules"
	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// cloudflareDirectoryRules applies, independently of our signer and
// keyfetch, the checks of Cloudflare's key-directory validator
// (http-signature-directory in cloudflare/web-bot-auth, as its README and
// source document them) to one directory response fetched from rawURL,
// and returns every rule broken (nil when it passes):
//   - the body is a JWK set with at least one key; every key is OKP
//     Ed25519;
//   - for every key, a Signature-Input member with created and expires, tag
//     "http-message-signatures-directory", keyid = the key's RFC 7638
//     thumbprint and "@authority" among its components;
//   - that signature has not expired (expires after now) and verifies over
//     a base where "@authority";req is the URL's authority and a field is
//     its first header line.
//
// The validator also requires an https:// URL; the loopback servers of
// tests are http://, so that rule is reported by `directory check` and not
// applied here. bindsBody adds our own rule: the signature covers
// content-digest and Content-Digest is the body's sha-256.
func cloudflareDirectoryRules(rawURL string, header http.Header, body []byte, now time.Time, bindsBody bool) []string {
	var broken []string
	u, err := url.Parse(rawURL)
	if err != nil {
		return []string{"url: " + err.Error()}
	}
	authority := u.Host
	var set struct {
		Keys []struct{ Kty, Crv, X string } `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil || len(set.Keys) == 0 {
		return []string{fmt.Sprintf("not a non-empty JWK set (%v)", err)}
	}
	member := regexp.MustCompile(`([a-z*][a-z0-9_*.-]*)=\(([^)]*)\)((?:;[a-z][a-z0-9_.*-]*=(?:"[^"]*"|-?[0-9]+))*)`)
	param := regexp.MustCompile(`;([a-z][a-z0-9_.*-]*)=("[^"]*"|-?[0-9]+)`)
	values := map[string]string{}
	for _, m := range regexp.MustCompile(`([a-z*][a-z0-9_*.-]*)=:([A-Za-z0-9+/=]*):`).FindAllStringSubmatch(strings.Join(header.Values("Signature"), ", "), -1) {
		values[m[1]] = m[2]
	}
	inputs := member.FindAllStringSubmatch(strings.Join(header.Values("Signature-Input"), ", "), -1)
	for _, k := range set.Keys {
		if k.Kty != "OKP" || k.Crv != "Ed25519" {
			broken = append(broken, "unsupported key "+k.Kty+"/"+k.Crv)
			continue
		}
		sum := sha256.Sum256([]byte(`{"crv":"Ed25519","kty":"OKP","x":"` + k.X + `"}`))
		tp := base64.RawURLEncoding.EncodeToString(sum[:])
		var found []string
		var params map[string]string
		for _, in := range inputs {
			ps := map[string]string{}
			for _, p := range param.FindAllStringSubmatch(in[3], -1) {
				ps[p[1]] = strings.Trim(p[2], `"`)
			}
			_, c := ps["created"]
			_, e := ps["expires"]
			if c && e && ps["tag"] == "http-message-signatures-directory" && ps["keyid"] == tp && strings.Contains(in[2], `"@authority"`) {
				found, params = in, ps
				break
			}
		}
		if found == nil {
			broken = append(broken, "key "+tp+": no signature with created, expires, the directory tag, keyid = thumbprint and @authority")
			continue
		}
		if exp, _ := strconv.ParseInt(params["expires"], 10, 64); !now.Before(time.Unix(exp, 0)) {
			broken = append(broken, "key "+tp+": signature expired")
		}
		var base strings.Builder
		for _, c := range strings.Fields(found[2]) {
			name := strings.Trim(strings.SplitN(c, ";", 2)[0], `"`)
			switch {
			case c == `"@authority";req`:
				base.WriteString(c + ": " + authority + "\n")
			case strings.HasPrefix(name, "@"):
				broken = append(broken, "key "+tp+": component "+c+" has no value")
			default:
				base.WriteString(c + ": " + header.Get(name) + "\n")
			}
		}
		base.WriteString(`"@signature-params": (` + found[2] + ")" + found[3])
		x, _ := base64.RawURLEncoding.DecodeString(k.X)
		sig, _ := base64.StdEncoding.DecodeString(values[found[1]])
		if len(x) != ed25519.PublicKeySize || !ed25519.Verify(x, []byte(base.String()), sig) {
			broken = append(broken, "key "+tp+": signature does not verify")
		}
		if bindsBody {
			digest := sha256.Sum256(body)
			if !strings.Contains(found[2], `"content-digest"`) || header.Get("Content-Digest") != "sha-256=:"+base64.StdEncoding.EncodeToString(digest[:])+":" {
				broken = append(broken, "key "+tp+": the signature does not bind the body")
			}
		}
	}
	return broken
}

// The validator above is not vacuous: it accepts the protocol-01 E.2.3
// signed directory response (whose expiry is 2124) and refuses it altered.
func TestCloudflareRulesOnVector(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/webbotauth_01_e23.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		V struct {
			Authority string            `json:"request_authority"`
			Body      string            `json:"response_body"`
			Headers   map[string]string `json:"response_headers"`
		} `json:"signed_directory_response"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	v := doc.V
	h := http.Header{}
	for k, x := range v.Headers {
		h.Set(k, x)
	}
	u := "https://" + v.Authority + signer.DirectoryPath
	now := time.Unix(1_800_000_000, 0)
	if broken := cloudflareDirectoryRules(u, h, []byte(v.Body), now, true); broken != nil {
		t.Errorf("vector: %v", broken)
	}
	tests := []struct {
		name   string
		url    string
		header func(http.Header)
		body   string
		now    time.Time
	}{
		{"other authority", "https://other.test" + signer.DirectoryPath, nil, v.Body, now},
		{"expired", u, nil, v.Body, time.Unix(4889289600, 0)},
		{"other body", u, nil, v.Body + " ", now},
		{"other tag", u, func(h http.Header) {
			h.Set("Signature-Input", strings.Replace(h.Get("Signature-Input"), "signatures-directory", "x", 1))
		}, v.Body, now},
		{"unsigned", u, func(h http.Header) { h.Del("Signature-Input"); h.Del("Signature") }, v.Body, now},
	}
	for _, tt := range tests {
		h2 := h.Clone()
		if tt.header != nil {
			tt.header(h2)
		}
		if broken := cloudflareDirectoryRules(tt.url, h2, []byte(tt.body), tt.now, true); broken == nil {
			t.Errorf("%s: accepted", tt.name)
		}
	}
}

// As a new user would, on each database: after `idcli agent init`, after
// `idcli agent rotate` and after `idcli agent directory refresh`, the
// agent's directory passes Cloudflare's validator rules and keyfetch with
// RequireSignedDirectories; past its validity without a refresh (the
// server's clock moved on) it is served unsigned, and both refuse it.
func TestHostedDirectorySignedEndToEnd(t *testing.T) {
	clitest.EachDatabase(t, func(t *testing.T, databaseURL string) {
		var skew atomic.Int64
		now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		srv := clitest.StartServer(t, clitest.ServerOptions{DatabaseURL: databaseURL,
			Configure: func(c *refserver.Config) { c.Now = now }})
		dir := t.TempDir()
		fetch := func() (string, http.Header, []byte) {
			t.Helper()
			uid := readEnvVar(t, dir, "AGENT_UID")
			u := strings.Replace(srv.URL, "://", "://"+uid+".", 1) + signer.DirectoryPath
			resp, err := srv.Client.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d %s", u, resp.StatusCode, body)
			}
			return u, resp.Header, body
		}
		requireSigned := func(u string) error {
			f := keyfetch.New(keyfetch.Config{RequireSignedDirectories: true, AllowHTTP: true, AllowPrivateNetworks: true,
				TrustedHosts: []string{"*." + strings.TrimPrefix(srv.URL, "http://")}, Now: now})
			set, err := signer.ParseKeySetURL(u)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.Keys(t.Context(), set)
			return err
		}
		passes := func(step string) {
			t.Helper()
			u, h, body := fetch()
			if broken := cloudflareDirectoryRules(u, h, body, now(), true); broken != nil {
				t.Errorf("after %s: Cloudflare's rules: %v", step, broken)
			}
			if err := requireSigned(u); err != nil {
				t.Errorf("after %s: keyfetch with RequireSignedDirectories: %v", step, err)
			}
			res := runCLI(t.Context(), dir, nil, "directory", "check", u, "--allow-http", "--allow-private")
			if !strings.Contains(res.stdout, "covers the body: the keys are authenticated") || !strings.Contains(res.stdout, "✔ Cloudflare") {
				t.Errorf("after %s: directory check printed\n%s%s", step, res.stdout, res.stderr)
			}
		}

		run := func(args ...string) {
			t.Helper()
			if res := runCLI(t.Context(), dir, nil, args...); res.err != nil {
				t.Fatalf("%v: %v\n%s%s", args, res.err, res.stdout, res.stderr)
			}
		}
		run("agent", "init", "--hostname", srv.URL)
		passes("agent init")
		run("agent", "rotate")
		passes("agent rotate")
		run("agent", "directory", "refresh", "--validity", "2h")
		passes("agent directory refresh")

		// Past the validity without a refresh: unsigned, and refused by both.
		skew.Store(int64(2*time.Hour + time.Second))
		u, h, body := fetch()
		if h.Get("Signature") != "" || h.Get("Signature-Input") != "" {
			t.Errorf("past the validity the directory is still signed: %q", h.Get("Signature-Input"))
		}
		if broken := cloudflareDirectoryRules(u, h, body, now(), true); broken == nil {
			t.Error("the unsigned directory passes Cloudflare's rules")
		}
		if err := requireSigned(u); err == nil {
			t.Error("keyfetch with RequireSignedDirectories accepts the unsigned directory")
		}

		// A signed call past half the validity refreshes it (the agent's
		// clock is the real one: its record says it was made 2h ago).
		skew.Store(0)
		envPath := filepath.Join(dir, ".env")
		b, _ := os.ReadFile(envPath)
		at := time.Now().Add(-2 * time.Hour).Unix()
		b = regexp.MustCompile(`AGENT_DIRECTORY_SIGNED_AT=[0-9]+`).ReplaceAll(b, []byte("AGENT_DIRECTORY_SIGNED_AT="+strconv.FormatInt(at, 10)))
		b = regexp.MustCompile(`AGENT_DIRECTORY_SIGNED_UNTIL=[0-9]+`).ReplaceAll(b, []byte("AGENT_DIRECTORY_SIGNED_UNTIL="+strconv.FormatInt(at+3600, 10)))
		if err := os.WriteFile(envPath, b, 0o600); err != nil {
			t.Fatal(err)
		}
		res := runCLI(t.Context(), dir, nil, "agent", "curl", srv.URL+"/whoami")
		if res.err != nil || !strings.Contains(res.stderr, "directory signature refreshed until") {
			t.Errorf("agent curl past half the validity: %v\n%s", res.err, res.stderr)
		}
		if got := readEnvVar(t, dir, "AGENT_DIRECTORY_SIGNED_AT"); got == strconv.FormatInt(at, 10) {
			t.Error("the record was not renewed")
		}
		res = runCLI(t.Context(), dir, nil, "agent", "curl", srv.URL+"/whoami")
		if res.err != nil || strings.Contains(res.stderr, "refreshed") {
			t.Errorf("agent curl right after a refresh: %v\n%s", res.err, res.stderr)
		}
		passes("a signed call past half the validity")
	})
}

// readEnvVar reads one variable of dir/.env.
func readEnvVar(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ".env"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + name + `="?([^"\n]*)"?$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s not in .env:\n%s", name, b)
	}
	return string(m[1])
}

// cfrules.Check (directory check) judges each key as the validator
// does: a signature that expired, one made for another authority, one
// under another tag and one by a key the directory does not hold each
// break a rule; a good one passes and says whether it binds the body.
func TestCloudflareRulesPerKey(t *testing.T) {
	t.Parallel()
	key := signertest.Key(5)
	body := signer.DirectoryBody([]signer.JWK{key.Public.JWK})
	const authority = "agent-0123456789abcdef01234567.agentid.example"
	now := time.Unix(1_900_000_000, 0)
	header := func(k signer.PrivateKey, auth string, created time.Time, tag string) http.Header {
		ds, err := signer.SignDirectory(k, "https", auth, body, created, created.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		cd, _ := signer.ContentDigest(body, "sha-256")
		return http.Header{"Content-Digest": {cd},
			"Signature-Input": {"binding0=" + strings.Replace(ds.Input, signer.DirectoryTag, tag, 1)},
			"Signature":       {"binding0=:" + base64.StdEncoding.EncodeToString(ds.Value) + ":"}}
	}
	tests := []struct {
		name   string
		header http.Header
		want   string // a word of the problem, "" for none
	}{
		{"good", header(key, authority, now, signer.DirectoryTag), ""},
		{"expired", header(key, authority, now.Add(-2*time.Hour), signer.DirectoryTag), "expired"},
		{"other authority", header(key, "agent-0123456789abcdef01234568.agentid.example", now, signer.DirectoryTag), "does not verify"},
		{"other tag", header(key, authority, now, "web-bot-auth"), "no signature"},
		{"other key", header(signertest.Key(6), authority, now, signer.DirectoryTag), "no signature"},
		{"unsigned", http.Header{}, "no signature"},
	}
	for _, tt := range tests {
		r := &keyfetch.Report{URL: "https://" + authority + signer.DirectoryPath, Kind: signer.KindDirectory, StatusCode: 200,
			Keys: []signer.PublicKey{key.Public}, Header: tt.header, Body: body}
		cf := cfrules.Check(r, now.Add(time.Minute))
		if cf == nil || len(cf.Keys) != 1 || !cf.HTTPS {
			t.Fatalf("%s: report %+v", tt.name, cf)
		}
		k := cf.Keys[0]
		if tt.want == "" {
			if !cf.OK() || !k.BindsBody {
				t.Errorf("%s: %+v, want it to pass and bind the body", tt.name, k)
			}
			continue
		}
		if cf.OK() || !strings.Contains(k.Problem, tt.want) {
			t.Errorf("%s: problem %q (ok %v), want one with %q", tt.name, k.Problem, cf.OK(), tt.want)
		}
	}
}
