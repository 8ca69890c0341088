package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

const toolVerifyUsage = "idcli tool verify METHOD URL --signature S --signature-input I [--signature-agent A] [-H 'K: V']… [--body-file F] [--now UNIX] [--trust PATTERN]… [--allow-http] [--allow-private] [--jwk PUBLIC_JWK] [--relaxed] [--strict-01] [--explain] [--json]"

// toolVerify holds the flags of `idcli tool verify`.
type toolVerify struct {
	env                                       *cliEnv
	signature, signatureInput, signatureAgent string
	headers, trust                            stringsFlag
	bodyFile, now, jwk                        string
	allowHTTP, allowPrivate, relaxed, asJSON  bool
	strict01                                  bool
	explain                                   bool
	keySets                                   []string // the key-set URLs Signature-Agent names
}

// newToolVerifyCmd is `idcli tool verify METHOD URL …`: it rebuilds a
// captured request and runs it through the same verifier the middleware
// uses, then prints the identity or the reason it was refused.
func newToolVerifyCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli tool verify", env)
	tv := &toolVerify{env: env}
	fs.StringVar(&tv.signature, "signature", "", "the Signature header value")
	fs.StringVar(&tv.signatureInput, "signature-input", "", "the Signature-Input header value")
	fs.StringVar(&tv.signatureAgent, "signature-agent", "", "the Signature-Agent header value, e.g. sig1=\"https://agent-x.example\"")
	fs.Var(&tv.headers, "H", "another request header 'Name: value' (repeatable; 'Host: h' sets the authority)")
	fs.StringVar(&tv.bodyFile, "body-file", "", "file holding the request body (- reads stdin)")
	fs.StringVar(&tv.now, "now", "", "verify as of this Unix time (default: the current time)")
	fs.Var(&tv.trust, "trust", "trusted key-set host: exact host[:port] or *.suffix (repeatable; default: the host of each key set Signature-Agent names, exactly; a card's jwks_uri host needs --trust)")
	fs.BoolVar(&tv.allowHTTP, "allow-http", false, "fetch key sets of http:// signature agents (local development only)")
	fs.BoolVar(&tv.allowPrivate, "allow-private", false, "fetch key sets from loopback and private addresses, resolving *.localhost to loopback (local development only)")
	fs.StringVar(&tv.jwk, "jwk", "", "verify with this public JWK (JSON, or @file): Ed25519, RSA (rsa-pss-sha512) or P-256 (ecdsa-p256-sha256); nothing is fetched")
	fs.BoolVar(&tv.relaxed, "relaxed", false, "plain RFC 9421: any tag, no expires/nonce/Signature-Agent required, any keyid, unbounded window")
	fs.BoolVar(&tv.strict01, "strict-01", false, "verify as web-bot-auth protocol-01 says exactly (middleware.ProfileStrict01): the Signature-Agent member keyed by the label, covered, fetched as sent")
	fs.BoolVar(&tv.asJSON, "json", false, "print the result as JSON")
	fs.BoolVar(&tv.explain, "explain", false, "also print each signature's base and the outcome of each check (to stderr with --json)")
	return &ffcli.Command{
		Name:       "verify",
		ShortUsage: toolVerifyUsage,
		ShortHelp:  "verify a captured signed request and print the agent's identity or the reason it fails",
		LongHelp: "Rebuilds METHOD URL with the given signature headers (and -H headers and\n" +
			"body) and verifies it under the web-bot-auth policy of the middleware. Keys\n" +
			"come from the key set each Signature-Agent member names (an origin's\n" +
			"well-known directory, a key-set URL, a ;type=jwks_uri JWKS or a ;type=cimd\n" +
			"Signature Agent Card; only hosts allowed by --trust are fetched, by default\n" +
			"the key sets' own hosts) or from --jwk.\n" +
			"Nonces are not remembered: the request is checked once.\n" +
			"Exit status 0 when the signature verifies, 1 when it does not.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			pos, err := env.positional(fs, args, 2, toolVerifyUsage, "tool verify: want METHOD and URL")
			if err != nil {
				return err
			}
			return tv.run(ctx, pos[0], pos[1])
		},
	}
}

// neverSeen is a ReplayStore that remembers nothing: a captured request is
// checked once, possibly long after it was sent, and possibly again.
type neverSeen struct{}

func (neverSeen) Seen(context.Context, string, time.Time) (bool, error) { return false, nil }

func (tv *toolVerify) run(ctx context.Context, method, rawURL string) error {
	req, err := tv.request(ctx, method, rawURL)
	if err != nil {
		return err
	}
	clock := time.Now
	if tv.now != "" {
		n, err := strconv.ParseInt(tv.now, 10, 64)
		if err != nil {
			return fmt.Errorf("tool verify: --now %q: want Unix seconds", tv.now)
		}
		at := time.Unix(n, 0)
		clock = func() time.Time { return at }
	}
	keys, err := tv.keySource(req, clock)
	if err != nil {
		return err
	}
	// The request is the one given on the command line: its host is the
	// one it was made for, so any authority is accepted.
	cfg := middleware.Config{Keys: keys, Now: clock, Replay: neverSeen{}, AnyAuthority: true}
	if tv.strict01 {
		cfg.Profile = middleware.ProfileStrict01
	}
	if tv.relaxed {
		cfg.AnyTag = true
		cfg.AllowMissingExpires = true
		cfg.AllowMissingNonce = true
		cfg.AllowMissingSignatureAgent = true
		cfg.AllowAnyKeyID = true
		cfg.MaxWindow = -1
	}
	v, err := middleware.New(cfg)
	if err != nil {
		return fmt.Errorf("tool verify: %w", err)
	}
	if tv.explain {
		tv.explainRequest(ctx, req, keys, clock())
	}
	a, verr := v.Verify(req)
	if verr != nil {
		tv.keySets, _ = keySetURLs(req.Header.Values("Signature-Agent"))
		tv.printFailure(middleware.AsError(verr))
		return exitCode(1)
	}
	return tv.printAgent(a)
}

// request rebuilds the captured request from the arguments.
func (tv *toolVerify) request(ctx context.Context, method, rawURL string) (*http.Request, error) {
	if err := checkURL("tool verify", rawURL); err != nil {
		return nil, err
	}
	method, err := normalizeMethod("tool verify", method)
	if err != nil {
		return nil, err
	}
	var body []byte
	if tv.bodyFile != "" {
		var err error
		if body, err = tv.readBody(); err != nil {
			return nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("tool verify: %w", err)
	}
	if tv.bodyFile == "" {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	for _, h := range tv.headers {
		name, value, ok := strings.Cut(h, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("tool verify: -H %q: want 'Name: value'", h)
		}
		if strings.EqualFold(name, "Host") {
			req.Host = value
			continue
		}
		req.Header.Add(name, value)
	}
	for _, f := range []struct{ name, value string }{
		{"Signature", tv.signature},
		{"Signature-Input", tv.signatureInput},
		{"Signature-Agent", tv.signatureAgent},
	} {
		if f.value != "" {
			req.Header.Set(f.name, f.value)
		}
	}
	var missing missingFlags
	missing.need("--signature", req.Header.Get("Signature") == "", false)
	missing.need("--signature-input", req.Header.Get("Signature-Input") == "", false)
	if len(missing) > 0 {
		fmt.Fprintln(tv.env.Stderr, "usage:", toolVerifyUsage)
		return nil, fmt.Errorf("tool verify: %s %s required", missing, map[bool]string{true: "is", false: "are"}[len(missing) == 1])
	}
	return req, nil
}

func (tv *toolVerify) readBody() ([]byte, error) {
	if tv.bodyFile == "-" {
		return io.ReadAll(tv.env.Stdin)
	}
	b, err := os.ReadFile(tv.env.path(tv.bodyFile))
	if err != nil {
		return nil, fmt.Errorf("tool verify: --body-file: %w", err)
	}
	return b, nil
}

// keySource returns the public JWK given with --jwk, or a key-set fetcher
// restricted to the --trust patterns (by default the hosts of the key sets
// the Signature-Agent members name, exactly).
func (tv *toolVerify) keySource(req *http.Request, clock func() time.Time) (middleware.KeySource, error) {
	if tv.jwk != "" {
		return tv.staticKey()
	}
	trust := []string(tv.trust)
	if len(trust) == 0 {
		hosts, err := keySetHosts(req.Header.Values("Signature-Agent"))
		if err != nil {
			// The verifier reports the malformed field with its code.
			hosts = nil
		}
		if len(hosts) == 0 && err == nil && tv.relaxed {
			return nil, errors.New("tool verify: without Signature-Agent there is no key set: give the key with --jwk")
		}
		trust = hosts
		if len(hosts) > 0 {
			tv.note("trusting %s (the Signature-Agent host); use --trust to choose", strings.Join(hosts, ", "))
		}
	}
	kc := keyfetch.Config{
		TrustedHosts:         trust,
		AllowHTTP:            tv.allowHTTP,
		AllowPrivateNetworks: tv.allowPrivate,
		Now:                  clock,
		NegativeTTL:          -1,
	}
	if err := kc.Validate(); err != nil {
		return nil, fmt.Errorf("tool verify: %s", trustFlagWords(err))
	}
	return keyfetch.New(kc), nil
}

// staticKey parses --jwk as a key-set key: Ed25519, RSA (rsa-pss-sha512)
// or P-256 (ecdsa-p256-sha256), its published kid kept. The verifier finds
// it by that kid or by its RFC 7638 thumbprint; at an origin's well-known
// directory only the thumbprint counts, unless --relaxed.
func (tv *toolVerify) staticKey() (middleware.KeySource, error) {
	data := []byte(tv.jwk)
	if name, ok := strings.CutPrefix(tv.jwk, "@"); ok {
		b, err := os.ReadFile(tv.env.path(name))
		if err != nil {
			return nil, fmt.Errorf("tool verify: --jwk: %w", err)
		}
		data = b
	}
	if !json.Valid(data) || !bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
		return nil, errors.New("tool verify: --jwk: not a JSON object")
	}
	pk, err := signer.ParseKeySetJWK(data)
	if err != nil {
		return nil, fmt.Errorf("tool verify: --jwk: %w", err)
	}
	keys := middleware.NewStaticKeys()
	keys.Add("", pk)
	if pk.JWK.Kid != pk.Thumbprint && !tv.relaxed {
		tv.note("the JWK's kid %q is not its thumbprint %q: a signature naming it verifies only at a key set other than an origin's well-known directory, or with --relaxed", pk.JWK.Kid, pk.Thumbprint)
	}
	return keys, nil
}

// keySetHosts returns the host[:port] of the key set each Signature-Agent
// member names, in field order, without duplicates.
func keySetHosts(vals []string) ([]string, error) {
	urls, err := keySetURLs(vals)
	var hosts []string
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			continue
		}
		if !slices.Contains(hosts, u.Host) {
			hosts = append(hosts, u.Host)
		}
	}
	return hosts, err
}

// keySetURLs returns the URL of the key set each Signature-Agent member
// names, in field order.
func keySetURLs(vals []string) ([]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	sa, err := signer.ParseSignatureAgent(vals)
	if err != nil {
		return nil, err
	}
	var urls []string
	for _, m := range sa.Members() {
		if set, err := m.KeySet(); err == nil {
			urls = append(urls, set.URL)
		}
	}
	return urls, nil
}

// note prints an informational line: to stdout for people, to stderr when
// stdout carries JSON.
func (tv *toolVerify) note(format string, args ...any) {
	w := tv.env.Stdout
	if tv.asJSON {
		w = tv.env.Stderr
	}
	fmt.Fprintf(w, "• "+format+"\n", args...)
}

// verifyResult is the --json output of `idcli tool verify`.
type verifyResult struct {
	Verified       bool          `json:"verified"`
	ID             string        `json:"id,omitempty"`
	UID            string        `json:"uid,omitempty"`
	KeyID          string        `json:"kid,omitempty"`
	Alg            string        `json:"alg,omitempty"`
	PublicJWK      *signer.JWK   `json:"public_jwk,omitempty"`
	SignatureAgent string        `json:"signature_agent,omitempty"`
	DirectoryURL   string        `json:"directory_url,omitempty"`
	Label          string        `json:"label,omitempty"`
	Tag            string        `json:"tag,omitempty"`
	Created        *time.Time    `json:"created,omitempty"`
	Expires        *time.Time    `json:"expires,omitempty"`
	Nonce          string        `json:"nonce,omitempty"`
	Components     []string      `json:"components,omitempty"`
	Bound          *bool         `json:"bound,omitempty"`
	Error          *verifyFailed `json:"error,omitempty"`
}

type verifyFailed struct {
	Code    string `json:"code"`
	Status  int    `json:"status"`
	Message string `json:"message"`
	Detail  string `json:"detail,omitempty"`
}

func (tv *toolVerify) printAgent(a middleware.Agent) error {
	if tv.asJSON {
		jwk := a.JWK.Public()
		r := verifyResult{
			Verified: true, ID: a.ID, UID: a.UID, KeyID: a.KeyID, Alg: a.Alg, PublicJWK: &jwk,
			SignatureAgent: a.SignatureAgent, DirectoryURL: a.DirectoryURL,
			Label: a.Label, Tag: a.Tag, Nonce: a.Nonce, Components: a.Components, Bound: &a.Bound,
		}
		created := a.Created.UTC()
		r.Created = &created
		if !a.Expires.IsZero() {
			expires := a.Expires.UTC()
			r.Expires = &expires
		}
		return writeJSON(tv.env.Stdout, r, true)
	}
	w := tv.env.Stdout
	line := func(name, value string) {
		fmt.Fprintf(w, "✔ verified %-16s %s\n", name, value)
	}
	orDash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	line("identity", orDash(a.ID))
	line("uid", orDash(a.UID))
	line("kid", a.KeyID)
	line("algorithm", a.Alg)
	line("signature agent", orDash(a.SignatureAgent))
	line("directory", orDash(a.DirectoryURL))
	line("label", a.Label)
	line("tag", orDash(a.Tag))
	line("created", fmt.Sprintf("%s (%d)", a.Created.UTC().Format(time.RFC3339), a.Created.Unix()))
	if a.Expires.IsZero() {
		line("expires", "-")
	} else {
		line("expires", fmt.Sprintf("%s (%d)", a.Expires.UTC().Format(time.RFC3339), a.Expires.Unix()))
	}
	line("components", strings.Join(a.Components, " "))
	line("bound", strconv.FormatBool(a.Bound))
	return nil
}

// printFailure prints why verification failed. The cause (Err) is shown
// too: this is the operator's own terminal, and it names what to fix (an
// untrusted host, a refused http:// scheme, a private address).
func (tv *toolVerify) printFailure(e *middleware.Error) {
	detail := ""
	if e.Err != nil {
		detail = flagWords.Replace(e.Err.Error())
	}
	if tv.asJSON {
		_ = writeJSON(tv.env.Stdout, verifyResult{Error: &verifyFailed{Code: string(e.Code), Status: e.Status(), Message: e.Message, Detail: detail}}, true)
		return
	}
	fmt.Fprintf(tv.env.Stdout, "✘ %s: %s\n", e.Code, e.Message)
	if detail != "" {
		fmt.Fprintf(tv.env.Stdout, "  cause: %s\n", detail)
	}
	hint := tv.devFlagsHint(e)
	if hint == "" {
		hint = verifyHint(e)
	}
	if hint != "" {
		fmt.Fprintf(tv.env.Stdout, "  hint: %s\n", hint)
	}
}

// devFlagsHint names at once every local-development flag (--allow-http,
// --allow-private) the key sets of the request need and were not given,
// with the command line to run, when the failure is one of theirs; else "".
func (tv *toolVerify) devFlagsHint(e *middleware.Error) string {
	if !devRefusal(e.Err) {
		return ""
	}
	missing, local := localDevFlags(tv.keySets, e.Err, tv.allowHTTP, tv.allowPrivate)
	if len(missing) == 0 {
		return ""
	}
	where := ""
	if len(local) > 0 {
		where = " (" + strings.Join(local, ", ") + ")"
	}
	return "the key set is a local development one" + where + ": add " + strings.Join(missing, " ") + "; run: " + rerunWith(tv.env, missing)
}

// verifyHint suggests the flag that addresses a failure, if one does.
func verifyHint(e *middleware.Error) string {
	if hint := fetchHint(e.Err); hint != "" {
		return hint
	}
	switch e.Code {
	case middleware.CodeUntrustedAgent:
		return "add --trust HOST (or --trust '*.suffix') to allow this signature agent"
	case middleware.CodeExpiredSignature, middleware.CodeNotYetValid:
		return "use --now UNIX to verify as of the time the request was sent"
	}
	return ""
}
