package rules_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/middleware/policy"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/middleware/rules"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestWrapProxy puts a gate around package proxy's handler, in both of its
// shapes, over real HTTP: a refused request gets the refusal (with
// Accept-Signature for the verifier's refusals), no X-Agent-* header, and
// never reaches the upstream; a request let through gets the proxy's
// answer plus the rate-limit fields.
func TestWrapProxy(t *testing.T) {
	good, bad := signertest.Key(0x81), signertest.Key(0x82)
	const goodAgent, badAgent = "https://good.example", "https://bad.example"
	keys := middleware.NewStaticKeys()
	keys.Add(goodAgent, good.Public)
	keys.Add(badAgent, bad.Public)

	var upstreamHits atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamHits.Add(1)
		w.Header().Set("X-Upstream", "yes")
		w.WriteHeader(200)
	}))
	defer upstream.Close()
	upURL, _ := http.NewRequest("GET", upstream.URL, nil)

	for _, forwardAuth := range []bool{false, true} {
		name := "reverse proxy"
		if forwardAuth {
			name = "forward-auth"
		}
		t.Run(name, func(t *testing.T) {
			upstreamHits.Store(0)
			lim, _ := agentlimit.New(agentlimit.Config{Agent: agentlimit.Limit{Quota: 2, Window: time.Hour}})
			g, err := rules.New(rules.Config{
				Routes:  []rules.Route{{Prefix: "/open/", Mode: middleware.Optional}},
				Deny:    policy.List{Identities: []string{badAgent}},
				Limiter: lim,
			})
			if err != nil {
				t.Fatal(err)
			}
			// The front's address is the authority the requests are signed for.
			front := httptest.NewUnstartedServer(nil)
			defer front.Close()
			v, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{front.Listener.Addr().String()}, Mode: middleware.Observe, OnResult: g.OnResult, RefusalStatus: 403})
			if err != nil {
				t.Fatal(err)
			}
			g.SetRefuse(v.WriteError)
			cfg := proxy.Config{Verifier: v, Transport: g.Transport(nil)}
			if forwardAuth {
				cfg.ForwardAuth = proxy.FrontTraefik
			} else {
				cfg.Upstream = upURL.URL
			}
			h, err := proxy.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			front.Config.Handler = g.Wrap(h)
			front.Start()

			send := func(path string, key signer.PrivateKey, agent string) *http.Response {
				t.Helper()
				r, _ := http.NewRequest("GET", front.URL+path, nil)
				if forwardAuth {
					r.Header.Set("X-Forwarded-Method", "GET")
					r.Header.Set("X-Forwarded-Proto", "http")
					r.Header.Set("X-Forwarded-Host", r.URL.Host)
					r.Header.Set("X-Forwarded-Uri", path)
				}
				if agent != "" {
					if err := signer.Sign(r, key, signer.Options{SignatureAgent: agent}); err != nil {
						t.Fatal(err)
					}
				}
				resp, err := http.DefaultClient.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp
			}
			for _, tc := range []struct {
				name, path  string
				key         signer.PrivateKey
				agent       string
				status      int
				acceptSig   bool
				passes      bool
				wantLimitOn bool
			}{
				{"unsigned on a required route", "/x", signer.PrivateKey{}, "", 403, true, false, false},
				{"unsigned on an optional route", "/open/x", signer.PrivateKey{}, "", 200, false, true, false},
				{"denied agent", "/x", bad, badAgent, 403, false, false, false},
				{"good agent 1", "/x", good, goodAgent, 200, false, true, true},
				{"good agent 2", "/x", good, goodAgent, 200, false, true, true},
				{"good agent over its limit", "/x", good, goodAgent, 429, false, false, true},
			} {
				before := upstreamHits.Load()
				resp := send(tc.path, tc.key, tc.agent)
				if resp.StatusCode != tc.status {
					t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.status)
				}
				if got := resp.Header.Get("Accept-Signature") != ""; got != tc.acceptSig {
					t.Errorf("%s: Accept-Signature present = %v, want %v", tc.name, got, tc.acceptSig)
				}
				if got := resp.Header.Get("RateLimit") != ""; got != tc.wantLimitOn {
					t.Errorf("%s: RateLimit present = %v, want %v", tc.name, got, tc.wantLimitOn)
				}
				if !tc.passes && resp.Header.Get("X-Agent-Verdict") != "" {
					t.Errorf("%s: a refusal carries X-Agent-Verdict %q", tc.name, resp.Header.Get("X-Agent-Verdict"))
				}
				if !forwardAuth {
					reached := upstreamHits.Load() > before
					if reached != tc.passes {
						t.Errorf("%s: reached the upstream = %v, want %v", tc.name, reached, tc.passes)
					}
					if tc.passes && resp.Header.Get("X-Upstream") != "yes" {
						t.Errorf("%s: not the upstream's answer", tc.name)
					}
				} else if tc.passes && resp.Header.Get("X-Agent-Verdict") == "" {
					t.Errorf("%s: forward-auth answer without X-Agent-Verdict", tc.name)
				}
			}
		})
	}
}

// TestWrapWriter checks what Wrap's writer lets through: a request let
// through streams (Flush reaches the client's writer, the rate-limit
// fields precede the first byte) and can take the connection over
// (http.ResponseController reaches the server's writer); a refused
// request's headers, flushes and body never reach the client, which gets
// the refusal alone, reported to OnRefuse with its status.
func TestWrapWriter(t *testing.T) {
	t.Parallel()
	lim, err := agentlimit.New(agentlimit.Config{Address: agentlimit.Limit{Quota: 100, Window: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	var refusedStatus atomic.Int32
	g, err := rules.New(rules.Config{
		Routes:  []rules.Route{{Prefix: "/open/", Mode: middleware.Optional}},
		Limiter: lim,
		OnRefuse: func(_ *http.Request, _ *middleware.Result, _ *middleware.Error, status int) {
			refusedStatus.Store(int32(status))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := middleware.New(middleware.Config{Keys: middleware.NewStaticKeys(), Mode: middleware.Observe, OnResult: g.OnResult})
	if err != nil {
		t.Fatal(err)
	}
	g.SetRefuse(v.WriteError)
	h := g.Wrap(v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/open/hijack" {
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("Hijack through the gate: %v", err)
				return
			}
			defer c.Close()
			brw.WriteString("HTTP/1.1 200 OK\r\nX-Hijacked: yes\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			brw.Flush()
			return
		}
		w.Header().Set("X-Inner", "yes")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("Flush through the gate: %v", err)
		}
		w.Write([]byte("streamed"))
	})))

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/open/stream", nil))
	if rec.Code != 200 || !rec.Flushed || rec.Body.String() != "streamed" || rec.Header().Get("X-Inner") != "yes" || rec.Header().Get("RateLimit") == "" {
		t.Errorf("let through: %d flushed=%v body %q header %v; want 200, flushed, the body, X-Inner and RateLimit", rec.Code, rec.Flushed, rec.Body, rec.Header())
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/closed", nil))
	if rec.Code != 401 || rec.Flushed || rec.Header().Get("X-Inner") != "" || strings.Contains(rec.Body.String(), "streamed") || refusedStatus.Load() != 401 {
		t.Errorf("refused: %d flushed=%v body %q header %v, OnRefuse saw %d; want the 401 refusal alone", rec.Code, rec.Flushed, rec.Body, rec.Header(), refusedStatus.Load())
	}

	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/open/hijack")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Hijacked") != "yes" {
		t.Errorf("hijacked: %d %v; want the handler's own 200", resp.StatusCode, resp.Header)
	}
}
