package refserver

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentid/agentid/refserver/store"
)

// rawAnswer sends the raw request text req to the server at addr on a new
// connection and returns the answer's status, error code and body.
func rawAnswer(t *testing.T, addr, method, req string) (int, string, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	var e struct{ Error struct{ Code string } }
	_ = json.Unmarshal(body, &e)
	return resp.StatusCode, e.Error.Code, string(body)
}

// TestDirectWhoamiAttack sends respelled authorities, request targets and
// methods for /whoami over loopback HTTP to the server (direct /whoami
// path) and to its router alone: both must answer the same status, error
// code and body.
func TestDirectWhoamiAttack(t *testing.T) {
	t.Parallel()
	db, err := store.OpenGorm("sqlite::memory:")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(t.Context(), db, io.Discard); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{DB: store.New(db), Hostname: "http://agentid.test"})
	if err != nil {
		t.Fatal(err)
	}
	direct := httptest.NewServer(s.Handler())
	defer direct.Close()
	router := httptest.NewServer(s.routes()) // no direct path
	defer router.Close()

	const agent = "agent-0123456789abcdef01234567.agentid.test"
	hosts := []string{
		"agentid.test", "AGENTID.TEST", "agentid.test.", "agentid.test:80", "agentid.test:8080",
		"agentid.test:", "other.test", agent, "Agent-0123456789ABCDEF01234567.agentid.test",
		"agent-nope.agentid.test", "agentid.test@other.test", "agentid.test/x", "",
	}
	targets := []string{
		"/whoami", "/whoami/", "//whoami", "/WHOAMI", "/whoami%2f", "/whoami%2F", "/./whoami",
		"/whoami/..", "/whoami?x=1", "/whoami#f", "/who%61mi", "/whoami%00", "/whoami;x",
		"http://other.test/whoami", "http://agentid.test/whoami", "http://" + agent + "/whoami",
		"HTTP://AGENTID.TEST/whoami", "*",
	}
	methods := []string{"GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "TRACE", "CONNECT", "get"}
	sig := "Signature-Input: sig1=(\"@authority\");created=1;keyid=\"k\"\r\n"
	var reqs []struct{ method, text string }
	add := func(method, text string) { reqs = append(reqs, struct{ method, text string }{method, text}) }
	for _, m := range methods {
		for _, target := range targets {
			for _, h := range hosts {
				add(m, fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n", m, target, h, sig))
			}
		}
	}
	for _, m := range []string{"GET", "POST"} {
		// duplicated Host, HTTP/1.0 without Host, a body, an empty body
		add(m, m+" /whoami HTTP/1.1\r\nHost: agentid.test\r\nHost: other.test\r\nConnection: close\r\n\r\n")
		add(m, m+" /whoami HTTP/1.1\r\nHost: agentid.test\r\nHost: agentid.test\r\nConnection: close\r\n\r\n")
		add(m, m+" /whoami HTTP/1.0\r\n\r\n")
		add(m, m+" /whoami HTTP/1.1\r\nConnection: close\r\n\r\n")
		add(m, m+" /whoami HTTP/1.1\r\nHost: agentid.test\r\n"+sig+"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
		add(m, m+" /whoami HTTP/1.1\r\nHost: agentid.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n")
		add(m, m+" /whoami HTTP/1.1\r\nHost: agentid.test\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n")
	}
	seen := map[int]bool{}
	for _, r := range reqs {
		gs, gc, gb := rawAnswer(t, direct.Listener.Addr().String(), r.method, r.text)
		ws, wc, wb := rawAnswer(t, router.Listener.Addr().String(), r.method, r.text)
		seen[gs] = true
		if gs != ws || gc != wc || gb != wb {
			t.Errorf("%q: direct %d %s %q; router %d %s %q", r.text, gs, gc, gb, ws, wc, wb)
		}
		if gs >= 500 {
			t.Errorf("%q: %d %s", r.text, gs, gb)
		}
	}
	// The attack reached the answers it meant to compare.
	for _, code := range []int{400, 401, 404, 405, 421} {
		if !seen[code] {
			t.Errorf("no request answered %d", code)
		}
	}
}

// TestDirectWhoamiCodes: the documented answers of the direct path for
// the respelled requests, independently of the router.
func TestDirectWhoamiCodes(t *testing.T) {
	t.Parallel()
	db, err := store.OpenGorm("sqlite::memory:")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(t.Context(), db, io.Discard); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{DB: store.New(db), Hostname: "http://agentid.test"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, tc := range []struct {
		method, target, host string
		status               int
		code                 string
	}{
		{"GET", "/whoami", "agentid.test", 401, ""},
		{"GET", "/whoami", "AGENTID.test:80", 401, ""},
		{"PUT", "/whoami", "agentid.test", 405, "method_not_allowed"},
		{"DELETE", "/whoami", "agentid.test", 405, "method_not_allowed"},
		{"OPTIONS", "/whoami", "agentid.test", 405, "method_not_allowed"},
		{"GET", "/whoami/", "agentid.test", 404, "not_found"},
		{"GET", "//whoami", "agentid.test", 404, "not_found"},
		{"GET", "/WHOAMI", "agentid.test", 404, "not_found"},
		{"GET", "/whoami%2f", "agentid.test", 404, "not_found"},
		{"GET", "/./whoami", "agentid.test", 404, "not_found"},
		{"GET", "/whoami", "other.test", 421, "misdirected_request"},
		{"GET", "http://other.test/whoami", "agentid.test", 421, "misdirected_request"},
		{"GET", "/whoami", "agent-0123456789abcdef01234567.agentid.test", 404, ""},
	} {
		req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", tc.method, tc.target, tc.host)
		status, code, body := rawAnswer(t, srv.Listener.Addr().String(), tc.method, req)
		if status != tc.status || (tc.code != "" && code != tc.code) {
			t.Errorf("%s %s Host %s: %d %s %s; want %d %s", tc.method, tc.target, tc.host, status, code, body, tc.status, tc.code)
		}
	}
}
