package proxyconfig

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestStatusCountsEveryRefusal: the status page counts every refusal by
// outcome and reason, whoever made it: the verifier (required mode, no
// rules), the rules (routes: the verifier only reports), the proxy
// before verification (a path that is not normal), the forward-auth
// endpoint (a client's X-Agent-* header), and 403 answers (refusal_status).
func TestStatusCountsEveryRefusal(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer up.Close()
	head := "authorities: [api.example.com]\ntrust: {hosts: [a.example]}\naccess_log: \"off\"\nmetrics_listen: 127.0.0.1:0\n"
	for _, tc := range []struct{ name, conf string }{
		{"verifier", "upstream: " + up.URL + "\nmode: required\n"},
		{"verifier, 403", "upstream: " + up.URL + "\nmode: required\nrefusal_status: 403\n"},
		{"rules", "upstream: " + up.URL + "\nmode: optional\nroutes: [{prefix: /, mode: required}]\n"},
		{"forward-auth", "forward_auth: true\nfront: traefik\nmode: required\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("proxy.yaml", []byte(head+tc.conf))
			if err != nil {
				t.Fatal(err)
			}
			p, err := Build(context.Background(), c, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			fa := strings.HasPrefix(tc.conf, "forward_auth")
			send := func(path string, h http.Header) int {
				r := httptest.NewRequest("GET", "http://api.example.com"+path, nil)
				if fa {
					r = httptest.NewRequest("GET", "http://auth.internal/verify", nil)
					r.RemoteAddr = "127.0.0.1:5000"
					r.Header.Set("X-Forwarded-Method", "GET")
					r.Header.Set("X-Forwarded-Proto", "http")
					r.Header.Set("X-Forwarded-Host", "api.example.com")
					r.Header.Set("X-Forwarded-Uri", path)
					r.Header.Set("X-Forwarded-For", "192.0.2.1")
				}
				for k, v := range h {
					r.Header[k] = v
				}
				rec := httptest.NewRecorder()
				p.Handler().ServeHTTP(rec, r)
				return rec.Code
			}
			want401 := 401
			if strings.Contains(tc.conf, "refusal_status: 403") {
				want401 = 403
			}
			if s := send("/x", nil); s != want401 {
				t.Errorf("unsigned: %d, want %d", s, want401)
			}
			if s := send("/a/../b", nil); s != 400 {
				t.Errorf("a path not normal: %d, want 400", s)
			}
			rows := []string{
				`<tr class="refusal" data-outcome="not-present" data-reason="unsigned" data-count="1">`,
				`<tr class="refusal" data-outcome="invalid" data-reason="invalid_request" data-count="1">`,
			}
			if fa {
				if s := send("/y", http.Header{"X-Agent-Outcome": {"verified"}}); s != 403 {
					t.Errorf("X-Agent-Outcome from the client: %d, want 403", s)
				}
				rows = append(rows, `<tr class="refusal" data-outcome="invalid" data-reason="forbidden" data-count="1">`)
			}
			rec := httptest.NewRecorder()
			p.Metrics().ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
			body := rec.Body.String()
			if strings.Contains(body, "No refusal.") {
				t.Errorf("the page says No refusal after refusals")
			}
			for _, row := range rows {
				if !strings.Contains(body, row) {
					t.Errorf("the page lacks %s", row)
				}
			}
			if n := strings.Count(body, `<tr class="refusal"`); n != len(rows) {
				t.Errorf("%d refusal rows, want %d:\n%s", n, len(rows), body)
			}
		})
	}
}
