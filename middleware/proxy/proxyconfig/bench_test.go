package proxyconfig

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkHandler is the cost the configuration adds per request: an
// unsigned request through the built reverse proxy to a local upstream,
// with the verifier deciding alone (baseline), with the rules gate behind
// an atomic pointer (reloadable, as idcli proxy --config runs), and with
// routes and a per-address limit.
func BenchmarkHandler(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	head := "upstream: " + up.URL + "\nauthorities: [api.example.com]\ntrust: {hosts: [a.example]}\naccess_log: \"off\"\nmode: optional\n"
	for _, bc := range []struct {
		name, body string
		reloadable bool
	}{
		{"baseline", "", false},
		{"reloadable", "", true},
		{"routes+limit", "routes: [{prefix: /a/, mode: required}]\nlimits: {address: 1000000000/1h}\n", true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := Parse("proxy.yaml", []byte(head+bc.body))
			if err != nil {
				b.Fatal(err)
			}
			p, err := Build(context.Background(), c, Options{Reloadable: bc.reloadable, Stderr: io.Discard})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			h := p.Handler()
			req := httptest.NewRequest("GET", "http://api.example.com/x", nil)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}
