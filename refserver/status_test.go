package refserver_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/agentid/agentid/middleware/status"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer/signertest"
)

// TestStatusPageWiring: with Config.Status the server serves its own
// traffic's status page at GET /status on the service host (not on agent
// hosts): its agents' verified requests, replays and unsigned requests
// as its verifiers saw them.
func TestStatusPageWiring(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		page := status.New(status.Config{})
		e := newTestEnvConfig(t, db, "", func(c *refserver.Config) { c.Status = page })
		key := signertest.Key(131)
		uid := e.register(key)
		first := e.whoamiReq(http.MethodGet, uid, key)
		again := e.request(http.MethodGet, e.base+"/whoami", nil)
		again.Header = first.Header.Clone()
		e.sendSteps(t, []statusStep{
			{first, 200},
			{e.whoamiReq(http.MethodGet, uid, key), 200},
			{again, 401}, // replayed_nonce
			{e.request(http.MethodGet, e.base+"/whoami", nil), 401}, // missing_signature
			{e.request(http.MethodGet, e.origin(uid)+"/status", nil), 404},
			{e.request(http.MethodPost, e.base+"/status", nil), 405},
		})
		r := e.send(e.request(http.MethodGet, e.base+"/status", nil))
		if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") || r.header.Get("Content-Security-Policy") != status.ContentSecurityPolicy {
			t.Fatalf("GET /status: %d %v, want 200 HTML with the page's CSP", r.status, r.header)
		}
		body := string(r.body)
		for _, want := range []string{
			`data-id="` + e.origin(uid) + `" data-requests="2" data-verified="2" data-invalid="0"`,
			`<tr class="reason" data-outcome="invalid" data-reason="replayed_nonce" data-count="1">`,
			`<tr class="refusal" data-outcome="invalid" data-reason="replayed_nonce" data-count="1">`,
			`<tr class="refusal" data-outcome="not-present" data-reason="unsigned" data-count="1">`,
			`id="hour-not-present" data-count="1"`,
			`id="hour-verified" data-count="3"`, // registration, two whoami
		} {
			if !strings.Contains(body, want) {
				t.Errorf("the status page lacks %s:\n%s", want, body)
			}
		}
	})
}

// TestOpenStatusPage: Open serves /status on the service host only with
// StatusPage, and /metrics there never (MetricsListen serves them on an
// address of their own): the default Options keep the status page, which
// names agents, off the service host.
func TestOpenStatusPage(t *testing.T) {
	t.Parallel()
	for _, o := range []refserver.Options{{MetricsListen: "127.0.0.1:0"}, {MetricsListen: "127.0.0.1:0", StatusPage: true}, {StatusPage: true}, {}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		o.DatabaseURL, o.Hostname, o.Listener = "sqlite::memory:", "http://agentid.test", ln
		in, err := refserver.Open(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		go in.Serve(context.Background())
		for path, on := range map[string]bool{"/status": o.StatusPage, "/metrics": false} {
			want := 404
			if on {
				want = 200
			}
			req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+path, nil)
			req.Host = "agentid.test"
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("MetricsListen %q, StatusPage %v: GET %s = %d, want %d", o.MetricsListen, o.StatusPage, path, resp.StatusCode, want)
			}
			if path == "/status" && on && !strings.Contains(string(b), "agentid server status") {
				t.Errorf("GET /status: the page is not titled for the server:\n%s", b)
			}
		}
		in.Close()
	}
}
