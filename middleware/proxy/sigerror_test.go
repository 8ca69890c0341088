package proxy_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/proxy"
	"github.com/agentid/agentid/signer"
)

// problemJSON is the Problem Details body of a refusal.
type problemJSON struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
}

// checkRefusal checks a refusal's status, Signature-Error (sig: the whole
// field, "" for none), Date (the verifier's clock), Vary and, when the
// request asked for it, Problem Details of type typ.
func checkRefusal(t *testing.T, name string, resp *http.Response, body string, status int, sig, typ, code string) {
	t.Helper()
	if resp.StatusCode != status || resp.Header.Get("Signature-Error") != sig {
		t.Errorf("%s: %d Signature-Error %q (%s), want %d %q", name, resp.StatusCode, resp.Header.Get("Signature-Error"), body, status, sig)
	}
	if resp.Header.Get("Vary") != "Accept" {
		t.Errorf("%s: Vary %q, want Accept", name, resp.Header.Values("Vary"))
	}
	if d, err := http.ParseTime(resp.Header.Get("Date")); err != nil || (sig != "" && !d.Equal(testNow)) {
		t.Errorf("%s: Date %q, want the verifier's clock", name, resp.Header.Get("Date"))
	}
	if typ == "" {
		return
	}
	var p problemJSON
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" || json.Unmarshal([]byte(body), &p) != nil ||
		p.Type != typ || p.Status != status || p.Code != code || p.Title == "" {
		t.Errorf("%s: %s %s, want Problem Details of type %s, code %s", name, ct, body, typ, code)
	}
}

// TestReverseProxySignatureError: the reverse proxy's refusals carry
// Signature-Error and, on request, Problem Details; its own failures
// (the upstream down) carry none.
func TestReverseProxySignatureError(t *testing.T) {
	up := newUpstream(t)
	px := newProxy(t, middleware.Required, up, nil)

	r := signed(t, px.URL, func(o *signer.Options) { o.Created = testNow.Add(5 * time.Minute) })
	resp, body := do(t, r)
	checkRefusal(t, "created ahead", resp, body, 401, "error=clock_skew", "", "")

	r = signed(t, px.URL, func(o *signer.Options) { o.Created = testNow.Add(5 * time.Minute) })
	r.Header.Set("Accept", "application/problem+json")
	resp, body = do(t, r)
	checkRefusal(t, "created ahead, problem", resp, body, 401, "error=clock_skew", "urn:ietf:params:sig-error:clock_skew", "signature_not_yet_valid")

	r = unsigned(t, px.URL)
	r.URL.Path = "/a/%2e%2e/b"
	r.Header.Set("Accept", "application/problem+json")
	resp, body = do(t, r)
	checkRefusal(t, "path not normal", resp, body, 400, "error=invalid_request", "urn:ietf:params:sig-error:invalid_request", "invalid_request")
	if n := len(up.requests()); n != 0 {
		t.Errorf("the upstream saw %d requests", n)
	}

	down, _ := url.Parse("http://127.0.0.1:1")
	pxDown := startProxyConfig(t, middleware.Required, proxy.Config{Upstream: down}, nil)
	r = signed(t, pxDown.URL, nil)
	r.Header.Set("Accept", "application/problem+json")
	resp, body = do(t, r)
	checkRefusal(t, "upstream down", resp, body, 502, "", "about:blank", "upstream_unavailable")
}

// TestForwardAuthSignatureError: a forward-auth refusal carries
// Signature-Error with required_input, Date and Problem Details, for
// Traefik and for nginx (whose status mapping keeps the header).
func TestForwardAuthSignatureError(t *testing.T) {
	keys := middleware.NewStaticKeys()
	keys.Add(testOrigin, key.Public)
	v, err := middleware.New(middleware.Config{Keys: keys, Now: clock, Authorities: []string{"api.example.com"}, RequiredComponents: []string{"@path"}})
	if err != nil {
		t.Fatal(err)
	}
	const want = `error=invalid_input, required_input=("@authority" "@path")`
	for _, front := range []proxy.Front{proxy.FrontTraefik, proxy.FrontNginx} {
		px := startProxyConfig(t, middleware.Required, proxy.Config{Verifier: v, ForwardAuth: front}, nil)
		orig := signed(t, "https://api.example.com", nil) // covers @authority only
		r, _ := http.NewRequest(http.MethodGet, px.URL+"/auth", nil)
		for k, vals := range orig.Header {
			r.Header[k] = vals
		}
		r.Host = "api.example.com"
		r.Header.Set("X-Forwarded-Method", "GET")
		r.Header.Set("X-Forwarded-Proto", "https")
		r.Header.Set("X-Forwarded-Host", "api.example.com")
		r.Header.Set("X-Forwarded-Uri", "/things?x=1")
		r.Header.Set("X-Forwarded-For", "203.0.113.9")
		r.Header.Set("X-Original-URI", "/things?x=1")
		r.Header.Set("X-Original-Method", "GET")
		r.Header.Set("Accept", "application/problem+json;q=1, application/json;q=0.1")
		resp, body := do(t, r)
		checkRefusal(t, string(front), resp, body, 401, want, "urn:ietf:params:sig-error:invalid_input", "missing_components")
	}
}
