package caddyagentid_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware/proxy/proxyconfig"
)

// benchCaddy sends b.N unsigned GETs through a Caddy on port (optional
// mode: each reaches the service with X-Agent-Verdict), one at a time.
func benchCaddy(b *testing.B, port string, up *upstream) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	get := func() {
		req, _ := http.NewRequest("GET", "http://127.0.0.1:"+port+"/bench", nil)
		req.Host = "api.example.com"
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET /bench: %d", resp.StatusCode)
		}
	}
	for range 50 { // warm the connections
		get()
	}
	b.ResetTimer()
	for range b.N {
		get()
	}
	b.StopTimer()
	if seen := up.got("/bench"); len(seen) == 0 || seen[len(seen)-1].header.Get("X-Agent-Verdict") != "unverified" {
		b.Fatalf("the service did not get X-Agent-Verdict unverified")
	}
}

// BenchmarkCaddyModule is one request through Caddy with the agentid
// module in front of a service; BenchmarkCaddyForwardAuth the same request
// through the forward_auth snippet of docs/proxy.md, asking a forward-auth
// endpoint built as idcli proxy --forward-auth --front caddy builds it.
// The difference is what the forward-auth hop costs. Compare them in one
// run: go test -run '^$' -bench Caddy -benchtime 2000x -count 3.
func BenchmarkCaddyModule(b *testing.B) {
	up := newUpstream(b)
	port := freePort(b)
	startCaddy(b, port, fmt.Sprintf(`http://:%s {
	agentid {
		authorities api.example.com
		trust *.agentid.example
		mode optional
	}
	reverse_proxy %s
}
`, port, strings.TrimPrefix(up.URL, "http://")))
	benchCaddy(b, port, up)
}

func BenchmarkCaddyForwardAuth(b *testing.B) {
	up := newUpstream(b)
	cfg := proxyconfig.Default()
	cfg.ForwardAuth, cfg.Front, cfg.Mode, cfg.AccessLog = true, "caddy", "optional", "off"
	cfg.Authorities, cfg.Trust.Hosts = []string{"api.example.com"}, []string{"*.agentid.example"}
	p, err := proxyconfig.Build(context.Background(), cfg, proxyconfig.Options{Stderr: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	auth := httptest.NewServer(p.Handler())
	defer auth.Close()
	port := freePort(b)
	startCaddy(b, port, fmt.Sprintf(`http://:%s {
	route {
		request_header -X-Agent-*
		forward_auth %s {
			uri /
			copy_headers X-Agent-Verdict X-Agent-Id X-Agent-Uid X-Agent-Key-Id X-Agent-Reason
		}
		reverse_proxy %s
	}
}
`, port, strings.TrimPrefix(auth.URL, "http://"), strings.TrimPrefix(up.URL, "http://")))
	benchCaddy(b, port, up)
}
