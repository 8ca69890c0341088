package proxy_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/signer"
)

// TestForwardAuthParseOnceAttack sends the same signature fields, mangled,
// to a forward-auth endpoint and to a reverse proxy with the same verifier
// (its own tag): both accept or refuse them alike, and forward-auth
// refuses a signature of the verifier's tag over content-digest however
// the component is spelled.
func TestForwardAuthParseOnceAttack(t *testing.T) {
	t.Parallel()
	keys := middleware.NewStaticKeys()
	keys.Add(testOrigin, key.Public)
	v, err := middleware.New(middleware.Config{Keys: keys, Now: clock, Mode: middleware.Required,
		Authorities: []string{"api.example.com"}, Tag: "example-tag"})
	if err != nil {
		t.Fatal(err)
	}
	auth := startProxyConfig(t, middleware.Required, proxy.Config{Verifier: v, ForwardAuth: proxy.FrontNginx}, nil)
	up := newUpstream(t)
	rp := startProxyConfig(t, middleware.Required, proxy.Config{Verifier: v, Upstream: mustURL(up.URL)}, nil)

	sign := func(label, tag string) http.Header {
		r, _ := http.NewRequest(http.MethodGet, "https://api.example.com/transfer", nil)
		if err := signer.Sign(r, key, signer.Options{Label: label, Tag: tag, SignatureAgent: testOrigin, Now: clock,
			Components: []string{"@method", "@authority", "@path"}}); err != nil {
			t.Fatal(err)
		}
		return r.Header
	}
	join := func(a, b http.Header) http.Header {
		h := a.Clone()
		for _, k := range []string{"Signature", "Signature-Input", "Signature-Agent"} {
			h.Set(k, a.Get(k)+", "+b.Get(k))
		}
		return h
	}
	// Each case builds fresh signatures for each send (a nonce is taken
	// once).
	own := func() http.Header { return sign("sig1", "example-tag") }
	other := func() http.Header { return sign("sig2", "web-bot-auth") }
	many := func(n int) http.Header {
		o := other()
		h := o.Clone()
		var in, sig []string
		for i := range n {
			in = append(in, fmt.Sprintf("o%d=%s", i, strings.TrimPrefix(o.Get("Signature-Input"), "sig2=")))
			sig = append(sig, fmt.Sprintf("o%d=%s", i, strings.TrimPrefix(o.Get("Signature"), "sig2=")))
		}
		h.Set("Signature-Input", strings.Join(in, ", "))
		h.Set("Signature", strings.Join(sig, ", "))
		return h
	}
	set := func(h http.Header, k, v string) http.Header { h.Set(k, v); return h }
	dup := func() http.Header {
		h := own()
		for _, k := range []string{"Signature", "Signature-Input"} {
			h[k] = append(h[k], h[k]...)
		}
		return h
	}
	respell := func(comp string) http.Header {
		h := own()
		h.Set("Signature-Input", strings.Replace(h.Get("Signature-Input"), `"@path"`, `"@path" `+comp, 1))
		return h
	}

	try := func(mk func() http.Header) (fa, rev int, faBody, revBody string) {
		extra := map[string]string{"X-Original-Method": "GET", "Host": "api.example.com", "X-Original-URI": "/transfer"}
		resp, body := do(t, subrequest(t, auth.URL, mk(), extra))
		h := mk()
		r, _ := http.NewRequest(http.MethodGet, rp.URL+"/transfer", nil)
		r.Host = "api.example.com"
		for k, vs := range h {
			r.Header[k] = vs
		}
		resp2, body2 := do(t, r)
		return resp.StatusCode, resp2.StatusCode, body, body2
	}
	for _, tc := range []struct {
		name   string
		h      func() http.Header
		accept int // 1 accepted, -1 refused, 0 as the reverse proxy answers
	}{
		{"own", own, 1},
		{"own then another tag's", func() http.Header { return join(own(), other()) }, 1},
		{"another tag's then own", func() http.Header { return join(other(), own()) }, 1},
		{"only another tag's", other, -1},
		{"duplicated lines", dup, 0},
		{"a hundred labels of another tag", func() http.Header { return join(many(100), own()) }, 0},
		{"a thousand labels of another tag", func() http.Header { return join(many(1000), own()) }, 0},
		{"a wrong signature of another tag", func() http.Header { return join(set(other(), "Signature", "sig2=:AAAA:"), own()) }, 1},
		{"own next to a wrong one of another tag", func() http.Header { return join(own(), set(other(), "Signature", "sig2=:AAAA:")) }, 1},
		{"a bad created of another tag", func() http.Header {
			return join(set(other(), "Signature-Input", `sig2=("@method");created="x";tag="web-bot-auth"`), own())
		}, 0},
		{"another tag's input without its signature", func() http.Header {
			return join(set(other(), "Signature", "sig3=:AAAA:"), own())
		}, 0},
		{"an unparseable Signature", func() http.Header { return join(set(other(), "Signature", "sig2=:not base64!:"), own()) }, 0},
	} {
		fa, rev, fb, rb := try(tc.h)
		if fa != rev || errorCode(fb) != errorCode(rb) {
			t.Errorf("%s: forward-auth %d %s; reverse proxy %d %s", tc.name, fa, fb, rev, rb)
		}
		if tc.accept != 0 && (fa == http.StatusOK) != (tc.accept > 0) {
			t.Errorf("%s: forward-auth %d %s, want accepted %v", tc.name, fa, fb, tc.accept)
		}
	}
	// The verifier's signature over content-digest, in other spellings:
	// never accepted by forward-auth (which never sees a body).
	for _, comp := range []string{`"content-digest"`, `"content-digest";sf`, `"content-digest";bs`, `"Content-Digest"`, `"CONTENT-DIGEST";sf`, `"content-digest";req`} {
		fa, _, fb, _ := try(func() http.Header { return respell(comp) })
		if fa == http.StatusOK || errorCode(fb) == "" {
			t.Errorf("own signature over %s: forward-auth %d %s, want a refusal", comp, fa, fb)
		}
		t.Logf("own signature over %s: %d %s", comp, fa, fb)
	}
}
