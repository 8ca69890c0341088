package ops

// The admin API's client: the server's URL (--server), the operator token
// (AGENTID_OPERATOR_TOKEN or --token-file, never a flag's value, so that
// it never shows in the process list), and requests whose refusals become
// one line each. The token goes in the Authorization header of requests
// to --server and nowhere else: no output, error or log line holds it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/agentid/agentid/cmd/idcli/internal/hint"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
)

// TokenEnv is the environment variable holding the operator token.
const TokenEnv = "AGENTID_OPERATOR_TOKEN"

// apiPrefix is the path of the admin API's routes.
const apiPrefix = "/admin/v1"

// Bounds of the client: an answer's size, a token file's size.
const (
	maxAnswer    = 16 << 20
	maxTokenFile = 4 << 10
)

// client calls the admin API of one server with one operator token.
type client struct {
	base  string // scheme://host[:port], as given
	token string
	http  *http.Client
}

// parseServer checks --server: an http(s) URL of the service's host
// (its HOSTNAME) with no path, query or user info. Plain http is for a
// server on this machine only: elsewhere the token would cross the
// network in clear.
func parseServer(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err == nil && u.Port() != "" {
		if n, perr := strconv.Atoi(u.Port()); perr != nil || n < 1 || n > 65535 {
			err = errors.New("bad port")
		}
	}
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("--server %q: want the service's URL, https://HOST[:PORT]%s", signer.Truncate(raw), hint.Scheme(raw))
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("--server %s: want the service's URL alone, scheme://HOST[:PORT], without user, path or query", redactURL(u))
	}
	if u.Scheme == "http" && !hint.IsLocalHost(strings.ToLower(u.Hostname())) {
		return "", fmt.Errorf("--server %s: plain http would send the operator token in clear; use https:// (http only to this machine)", redactURL(u))
	}
	return u.Scheme + "://" + u.Host, nil
}

// redactURL is u for an error message: scheme and host only.
func redactURL(u *url.URL) string { return u.Scheme + "://" + u.Host }

// readToken returns the operator token: from the file path (relative to
// dir) when path is set, else from the environment variable TokenEnv.
// A file others may read is warned about on warn.
func readToken(getenv func(string) string, dir, path string, warn io.Writer) (string, error) {
	from, token := TokenEnv, getenv(TokenEnv)
	if strings.HasPrefix(strings.TrimSpace(path), store.OperatorTokenPrefix) {
		// The token itself, given where its file's path goes: not
		// repeated, not used (it is in the process list now).
		return "", fmt.Errorf("--token-file takes the path of a file holding the token, not the token (which other users may now have seen in the process list: revoke it)")
	}
	if path != "" {
		if !filepath.IsAbs(path) && dir != "" {
			path = filepath.Join(dir, path)
		}
		from = "--token-file " + path
		b, err := readTokenFile(path, warn)
		if err != nil {
			return "", err
		}
		token = string(b)
	} else if token == "" {
		return "", fmt.Errorf("no operator token: set %s or give --token-file PATH (an operator makes one with idcli server operators create NAME --scopes …)", TokenEnv)
	}
	token = strings.TrimSpace(token) // a file's (or a variable's) trailing newline
	if !store.ValidOperatorTokenFormat(token) {
		return "", fmt.Errorf("%s does not hold an operator token (%s followed by 43 base64url characters)", from, store.OperatorTokenPrefix)
	}
	return token, nil
}

// readTokenFile reads a token file: a regular file (a symbolic link to
// one is fine; a FIFO, which would block the open, or a device is not),
// at most maxTokenFile bytes.
func readTokenFile(path string, warn io.Writer) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--token-file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("--token-file %s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--token-file: %w", err)
	}
	defer f.Close()
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		fmt.Fprintf(warn, "idcli: warning: --token-file %s may be read by other users (mode %04o): chmod 600 it\n", path, perm)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return nil, fmt.Errorf("--token-file: %w", err)
	}
	if len(b) > maxTokenFile {
		return nil, fmt.Errorf("--token-file %s is over %d bytes: not an operator token", path, maxTokenFile)
	}
	return b, nil
}

// newClient is the admin API's client for server with token: bounded in
// time at every step, and not following redirects (the answer names
// where to point --server instead).
//
// Plain http (to this machine only, see parseServer) is never sent through
// a proxy the environment names, and a name under .localhost is dialed on
// loopback here rather than resolved, which a resolver may do by DNS
// (RFC 6761 asks resolvers not to, not all comply): either way the token
// would leave the machine in clear.
func newClient(server, token string) *client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = loopbackDialer{&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}}.DialContext
	if strings.HasPrefix(server, "http://") {
		tr.Proxy = nil
	}
	tr.TLSHandshakeTimeout = 10 * time.Second
	tr.ResponseHeaderTimeout = opsTimeout
	return &client{base: server, token: token, http: &http.Client{
		Transport: tr,
		Timeout:   opsTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}}
}

// call sends method path?query (path below apiPrefix, its segments
// escaped by the caller) with body as JSON (nil: none), and decodes a 2xx
// answer into out. scope is the scope the route needs, named when the
// server refuses the token for the lack of it.
func (c *client) call(ctx context.Context, method, path string, query url.Values, body, out any, scope string) error {
	target := c.base + apiPrefix + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL and method
		}
		err = fmt.Errorf("admin API at %s: %w", c.base, err)
		return hint.With(err, hint.Refused(err, c.base))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return fmt.Errorf("admin API at %s: reading the answer: %w", c.base, err)
	}
	if len(b) > maxAnswer {
		return fmt.Errorf("admin API at %s: the answer is over %d MiB", c.base, maxAnswer>>20)
	}
	if resp.StatusCode/100 != 2 {
		return c.refusal(resp, b, scope)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("admin API at %s: %s %s answered %d with a body that is not its JSON (%v): is --server the service's HOSTNAME?",
			c.base, method, apiPrefix+path, resp.StatusCode, err)
	}
	return nil
}

// refusal words an answer other than 2xx on one line.
func (c *client) refusal(resp *http.Response, b []byte, scope string) error {
	var e struct {
		Error struct {
			Status  int    `json:"status"`
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if resp.StatusCode/100 == 3 {
		return fmt.Errorf("admin API at %s: answered %s, a redirect to %s: give the service's own URL as --server",
			c.base, resp.Status, c.clean(resp.Header.Get("Location")))
	}
	if json.Unmarshal(b, &e) != nil || e.Error.Code == "" {
		return fmt.Errorf("admin API at %s: answered %s, not the admin API's JSON: is --server the service's HOSTNAME, and the server of this version?", c.base, resp.Status)
	}
	msg, code := c.clean(e.Error.Message), c.clean(e.Error.Code)
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("the server refused the operator token: the token is missing, unknown, revoked or expired (%s)", msg)
	case resp.StatusCode == http.StatusForbidden && code == "insufficient_scope":
		if s := challengeScope(resp.Header.Get("WWW-Authenticate")); s != "" {
			scope = c.clean(s)
		}
		return fmt.Errorf("the operator token lacks the scope %s: ask for a token holding it (idcli server operators create NAME --scopes %s)", scope, scope)
	case code == "not_found" || code == "misdirected_request":
		return fmt.Errorf("admin API at %s: %s (%d %s): is --server the service's HOSTNAME, and the server of this version?", c.base, msg, resp.StatusCode, code)
	}
	return fmt.Errorf("%s (%d %s from %s)", msg, resp.StatusCode, code, c.base)
}

// clean is what the server said, made safe to print: no control
// character, no token, at most 300 bytes.
func (c *client) clean(s string) string {
	s = strings.ReplaceAll(s, c.token, "[token]")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, ""))
	if len(s) > 300 {
		s = strings.ToValidUTF8(s[:300], "") + "…"
	}
	return s
}

// challengeScope is the scope="…" of a Bearer challenge (RFC 6750 §3).
func challengeScope(h string) string {
	_, rest, ok := strings.Cut(h, `scope="`)
	if !ok {
		return ""
	}
	s, _, _ := strings.Cut(rest, `"`)
	return s
}

// loopbackDialer dials through d, except that it connects the names
// "localhost" and "*.localhost" to 127.0.0.1, then ::1, without asking a
// resolver.
type loopbackDialer struct{ d *net.Dialer }

func (l loopbackDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if h := strings.ToLower(host); err != nil || (h != "localhost" && !strings.HasSuffix(h, ".localhost")) {
		return l.d.DialContext(ctx, network, addr)
	}
	c, err := l.d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
	if err == nil {
		return c, nil
	}
	if c6, err6 := l.d.DialContext(ctx, network, net.JoinHostPort("::1", port)); err6 == nil {
		return c6, nil
	}
	return nil, err
}
