package middleware_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

// The tests in this file take the attacker's side: someone who captures a
// request an agent sent (to the attacker's own site, or on its way to
// ours) and may send anything to ours. docs/security.md names them.

// agentHostKeys is a KeySource standing for an agent host that serves the
// same key set at every URL of its origin (as a host that ignores the
// query string and the path would): any key set on testOrigin's host
// holds keyA. It records the key-set URLs it was asked for.
type agentHostKeys struct {
	mu   sync.Mutex
	urls map[string]bool
}

func (k *agentHostKeys) Key(_ context.Context, set signer.KeySet, _ string) (signer.PublicKey, error) {
	if set.Origin() != testOrigin {
		return signer.PublicKey{}, signer.ErrUntrustedAgent
	}
	k.mu.Lock()
	if k.urls == nil {
		k.urls = map[string]bool{}
	}
	k.urls[set.Kind.String()+" "+set.URL] = true
	k.mu.Unlock()
	return keyA.Public, nil
}

// respellings are the Signature-Agent values an attacker can put on a
// captured request whose signature does not cover Signature-Agent: each
// names the same agent's key set (or one published by the same host).
var respellings = []string{
	`sig1="` + testOrigin + `"`,
	`sig1="` + testOrigin + `/?r=1"`,
	`sig1="` + testOrigin + `/?r=2"`,
	`sig1="` + testOrigin + `/?"`,
	`sig1="` + testOrigin + `?"`,
	`sig1="` + testOrigin + `/%2Ewell-known/http-message-signatures-directory"`,
	`sig1="` + testOrigin + `/.well-known/http-message-signatures-directory?r=1"`,
	`sig1="` + testOrigin + `/x/../.well-known/http-message-signatures-directory"`,
	`sig1="` + testOrigin + `";type=jwks_uri`,
	`sig1="` + testOrigin + `/keys.json";type=cimd`,
	`sig1="` + strings.ToUpper(testOrigin) + `"`,
	`sig1="` + testOrigin + `:443"`,
	`sig1="` + strings.TrimPrefix(testOrigin, "https://") + `"`,
	testOrigin, // the token form
}

// TestReplayAcrossSpellings: one captured request, resent with every
// respelling of its (uncovered) Signature-Agent, through two verifiers (two
// routes or instances) sharing one replay store, is accepted exactly once:
// the replay key is the verified key's thumbprint and the nonce, whatever
// key set the spelling resolved to.
func TestReplayAcrossSpellings(t *testing.T) {
	t.Parallel()
	keys := &agentHostKeys{}
	store := middleware.NewMemoryReplayStoreWithClock(clock)
	var vs []*middleware.Verifier
	for range 2 {
		v, err := middleware.New(middleware.Config{Keys: keys, Now: clock, Replay: store, Authorities: testAuthorities})
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	captured := signedRequest(t, keyA, signOpts(nil))
	accepted, replayed := 0, 0
	for i, sa := range respellings {
		r := captured.Clone(context.Background())
		r.Header.Set("Signature-Agent", sa)
		_, err := vs[i%2].Verify(r)
		switch codeOf(err) {
		case "":
			accepted++
		case "replayed_nonce":
			replayed++
		default:
			t.Errorf("Signature-Agent %s: %v, want accepted once, then replayed_nonce", sa, err)
		}
	}
	if accepted != 1 || replayed != len(respellings)-1 {
		t.Errorf("accepted %d and refused as replays %d of %d respellings, want 1 and %d", accepted, replayed, len(respellings), len(respellings)-1)
	}
	// The respellings did reach the key source as distinct key sets: only
	// the replay key made them one signature.
	if len(keys.urls) < 6 {
		t.Errorf("the key source saw %d distinct key sets (%v), want the respellings to differ", len(keys.urls), keys.urls)
	}
}

// TestReplayKey: the replay key depends on the key's thumbprint and the
// nonce only, is 32 bytes, and separates its two inputs.
func TestReplayKey(t *testing.T) {
	t.Parallel()
	a := middleware.ReplayKey(keyA.Public.Thumbprint, "n1")
	if len(a) != 32 {
		t.Fatalf("len(ReplayKey) = %d, want 32", len(a))
	}
	for _, other := range []string{
		middleware.ReplayKey(keyB.Public.Thumbprint, "n1"),
		middleware.ReplayKey(keyA.Public.Thumbprint, "n2"),
		middleware.ReplayKey(keyA.Public.Thumbprint+"n", "1"),
	} {
		if other == a {
			t.Error("two different (thumbprint, nonce) pairs share a replay key")
		}
	}
	if middleware.ReplayKey(keyA.Public.Thumbprint, "n1") != a {
		t.Error("ReplayKey is not deterministic")
	}
}

// noPeekKeys is a KeySource that is not a KeyCache (every lookup counts as
// one that may fetch) and counts its lookups.
type noPeekKeys struct {
	src   middleware.KeySource
	calls atomic.Int32
}

func (k *noPeekKeys) Key(ctx context.Context, set signer.KeySet, keyID string) (signer.PublicKey, error) {
	k.calls.Add(1)
	return k.src.Key(ctx, set, keyID)
}

// TestOtherHostRefused: a request the agent signed for evil.example (the
// attacker's site), sent to us with Host: evil.example or as an
// absolute-form request target, is refused with 421 misdirected_request in
// every mode (observe records it as invalid), before any key lookup.
func TestOtherHostRefused(t *testing.T) {
	t.Parallel()
	const evil = "https://evil.example/v1/things?x=1"
	for _, mode := range []middleware.Mode{middleware.Required, middleware.Optional, middleware.Observe} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			keys := &noPeekKeys{src: staticKeys()}
			var results []middleware.Result
			var mu sync.Mutex
			v, err := middleware.New(middleware.Config{Keys: keys, Now: clock, Mode: mode, Authorities: testAuthorities,
				OnResult: func(r middleware.Result) { mu.Lock(); results = append(results, r); mu.Unlock() }})
			if err != nil {
				t.Fatal(err)
			}
			reached := 0
			h := v.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }))

			// Host: evil.example, through the handler.
			r := httptest.NewRequest(http.MethodGet, evil, nil)
			if err := signer.Sign(r, keyA, signOpts(nil)); err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)

			// Absolute-form target over real HTTP: net/http takes the
			// target's host, whatever the Host header says.
			srv := httptest.NewServer(h)
			defer srv.Close()
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var raw bytes.Buffer
			fmt.Fprintf(&raw, "GET %s HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n", evil)
			for _, name := range []string{"Signature", "Signature-Input", "Signature-Agent"} {
				fmt.Fprintf(&raw, "%s: %s\r\n", name, r.Header.Get(name))
			}
			raw.WriteString("\r\n")
			if _, err := conn.Write(raw.Bytes()); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()

			wantStatus := http.StatusMisdirectedRequest
			if mode == middleware.Observe {
				wantStatus = http.StatusOK
			}
			if rec.Code != wantStatus || resp.StatusCode != wantStatus {
				t.Errorf("status = %d (Host) and %d (absolute-form), want %d", rec.Code, resp.StatusCode, wantStatus)
			}
			if mode != middleware.Observe && rec.Code == http.StatusMisdirectedRequest {
				var e errorJSON
				json.Unmarshal(rec.Body.Bytes(), &e)
				if e.Error.Code != "misdirected_request" {
					t.Errorf("code = %q, want misdirected_request", e.Error.Code)
				}
			}
			if want := map[bool]int{true: 2, false: 0}[mode == middleware.Observe]; reached != want {
				t.Errorf("the handler ran %d times, want %d", reached, want)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(results) != 2 {
				t.Fatalf("OnResult got %d outcomes, want 2", len(results))
			}
			for _, res := range results {
				if res.Outcome != middleware.OutcomeInvalid || res.Err == nil || res.Err.Code != middleware.CodeMisdirectedRequest {
					t.Errorf("outcome %s %v, want invalid misdirected_request", res.Outcome, res.Err)
				}
			}
			if n := keys.calls.Load(); n != 0 {
				t.Errorf("the key source was asked %d times, want 0 (refused before any fetch)", n)
			}
		})
	}
}

// TestAuthorities: which authorities an entry matches, the refusal when
// none is configured (with a warning at construction), and AnyAuthority.
func TestAuthorities(t *testing.T) {
	t.Parallel()
	req := func(target, host string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		if host != "" {
			r.Host = host
		}
		if err := signer.Sign(r, keyA, signOpts(nil)); err != nil {
			t.Fatal(err)
		}
		return r
	}
	tests := []struct {
		name        string
		authorities []string
		any         bool
		r           *http.Request
		wantCode    string
	}{
		{"exact host", []string{"api.example.com"}, false, req("https://api.example.com/", ""), ""},
		{"upper case entry and host", []string{"API.Example.com"}, false, req("https://api.example.com/", "API.EXAMPLE.COM"), ""},
		{"default port spelled out", []string{"api.example.com"}, false, req("https://api.example.com:443/", ""), ""},
		{"entry with the default port", []string{"api.example.com:443"}, false, req("https://api.example.com/", ""), ""},
		{"another port", []string{"api.example.com"}, false, req("https://api.example.com:8443/", ""), "misdirected_request"},
		{"entry with a port", []string{"api.example.com:8443"}, false, req("https://api.example.com:8443/", ""), ""},
		{"entry with a port, default port sent", []string{"api.example.com:8443"}, false, req("https://api.example.com/", ""), "misdirected_request"},
		{"wildcard", []string{"*.example.com"}, false, req("https://api.example.com/", ""), ""},
		{"wildcard, deeper label", []string{"*.example.com"}, false, req("https://a.b.example.com/", ""), ""},
		{"wildcard does not match its suffix", []string{"*.example.com"}, false, req("https://example.com/", ""), "misdirected_request"},
		{"wildcard on a label boundary", []string{"*.example.com"}, false, req("https://evilexample.com/", ""), "misdirected_request"},
		{"look-alike suffix", []string{"api.example.com"}, false, req("https://api.example.com.evil.example/", ""), "misdirected_request"},
		{"second entry", []string{"a.example", "api.example.com"}, false, req("https://api.example.com/", ""), ""},
		{"IPv6", []string{"[::1]:8080"}, false, req("http://[::1]:8080/", ""), ""},
		{"none configured", nil, false, req("https://api.example.com/", ""), "misdirected_request"},
		{"AnyAuthority", nil, true, req("https://anything.example/", ""), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			v, err := middleware.New(middleware.Config{Keys: staticKeys(), Now: clock, Authorities: tt.authorities, AnyAuthority: tt.any,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			_, err = v.Verify(tt.r)
			if got := codeOf(err); got != tt.wantCode {
				t.Errorf("code = %q (%v), want %q", got, err, tt.wantCode)
			}
			warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "Config.Authorities")
			if want := len(tt.authorities) == 0 && !tt.any; warned != want {
				t.Errorf("warning at construction = %v (%q), want %v", warned, logs.String(), want)
			}
			if len(tt.authorities) == 0 && !tt.any && !strings.Contains(err.Error(), "set middleware.Config.Authorities") {
				t.Errorf("error %q does not say to set Config.Authorities", err)
			}
		})
	}

	// Unusable entries are refused when the Config is validated.
	for _, bad := range []string{"", "https://api.example.com", "api.example.com/x", "user@api.example.com", "api.example.com:", "*.[::1]", "*", "api.example.com:0"} {
		if err := (middleware.Config{Keys: staticKeys(), Authorities: []string{bad}}).Validate(); err == nil {
			t.Errorf("Validate accepted Authorities entry %q", bad)
		}
	}
}

// multiSigned returns a GET to testURL carrying n signatures sig0…sig(n-1),
// each over @authority with its own nonce by keyA (forged: with the
// signature bytes replaced by random ones), and a Signature-Agent with one
// member per label, named by agent(i).
func multiSigned(t testing.TB, n int, forged bool, agent func(i int) string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, testURL, nil)
	var in, sv, sa []string
	for i := range n {
		label := fmt.Sprintf("sig%d", i)
		one := httptest.NewRequest(http.MethodGet, testURL, nil)
		if err := signer.Sign(one, keyA, signOpts(func(o *signer.Options) {
			o.Label = label
			o.Nonce = fmt.Sprintf("nonce-%d", i)
			o.SignatureAgent = ""
		})); err != nil {
			t.Fatal(err)
		}
		in = append(in, one.Header.Get("Signature-Input"))
		s := one.Header.Get("Signature")
		if forged {
			junk := make([]byte, 64)
			for j := range junk {
				junk[j] = byte(i*64 + j)
			}
			s = label + "=:" + base64.StdEncoding.EncodeToString(junk) + ":"
		}
		sv = append(sv, s)
		sa = append(sa, label+`="`+agent(i)+`"`)
	}
	r.Header.Set("Signature-Input", strings.Join(in, ", "))
	r.Header.Set("Signature", strings.Join(sv, ", "))
	r.Header.Set("Signature-Agent", strings.Join(sa, ", "))
	return r
}

// TestBoundedWork: eight signatures naming eight uncached key sets cost at
// most one fetch; eight forged signatures against a cached key cost at
// most two signature checks (and so two key lookups); the first fetch
// failure ends the request.
func TestBoundedWork(t *testing.T) {
	t.Parallel()
	t.Run("eight uncached key sets, one fetch", func(t *testing.T) {
		t.Parallel()
		var hits atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			w.Header().Set("Content-Type", signer.DirectoryMediaType)
			fmt.Fprintf(w, `{"keys":[%s]}`, keyB.Public.JWK.MarshalPublic()) // not the signing key
		}))
		defer srv.Close()
		v, err := middleware.New(middleware.Config{Keys: ksFetcher(srv, clock), Now: clock, Authorities: testAuthorities})
		if err != nil {
			t.Fatal(err)
		}
		r := multiSigned(t, 8, false, func(i int) string { return fmt.Sprintf("%s/keys/%d.json", srv.URL, i) })
		if _, err := v.Verify(r); codeOf(err) != "unknown_key" {
			t.Errorf("error = %v, want the first signature's unknown_key", err)
		}
		if n := hits.Load(); n != 1 {
			t.Errorf("key-set fetches = %d, want 1", n)
		}
	})
	t.Run("eight forged signatures, two checks", func(t *testing.T) {
		t.Parallel()
		keys := &countingKeys{KeySource: staticKeys()}
		v, err := middleware.New(middleware.Config{Keys: keys, Now: clock, Authorities: testAuthorities})
		if err != nil {
			t.Fatal(err)
		}
		r := multiSigned(t, 8, true, func(int) string { return testOrigin })
		if _, err := v.Verify(r); codeOf(err) != "invalid_signature" {
			t.Errorf("error = %v, want invalid_signature", err)
		}
		if n := keys.calls.Load(); n != 2 {
			t.Errorf("key lookups = %d, want 2 (one per signature checked)", n)
		}
		// The third signature is good but never tried: the bound holds
		// whatever comes later.
		good := multiSigned(t, 3, false, func(int) string { return testOrigin })
		forged := multiSigned(t, 2, true, func(int) string { return testOrigin })
		sigs := strings.Split(forged.Header.Get("Signature"), ", ")
		sigs = append(sigs, strings.Split(good.Header.Get("Signature"), ", ")[2])
		good.Header.Set("Signature", strings.Join(sigs, ", "))
		if _, err := v.Verify(good); codeOf(err) != "invalid_signature" {
			t.Errorf("two forged signatures then a good one: %v, want invalid_signature (the third is not tried)", err)
		}
	})
	t.Run("first fetch failure ends the request", func(t *testing.T) {
		t.Parallel()
		down := &noPeekKeys{src: middleware.KeySourceFunc(func(context.Context, signer.KeySet, string) (signer.PublicKey, error) {
			return signer.PublicKey{}, errors.New("dial tcp 192.0.2.1:443: connection refused")
		})}
		v, err := middleware.New(middleware.Config{Keys: down, Now: clock, Authorities: testAuthorities})
		if err != nil {
			t.Fatal(err)
		}
		r := multiSigned(t, 8, false, func(i int) string { return fmt.Sprintf("https://agent-%d.example", i) })
		if _, err := v.Verify(r); codeOf(err) != "key_fetch_failed" {
			t.Errorf("error = %v, want key_fetch_failed", err)
		}
		if n := down.calls.Load(); n != 1 {
			t.Errorf("key lookups = %d, want 1", n)
		}
	})
}

// TestDefaultLogger: a library logs nothing unless given a logger: without
// Config.Logger nothing reaches slog.Default(); with it, the warning about
// an empty Authorities does. Not parallel: it swaps the process-wide
// default logger.
func TestDefaultLogger(t *testing.T) {
	var global, own bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&global, nil)))
	defer slog.SetDefault(old)
	if _, err := middleware.New(middleware.Config{Keys: staticKeys()}); err != nil {
		t.Fatal(err)
	}
	if global.Len() != 0 {
		t.Errorf("slog.Default() got %q, want nothing", global.String())
	}
	if _, err := middleware.New(middleware.Config{Keys: staticKeys(), Logger: slog.New(slog.NewTextHandler(&own, nil))}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(own.String(), "Config.Authorities is empty") {
		t.Errorf("Config.Logger got %q, want the warning about Config.Authorities", own.String())
	}
}
