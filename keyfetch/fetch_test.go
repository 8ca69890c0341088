package keyfetch_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
)

func TestKeyDirectoryValidation(t *testing.T) {
	t.Parallel()
	k1, k2 := testKey(1), testKey(2)
	jwk := func(k signer.PublicKey, extra string) string {
		return fmt.Sprintf(`{"kty":"OKP","crv":"Ed25519","x":%q%s}`, k.JWK.X, extra)
	}
	dir := func(keys ...string) string { return `{"keys":[` + strings.Join(keys, ",") + `]}` }
	withKid := func(k signer.PublicKey) string { return jwk(k, fmt.Sprintf(`,"kid":%q`, k.JWK.Kid)) }
	big := dir(withKid(k1)) + strings.Repeat(" ", 70<<10)

	tests := []struct {
		name        string
		contentType string
		body        string
		status      int
		maxKeys     int
		kid         string
		want        string // ok, unknown, fetch
	}{
		{name: "directory media type", contentType: signer.DirectoryMediaType, body: dir(withKid(k1)), kid: k1.JWK.Kid, want: "ok"},
		{name: "json with charset", contentType: "application/json; charset=utf-8", body: dir(withKid(k1)), kid: k1.JWK.Kid, want: "ok"},
		{name: "media type with parameters", contentType: signer.DirectoryMediaType + `; foo="bar"`, body: dir(withKid(k1)), kid: k1.JWK.Kid, want: "ok"},
		{name: "text/html refused", contentType: "text/html", body: dir(withKid(k1)), kid: k1.JWK.Kid, want: "fetch"},
		{name: "jwk-set media type", contentType: "application/jwk-set+json", body: dir(withKid(k1)), kid: k1.JWK.Kid, want: "ok"},
		{name: "other json media type refused", contentType: "application/problem+json", body: dir(withKid(k1)), kid: k1.JWK.Kid, want: "fetch"},
		{name: "missing media type refused", contentType: "", body: dir(withKid(k1)), kid: k1.JWK.Kid, want: "fetch"},
		{name: "body over 64 KiB refused", contentType: signer.DirectoryMediaType, body: big, kid: k1.JWK.Kid, want: "fetch"},
		{name: "not json", contentType: signer.DirectoryMediaType, body: `<html>`, kid: k1.JWK.Kid, want: "fetch"},
		{name: "top level array", contentType: signer.DirectoryMediaType, body: `[` + withKid(k1) + `]`, kid: k1.JWK.Kid, want: "fetch"},
		{name: "null document", contentType: signer.DirectoryMediaType, body: `null`, kid: k1.JWK.Kid, want: "fetch"},
		{name: "single bare JWK is a one-key set", contentType: "application/json", body: withKid(k1), kid: k1.JWK.Kid, want: "ok"},
		{name: "single bare JWK without kid", contentType: "application/json", body: jwk(k1, ""), kid: k1.JWK.Kid, want: "ok"},
		{name: "single unusable JWK", contentType: "application/json", body: `{"kty":"OKP","crv":"Ed25519","x":"AAAA"}`, kid: k1.JWK.Kid, want: "unknown"},
		{name: "no keys member", contentType: signer.DirectoryMediaType, body: `{"jwks":[]}`, kid: k1.JWK.Kid, want: "fetch"},
		{name: "keys not an array", contentType: signer.DirectoryMediaType, body: `{"keys":{}}`, kid: k1.JWK.Kid, want: "fetch"},
		{name: "trailing data", contentType: signer.DirectoryMediaType, body: dir(withKid(k1)) + `{}`, kid: k1.JWK.Kid, want: "fetch"},
		{name: "more than MaxKeys", contentType: signer.DirectoryMediaType, body: dir(withKid(k1), withKid(k2), withKid(testKey(3))), maxKeys: 2, kid: k1.JWK.Kid, want: "fetch"},
		{name: "exactly MaxKeys", contentType: signer.DirectoryMediaType, body: dir(withKid(k1), withKid(k2)), maxKeys: 2, kid: k2.JWK.Kid, want: "ok"},
		{name: "empty keys", contentType: signer.DirectoryMediaType, body: `{"keys":[]}`, kid: k1.JWK.Kid, want: "unknown"},
		{name: "key without kid indexed by thumbprint", contentType: signer.DirectoryMediaType, body: dir(jwk(k1, "")), kid: k1.JWK.Kid, want: "ok"},
		{name: "a kid that is not the thumbprint is ignored here", contentType: signer.DirectoryMediaType, body: dir(jwk(k1, `,"kid":"mine"`)), kid: "mine", want: "unknown"},
		{name: "key with another kid found by thumbprint", contentType: signer.DirectoryMediaType, body: dir(jwk(k1, `,"kid":"mine"`)), kid: k1.JWK.Kid, want: "ok"},
		{name: "kid of another key does not find that key", contentType: signer.DirectoryMediaType, body: dir(jwk(k1, fmt.Sprintf(`,"kid":%q`, k2.JWK.Kid))), kid: k2.JWK.Kid, want: "unknown"},
		{name: "duplicate kid: the first key is kept", contentType: signer.DirectoryMediaType, body: dir(jwk(k1, `,"kid":"a"`), jwk(k2, `,"kid":"a"`)), kid: k2.JWK.Kid, want: "unknown"},
		{name: "private key skipped", contentType: signer.DirectoryMediaType, body: dir(jwk(k1, `,"d":"AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE"`)), kid: k1.JWK.Kid, want: "unknown"},
		{name: "bad x skipped", contentType: signer.DirectoryMediaType, body: dir(`{"kty":"OKP","crv":"Ed25519","x":"AAAA"}`, withKid(k2)), kid: k2.JWK.Kid, want: "ok"},
		{name: "short rsa key skipped, next key used", contentType: signer.DirectoryMediaType, body: dir(`{"kty":"RSA","n":"AQAB","e":"AQAB","kid":"r"}`, withKid(k2)), kid: k2.JWK.Kid, want: "ok"},
		{name: "key marked for another algorithm skipped", contentType: signer.DirectoryMediaType, body: dir(jwk(k1, `,"alg":"ES256"`)), kid: k1.JWK.Kid, want: "unknown"},
		{name: "x25519 skipped", contentType: signer.DirectoryMediaType, body: dir(fmt.Sprintf(`{"kty":"OKP","crv":"X25519","x":%q}`, k1.JWK.X)), kid: k1.JWK.Kid, want: "unknown"},
		{name: "extra members allowed", contentType: signer.DirectoryMediaType, body: dir(jwk(k1, `,"use":"sig","alg":"EdDSA","nbf":1`)), kid: k1.JWK.Kid, want: "ok"},
		{name: "status 500", status: http.StatusInternalServerError, kid: k1.JWK.Kid, want: "fetch"},
		{name: "status 403", status: http.StatusForbidden, kid: k1.JWK.Kid, want: "fetch"},
		{name: "status 404 is an empty directory", status: http.StatusNotFound, kid: k1.JWK.Kid, want: "unknown"},
		{name: "status 410 is an empty directory", status: http.StatusGone, kid: k1.JWK.Kid, want: "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := serveBody(tt.contentType, "", "", tt.body)
			if tt.status != 0 {
				h = serveStatus(tt.status)
			}
			srv := newDirServer(t, h)
			cfg := testConfig(newClock())
			cfg.MaxKeys = tt.maxKeys
			f := keyfetch.New(cfg)
			pk, err := f.Key(context.Background(), agentSet(t, srv.URL), tt.kid)
			if got := errKind(err); got != tt.want {
				t.Fatalf("Key error kind = %s (%v), want %s", got, err, tt.want)
			}
			if err == nil && pk.Thumbprint != tt.kid {
				t.Errorf("Key thumbprint = %q, want %q", pk.Thumbprint, tt.kid)
			}
			if err == nil && pk.JWK.D != "" {
				t.Errorf("Key returned a private member")
			}
			var fe *keyfetch.FetchError
			if errors.As(err, &fe) && !strings.HasSuffix(fe.URL, signer.DirectoryPath) {
				t.Errorf("FetchError.URL = %q, want the directory URL", fe.URL)
			}
		})
	}
}

func TestUntrustedAgentMakesNoConnection(t *testing.T) {
	t.Parallel()
	srv := newDirServer(t, serveKeys("", "", testKey(1)))
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	tests := []struct {
		name  string
		cfg   func(*keyfetch.Config)
		agent string // a Signature-Agent value; set when it is no key-set URL
		set   signer.KeySet
	}{
		{name: "empty TrustedHosts trusts nothing", cfg: func(c *keyfetch.Config) { c.TrustedHosts = nil }, agent: srv.URL},
		{name: "host not listed", cfg: func(c *keyfetch.Config) { c.TrustedHosts = []string{"example.com"} }, agent: srv.URL},
		{name: "host not listed, key-set URL with a path", cfg: func(c *keyfetch.Config) { c.TrustedHosts = []string{"example.com"} }, agent: srv.URL + "/keys.json?v=1"},
		{name: "wildcard does not match an IP", cfg: func(c *keyfetch.Config) { c.TrustedHosts = []string{"*.0.0.1"} }, agent: srv.URL},
		{name: "port pattern mismatch", cfg: func(c *keyfetch.Config) { c.TrustedHosts = []string{"127.0.0.1:1"} }, agent: srv.URL},
		{name: "http without AllowHTTP", cfg: func(c *keyfetch.Config) { c.AllowHTTP = false }, agent: srv.URL},
		{name: "other scheme", agent: "ftp://127.0.0.1:" + port, set: signer.KeySet{URL: "ftp://127.0.0.1:" + port + "/keys"}},
		{name: "userinfo refused", agent: "http://user@127.0.0.1:" + port, set: signer.KeySet{URL: "http://user@127.0.0.1:" + port + "/keys"}},
		{name: "fragment refused", agent: srv.URL + "/keys#k", set: signer.KeySet{URL: srv.URL + "/keys#k"}},
		{name: "relative URL refused", agent: "/keys", set: signer.KeySet{URL: "/keys"}},
		{name: "no key set", agent: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(newClock())
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			f := keyfetch.New(cfg)
			set := tt.set
			if set.IsZero() && tt.agent != "" {
				set = agentSet(t, tt.agent)
			}
			before := srv.accepts.Load()
			_, err := f.Key(context.Background(), set, testKey(1).JWK.Kid)
			if !errors.Is(err, signer.ErrUntrustedAgent) {
				t.Errorf("Key error = %v, want ErrUntrustedAgent", err)
			}
			if _, err := f.Keys(context.Background(), set); !errors.Is(err, signer.ErrUntrustedAgent) {
				t.Errorf("Keys error = %v, want ErrUntrustedAgent", err)
			}
			if r, err := f.CheckKeySet(context.Background(), set); !errors.Is(err, signer.ErrUntrustedAgent) || r != nil {
				t.Errorf("CheckKeySet = %v, %v; want nil, ErrUntrustedAgent", r, err)
			}
			if got := srv.accepts.Load() - before; got != 0 {
				t.Errorf("accepted connections = %d, want 0", got)
			}
		})
	}
	// The same server is reachable when trusted, so the counter can move.
	f := keyfetch.New(testConfig(newClock()))
	if _, err := f.Key(context.Background(), agentSet(t, srv.URL), testKey(1).JWK.Kid); err != nil {
		t.Fatalf("trusted Key error = %v, want nil", err)
	}
	if got := srv.accepts.Load(); got == 0 {
		t.Errorf("accepted connections = %d after a trusted lookup, want > 0", got)
	}
}

func TestTrustedHostPatterns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		patterns []string
		url      string
		want     bool
	}{
		{[]string{"*.example.com"}, "https://a.example.com", true},
		{[]string{"*.example.com"}, "https://a.b.example.com" + signer.DirectoryPath, true},
		{[]string{"*.example.com"}, "https://a.example.com/keys/jwks.json?v=2", true},
		{[]string{"*.example.com"}, "https://example.com", false},
		{[]string{"*.example.com"}, "https://evilexample.com", false},
		{[]string{"*.example.com"}, "https://a.evilexample.com", false},
		{[]string{"*.example.com"}, "https://example.com.evil.net", false},
		{[]string{"*.example.com"}, "https://a.example.com:8443", false},
		{[]string{"*.example.com"}, "https://a.example.com:443", true},
		{[]string{"*.example.com:*"}, "https://a.example.com:8443", true},
		{[]string{"example.com"}, "http://example.com:80", true},
		{[]string{"example.com"}, "http://example.com:443", false},
		{[]string{"example.com"}, "https://example.com:80", false},
		{[]string{"example.com:*"}, "http://example.com:8080", true},
		{[]string{"*.Example.COM"}, "https://A.example.com", true},
		{[]string{"example.com"}, "https://example.com", true},
		{[]string{"example.com"}, "https://a.example.com", false},
		{[]string{"example.com"}, "https://example.com.", false},
		{[]string{"example.com"}, "https://exampleXcom", false},
		{[]string{"example.com"}, "https://example.com:", false},
		{[]string{"example.com"}, "https://example.com/keys#frag", false},
		{[]string{"example.com"}, "https://user@example.com/keys", false},
		{[]string{"example.com"}, "//example.com/keys", false},
		{[]string{"example.com:8443"}, "https://example.com:8443", true},
		{[]string{"example.com:8443"}, "https://example.com", false},
		{[]string{"example.com:443"}, "https://example.com", true},
		{[]string{"example.com:443"}, "http://example.com", false},
		{[]string{"*.localhost"}, "http://agent-x.localhost:3000", false},
		{[]string{"*.localhost:*"}, "http://agent-x.localhost:3000", true},
		{[]string{"*.localhost:3000"}, "http://agent-x.localhost:3000", true},
		{[]string{"[::1]"}, "http://[::1]:8080", false},
		{[]string{"[::1]"}, "http://[::1]", true},
		{[]string{"[::1]:*"}, "http://[::1]:8080", true},
		{[]string{"[::1]:8080"}, "http://[::1]:9090", false},
		{[]string{"a.com", "*.b.com"}, "https://x.b.com/", true},
		{[]string{"*.example.com"}, "https://a..example.com", false},
		{[]string{"*.example.com"}, "https://a%2e.example.com", false},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.patterns, ",")+" "+tt.url, func(t *testing.T) {
			t.Parallel()
			f := keyfetch.New(keyfetch.Config{TrustedHosts: tt.patterns, AllowHTTP: true})
			err := f.TrustURL(tt.url)
			if got := err == nil; got != tt.want {
				t.Errorf("TrustURL = %v, want trusted %v", err, tt.want)
			}
			if err != nil && !errors.Is(err, signer.ErrUntrustedAgent) {
				t.Errorf("error = %v, want ErrUntrustedAgent", err)
			}
		})
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	target := newDirServer(t, serveKeys("", "", testKey(1)))
	src := newDirServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+signer.DirectoryPath, http.StatusFound)
	})
	tests := []struct {
		name   string
		client *http.Client
	}{
		{name: "built-in client"},
		{name: "caller's client that follows redirects", client: &http.Client{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(newClock())
			cfg.HTTPClient = tt.client
			_, err := keyfetch.New(cfg).Key(context.Background(), agentSet(t, src.URL), testKey(1).JWK.Kid)
			var fe *keyfetch.FetchError
			if !errors.As(err, &fe) || fe.StatusCode != http.StatusFound {
				t.Fatalf("Key error = %v, want a FetchError with status 302", err)
			}
			if got := target.hits.Load(); got != 0 {
				t.Errorf("redirect target hits = %d, want 0", got)
			}
		})
	}
}

func TestPrivateAddressRefusedAtDial(t *testing.T) {
	t.Parallel()
	srv := newDirServer(t, serveKeys("", "", testKey(1)))
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	tests := []struct {
		name  string
		agent string
	}{
		{name: "ip literal", agent: "http://127.0.0.1:" + port},
		{name: "hostname resolving to loopback", agent: "http://localhost:" + port},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := keyfetch.New(keyfetch.Config{
				TrustedHosts: []string{"127.0.0.1:*", "localhost:*"},
				AllowHTTP:    true,
			})
			before := srv.accepts.Load()
			_, err := f.Key(context.Background(), agentSet(t, tt.agent), testKey(1).JWK.Kid)
			var fe *keyfetch.FetchError
			if !errors.As(err, &fe) {
				t.Fatalf("Key error = %v, want a *FetchError", err)
			}
			if !errors.Is(err, keyfetch.ErrPrivateAddress) {
				t.Errorf("Key error = %v, want it to wrap ErrPrivateAddress", err)
			}
			if got := srv.accepts.Load() - before; got != 0 {
				t.Errorf("accepted connections = %d, want 0", got)
			}
		})
	}
}

func TestFetchTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := newDirServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) })
	cfg := testConfig(newClock())
	cfg.Timeout = 100 * time.Millisecond
	_, err := keyfetch.New(cfg).Key(context.Background(), agentSet(t, srv.URL), testKey(1).JWK.Kid)
	var fe *keyfetch.FetchError
	if !errors.As(err, &fe) {
		t.Fatalf("Key error = %v, want a *FetchError", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Key error = %v, want it to wrap context.DeadlineExceeded", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     keyfetch.Config
		wantErr string
	}{
		{name: "zero config", cfg: keyfetch.Config{}},
		{name: "patterns", cfg: keyfetch.Config{TrustedHosts: []string{"a.com", "*.b.com", "c.com:8443", "[::1]", "[::1]:80", "[::1]:*", "d.com:*", "*.e.com:*", "10.0.0.1"}}},
		{name: "url instead of host", cfg: keyfetch.Config{TrustedHosts: []string{"https://a.com"}}, wantErr: "not a URL"},
		{name: "empty pattern", cfg: keyfetch.Config{TrustedHosts: []string{""}}, wantErr: "empty"},
		{name: "inner wildcard", cfg: keyfetch.Config{TrustedHosts: []string{"a.*.com"}}, wantErr: "wildcard"},
		{name: "bare wildcard", cfg: keyfetch.Config{TrustedHosts: []string{"*"}}, wantErr: "wildcard"},
		{name: "wildcard without suffix", cfg: keyfetch.Config{TrustedHosts: []string{"*."}}, wantErr: "suffix"},
		{name: "bad port", cfg: keyfetch.Config{TrustedHosts: []string{"a.com:99999"}}, wantErr: "port"},
		{name: "unbracketed ipv6", cfg: keyfetch.Config{TrustedHosts: []string{"::1"}}, wantErr: "brackets"},
		{name: "negative timeout", cfg: keyfetch.Config{Timeout: -1}, wantErr: "Timeout"},
		{name: "min above max", cfg: keyfetch.Config{MinTTL: time.Hour, MaxTTL: time.Minute}, wantErr: "MinTTL"},
		{name: "default outside bounds", cfg: keyfetch.Config{DefaultTTL: 2 * time.Hour}, wantErr: "DefaultTTL"},
		{name: "default clamped when zero", cfg: keyfetch.Config{MinTTL: time.Second, MaxTTL: time.Minute}},
		{name: "negative disables", cfg: keyfetch.Config{MaxStale: -1, NegativeTTL: -1, RefreshCooldown: -1}},
		{name: "negative MaxKeys", cfg: keyfetch.Config{MaxKeys: -1}, wantErr: "MaxKeys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate = %v, want an error mentioning %q", err, tt.wantErr)
			}
			defer func() {
				if p := recover(); (p != nil) != (tt.wantErr != "") {
					t.Errorf("New panic = %v, want panic %v", p, tt.wantErr != "")
				}
			}()
			keyfetch.New(tt.cfg)
		})
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	k1 := testKey(1)
	body := fmt.Sprintf(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":%q,"kid":%q},{"kty":"OKP","crv":"Ed25519","x":%q,"kid":"wrong"},{"kty":"OKP","crv":"X25519","x":%q}]}`,
		k1.JWK.X, k1.JWK.Kid, testKey(2).JWK.X, k1.JWK.X)
	tests := []struct {
		name         string
		h            http.HandlerFunc
		wantErr      bool
		wantKeys     int
		wantProblems []string
		wantWarnings []string
	}{
		{
			name:         "good directory",
			h:            serveKeys("max-age=60", `"v1"`, k1),
			wantKeys:     1,
			wantProblems: nil,
		},
		{
			name:         "generic media type, no cache headers, kid not the thumbprint, unusable key",
			h:            serveBody("application/json", "", "", body),
			wantKeys:     2,
			wantProblems: []string{"keys[2] skipped"},
			wantWarnings: []string{"media type", "no ETag", "no max-age", `kid "wrong" is not the RFC 7638 thumbprint`},
		},
		{
			name:         "max-age clamped",
			h:            serveKeys("max-age=5", `"v1"`, k1),
			wantKeys:     1,
			wantWarnings: []string{"raised to the minimum"},
		},
		{
			name:         "server error",
			h:            serveStatus(http.StatusBadGateway),
			wantErr:      true,
			wantProblems: []string{"unexpected status 502"},
		},
		{
			name:         "not found",
			h:            serveStatus(http.StatusNotFound),
			wantErr:      true,
			wantProblems: []string{"status 404: no directory"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newDirServer(t, tt.h)
			r, err := keyfetch.New(testConfig(newClock())).CheckKeySet(context.Background(), agentSet(t, srv.URL))
			if (err != nil) != tt.wantErr {
				t.Fatalf("Check error = %v, want error %v", err, tt.wantErr)
			}
			if r == nil {
				t.Fatal("Check report = nil, want a report")
			}
			if got := len(r.Keys); got != tt.wantKeys {
				t.Errorf("len(Keys) = %d, want %d", got, tt.wantKeys)
			}
			if got, want := r.OK(), len(tt.wantProblems) == 0; got != want {
				t.Errorf("OK = %v (problems %q), want %v", got, r.Problems, want)
			}
			for _, w := range tt.wantProblems {
				if !containsSub(r.Problems, w) {
					t.Errorf("Problems = %q, want one mentioning %q", r.Problems, w)
				}
			}
			for _, w := range tt.wantWarnings {
				if !containsSub(r.Warnings, w) {
					t.Errorf("Warnings = %q, want one mentioning %q", r.Warnings, w)
				}
			}
		})
	}
}

func containsSub(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
