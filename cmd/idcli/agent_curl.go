package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"

	"github.com/agentid/agentid/cmd/idcli/internal/hint"
	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer/agent"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// newAgentCurlCmd is `idcli agent curl URL [-X M] [-H 'K: V']… [-d JSON] [-i] [-v] [--pp]`:
// a signed HTTP request with Go's client (no curl binary). Each redirect hop
// is signed afresh. Exit status 22 when the final answer is 400 or above.
func newAgentCurlCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli agent curl", env)
	method := fs.String("X", "", "request method (default GET, or POST with -d); a standard method is upper-cased (get → GET)")
	var headers stringsFlag
	fs.Var(&headers, "H", "extra request header 'Name: value' (repeatable)")
	data := fs.String("d", "", "JSON request body (@file reads a file, @- stdin); sets Content-Type: application/json")
	include := fs.Bool("i", false, "print the response status line and headers before the body")
	verbose := fs.Bool("v", false, "print each request and response head to stderr")
	pp := fs.Bool("pp", false, "pretty-print a JSON response body")
	standards := fs.Bool("standards", false, `cover "signature-agent";key="sig1" even with --legacy`)
	legacy := fs.Bool("legacy", false, legacyUsage)
	var metadata stringsFlag
	fs.Var(&metadata, "metadata", metadataUsage)
	components := fs.String("components", "", componentsUsage)
	asJSON := fs.Bool("json", false, `print the answer as one JSON object {"url","status","headers","body"} (unlike curl's --json, which sends a body: use -d)`)
	p11URI := pkcs11URIFlag(fs)
	whenChallenged := fs.Bool("sign-when-challenged", false, "send the request unsigned; sign it and send it again only when the answer is a signature challenge (401, or 400/403 with Signature-Error)")
	return &ffcli.Command{
		Name:       "curl",
		ShortUsage: "idcli agent curl URL [-X METHOD] [-H 'K: V']… [-d JSON] [-i] [-v] [--pp] [--components C,…] [--standards] [--legacy] [--metadata K=V]… [--pkcs11-uri URI] [--json] [--sign-when-challenged]",
		ShortHelp:  "make an HTTP request signed with this agent's credentials",
		LongHelp: "Exit status 0 below HTTP 400, 22 at 400 and above (the body is printed either way).\n" +
			"A refusal that names what to cover (Accept-Signature, Signature-Error invalid_input) or a clock_skew\n" +
			"one is answered by one re-signed retry to the same host (docs/signing.md, \"Retries\").\n" +
			`With --json the answer is {"url":FINAL_URL,"status":200,"headers":{"Name":["value"]},"body":…}` + "\n" +
			"where body is the JSON body itself when it is JSON, else a string.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			pos, err := env.positional(fs, args, 1, "idcli agent curl URL [-X METHOD] [-H 'K: V']… [-d JSON] [-i] [-v] [--pp]", "agent curl: want exactly one URL")
			if err != nil {
				return err
			}
			dataSet := false
			fs.Visit(func(f *flag.Flag) {
				if f.Name == "d" {
					dataSet = true
				}
			})
			comps, err := parseComponents(*components)
			if err != nil {
				return err
			}
			md, err := parseMetadata(metadata)
			if err != nil {
				return fmt.Errorf("agent curl: %w", err)
			}
			c := curl{env: env, url: pos[0], method: *method, headers: headers,
				include: *include, verbose: *verbose, pp: *pp, standards: *standards, components: comps, asJSON: *asJSON,
				legacy: *legacy, metadata: md, pkcs11URI: *p11URI, whenChallenged: *whenChallenged}
			if dataSet {
				body, err := readData(env, *data)
				if err != nil {
					return err
				}
				c.body = body
				c.hasBody = true
			}
			return c.run(ctx)
		},
	}
}

type curl struct {
	env                  *cliEnv
	url, method          string
	headers              []string
	body                 []byte
	hasBody              bool
	include, verbose, pp bool
	standards, legacy    bool
	metadata             map[string]string
	components           []string // nil: the default profile
	asJSON               bool
	pkcs11URI            string // --pkcs11-uri
	whenChallenged       bool   // --sign-when-challenged
}

// curlJSON is the --json output of `idcli agent curl`.
type curlJSON struct {
	URL     string      `json:"url"` // the last hop's URL
	Status  int         `json:"status"`
	Headers http.Header `json:"headers"`
	// Body is the body: itself when it is JSON, else a string.
	Body any `json:"body"`
}

// readData returns the -d argument: literal text, @file, or @- for stdin.
func readData(env *cliEnv, d string) ([]byte, error) {
	name, ok := strings.CutPrefix(d, "@")
	if !ok {
		return []byte(d), nil
	}
	if name == "-" {
		return io.ReadAll(env.Stdin)
	}
	b, err := os.ReadFile(env.path(name))
	if err != nil {
		return nil, fmt.Errorf("agent curl: -d: %w", err)
	}
	return b, nil
}

func (c curl) run(ctx context.Context) error {
	if err := checkURL("agent curl", c.url); err != nil {
		return err
	}
	tk, err := c.env.openTokenKey(c.pkcs11URI, false)
	if err != nil {
		return err
	}
	defer tk.Close()
	creds, err := agent.Load(agent.LoadOptions{Dir: c.env.Dir, Getenv: c.env.Getenv, Key: tk.Signing()})
	if err != nil {
		return err
	}
	method := c.method
	if method == "" {
		method = http.MethodGet
		if c.hasBody {
			method = http.MethodPost
		}
	}
	method, err = normalizeMethod("agent curl: -X", method)
	if err != nil {
		return err
	}
	var body io.Reader
	if c.hasBody {
		body = bytes.NewReader(c.body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url, body)
	if err != nil {
		return fmt.Errorf("agent curl: %w", err)
	}
	if c.hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range c.headers {
		name, value, ok := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return fmt.Errorf("agent curl: -H %q: want 'Name: value'", h)
		}
		if strings.EqualFold(name, "Host") {
			req.Host = strings.TrimSpace(value)
			continue
		}
		req.Header.Set(name, strings.TrimSpace(value))
	}
	var base http.RoundTripper = http.DefaultTransport
	if c.verbose {
		base = &verboseTransport{base: base, w: c.env.Stderr}
	}
	tr := creds.Transport(base)
	tr.Options.Standards = c.standards
	tr.Options.Components = c.components
	tr.Options.Legacy = c.legacy
	tr.Options.Metadata = c.metadata
	tr.SignWhenChallenged = c.whenChallenged
	// The directory signature is refreshed, when due, while the call runs.
	rt := newCurlRefresh(c.env, tr, tk.Signing())
	defer rt.finish()
	// Go's client follows up to 10 redirects; tr signs every hop afresh.
	client := &http.Client{Transport: rt}
	resp, err := client.Do(req)
	if err != nil {
		return hint.With(fmt.Errorf("agent curl: %w", err), hint.Refused(err, c.url))
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("agent curl: read body: %w", err)
	}
	out := c.env.Stdout
	if c.asJSON {
		var b any = string(respBody)
		if json.Valid(respBody) {
			b = json.RawMessage(bytes.TrimSpace(respBody))
		}
		if err := writeJSON(out, curlJSON{URL: resp.Request.URL.String(), Status: resp.StatusCode, Headers: resp.Header, Body: b}, c.pp); err != nil {
			return err
		}
		respBody = nil
	} else if c.include {
		writeHead(out, "", resp.Proto+" "+resp.Status, resp.Header)
	}
	if c.pp && !c.asJSON && json.Valid(respBody) {
		var buf bytes.Buffer
		if err := json.Indent(&buf, bytes.TrimSpace(respBody), "", "  "); err == nil {
			buf.WriteByte('\n')
			respBody = buf.Bytes()
		}
	}
	if _, err := out.Write(respBody); err != nil {
		return err
	}
	if resp.StatusCode >= 400 {
		fmt.Fprintf(c.env.Stderr, "idcli: the server answered %s\n", resp.Status)
		origin, _ := creds.Origin()
		if hint := curlHint(resp, respBody, origin); hint != "" {
			fmt.Fprintf(c.env.Stderr, "hint: %s\n", hint)
		}
		return exitCode(22)
	}
	return nil
}

// curlHint explains an error answer whose cause is not in its status: an
// HTML page instead of JSON, a verifier that refuses the signature agent
// (named by the error body's "reason" when the verifier gives one: no
// trust pattern matches, http not allowed, a private address, a failed
// fetch), vestauth's routes on a server that does not serve them. origin
// is the agent's Signature-Agent origin. It returns "" when there is
// nothing to add.
func curlHint(resp *http.Response, body []byte, origin string) string {
	req := resp.Request // the last hop
	if agent.IsHTML(resp.Header.Get("Content-Type"), body) {
		return fmt.Sprintf("%s://%s answered an HTML page, not a JSON API answer: check the URL (an API behind a proxy or a web server's error page?)", req.URL.Scheme, req.URL.Host)
	}
	code, _, _ := agent.ParseErrorBody(body) // other bodies leave the code empty
	plain := strings.HasPrefix(origin, "http://")
	switch {
	case resp.StatusCode == http.StatusNotFound && req.Method == http.MethodPost && (req.URL.Path == "/register" || req.URL.Path == "/rotate"):
		return "this server does not serve vestauth's " + req.URL.Path + ": start the agentid server with idcli server start --vestauth-compat (or use idcli agent init / idcli agent rotate)"
	case code == string(middleware.CodeUntrustedAgent) || code == string(middleware.CodeKeyFetchFailed):
		return refusalHint(code, errorReason(body), origin, plain)
	}
	return ""
}

// errorReason returns the "reason" member of a JSON error body (keyfetch's
// cause of a refused or failed key set), or "".
func errorReason(body []byte) keyfetch.Reason {
	var eb struct {
		Error struct {
			Reason keyfetch.Reason `json:"reason"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &eb) != nil {
		return ""
	}
	return eb.Error.Reason
}

// refusalHint explains an untrusted_signature_agent or key_fetch_failed
// answer by its reason; a verifier that sends none gets the likely causes.
func refusalHint(code string, reason keyfetch.Reason, origin string, plain bool) string {
	local := ""
	if plain {
		local = ": a verifier elsewhere cannot reach a local server, and a local one must allow http and private addresses (e.g. idcli tool verify --allow-http --allow-private)"
	}
	switch reason {
	case keyfetch.ReasonUntrustedHost:
		return "the verifier's trust patterns do not match the host of your signature agent " + origin + ": its operator must trust that host (e.g. idcli proxy --trust HOST, or a registry listing your agent)"
	case keyfetch.ReasonHTTPRefused:
		return "the verifier refuses your plain-HTTP signature agent " + origin + ": verifiers accept http:// key directories only when set up for local development (e.g. idcli tool verify --allow-http --allow-private); register the agent with an https:// service for everything else"
	case keyfetch.ReasonPrivateAddress:
		return "the verifier refuses to connect to your signature agent " + origin + ": it is on a loopback or private address, which a verifier accepts only when set up for local development (--allow-private)"
	case keyfetch.ReasonInvalidURL:
		return "the verifier cannot use your signature agent URL " + origin + ": it is not an absolute http(s) URL with a valid host"
	case "":
	default:
		return fmt.Sprintf("the verifier could not fetch the key directory of %s (%s)%s", origin, reason, local)
	}
	// A verifier that does not say why.
	switch {
	case code == string(middleware.CodeKeyFetchFailed):
		return "the verifier could not fetch the key directory of " + origin + local
	case plain:
		return "the verifier does not trust your signature agent " + origin + ": either its trust patterns do not match that host, or it does not accept plain http:// key directories (only verifiers set up for local development do)"
	}
	return "the verifier does not trust your signature agent " + origin + ": its trust patterns do not match that host"
}

// writeHead prints a status or request line then the header fields, sorted,
// each line prefixed, then an empty line.
func writeHead(w io.Writer, prefix, first string, h http.Header) {
	fmt.Fprintf(w, "%s%s\n", prefix, first)
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		for _, v := range h[k] {
			fmt.Fprintf(w, "%s%s: %s\n", prefix, k, v)
		}
	}
	fmt.Fprintf(w, "%s\n", prefix)
}

// verboseTransport prints each signed request's head and each response's
// head (curl -v style) to w. It sits below the signing transport, so it
// shows exactly what is sent on every hop; requests never carry a private
// key.
type verboseTransport struct {
	base http.RoundTripper
	w    io.Writer
}

func (t *verboseTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	h := req.Header.Clone()
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	h.Set("Host", host)
	if req.ContentLength > 0 {
		h.Set("Content-Length", fmt.Sprint(req.ContentLength))
	}
	writeHead(t.w, "> ", req.Method+" "+req.URL.RequestURI()+" HTTP/1.1", h)
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	writeHead(t.w, "< ", resp.Proto+" "+resp.Status, resp.Header)
	return resp, nil
}
