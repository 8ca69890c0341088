// Package agent is the agent side of agentid: it loads an agent's credentials
// (flags, then the process environment, then a .env file), registers the
// agent with the service, rotates its key and signs requests with it.
//
//	res, err := agent.Init(ctx, agent.InitOptions{Hostname: "https://agentid.example"})
//	creds, err := agent.Load(agent.LoadOptions{})
//	resp, err := creds.Client(nil).Get("https://api.example/whoami")
//	h, err := agent.Headers("GET", "https://api.example/x", creds, "", "")
//	rot, err := agent.Rotate(ctx, agent.RotateOptions{})
//	client := &http.Client{Transport: &agent.RefreshTransport{Base: creds.Transport(nil)}} // keeps the directory signed
//
// Register and RotateKey are the registration and rotation client itself,
// for callers that keep keys elsewhere than in a .env file.
package agent

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/envfile"
)

// Names of the credential variables, as vestauth's credentials file names
// them (docs/migrating-from-vestauth.md).
const (
	EnvUID        = "AGENT_UID"
	EnvPublicJWK  = "AGENT_PUBLIC_JWK"
	EnvPrivateJWK = "AGENT_PRIVATE_JWK"
	EnvHostname   = "AGENT_HOSTNAME"
)

// ErrMissing is wrapped by errors about absent credentials; their messages
// contain the word "missing", name the variable and say how to set it.
var ErrMissing = errors.New("agent: missing credentials")

// ErrInvalid is wrapped by errors about malformed credentials; their
// messages contain the word "invalid" and never the private key.
var ErrInvalid = errors.New("agent: invalid credentials")

// Credentials identify an agent and hold its signing key. String and
// GoString never print the private key.
type Credentials struct {
	// UID is the agent uid, e.g. agent-0123456789abcdef01234567.
	UID string
	// Key is the agent's current private key.
	Key signer.PrivateKey
	// Hostname is the service base URL with scheme, e.g. http://localhost:3000.
	Hostname string
}

// String prints the uid, kid and hostname, never the key.
func (c Credentials) String() string {
	return fmt.Sprintf("agent.Credentials{uid=%s kid=%s hostname=%s}", c.UID, c.Key.KeyID(), c.Hostname)
}

// GoString is String.
func (c Credentials) GoString() string { return c.String() }

// Origin returns the agent's signature agent origin,
// "<scheme>://<uid>.<service host[:port]>", the value Signature-Agent names.
func (c Credentials) Origin() (string, error) {
	svc, err := signer.ParseServiceURL(c.Hostname)
	if err != nil {
		return "", err
	}
	if err := checkUID(c.UID); err != nil {
		return "", err
	}
	return svc.AgentOrigin(c.UID), nil
}

// Options returns the signer options of the default profile: it
// covers @authority only, tag web-bot-auth, Signature-Agent sig1="<origin>".
// It fails when the uid or hostname is unusable.
func (c Credentials) Options() (signer.Options, error) {
	if !c.Key.CanSign() {
		return signer.Options{}, missingError(EnvPrivateJWK)
	}
	origin, err := c.Origin()
	if err != nil {
		return signer.Options{}, err
	}
	return signer.Options{SignatureAgent: origin}, nil
}

// Transport returns a RoundTripper that signs every request it sends with c
// under the default profile. base nil means http.DefaultTransport. Signing
// happens per round trip, so each redirect hop and retry is signed afresh
// for its own @authority, and a refusal that names what to cover is
// answered with one re-signed retry (signer.Transport). c should come from
// Load (validated); with an unusable uid or hostname the requests carry no
// Signature-Agent.
func (c Credentials) Transport(base http.RoundTripper) *signer.Transport {
	opts, _ := c.Options()
	return &signer.Transport{Base: base, Key: c.Key, Options: opts}
}

// Client returns an *http.Client whose transport is c.Transport(base).
// Redirects are followed (at most 10) and each hop is signed afresh.
func (c Credentials) Client(base http.RoundTripper) *http.Client {
	return &http.Client{Transport: c.Transport(base)}
}

// LoadOptions say where credentials come from. For each variable the
// precedence is: the explicit field (a command-line flag), then the process
// environment, then the .env file.
type LoadOptions struct {
	// Dir is the folder holding the .env file. If "", the current directory.
	Dir string
	// Path is the credentials file. If "", Dir/.env.
	Path string
	// UID overrides AGENT_UID when not "".
	UID string
	// PrivateJWK overrides AGENT_PRIVATE_JWK (JSON) when not "".
	PrivateJWK string
	// Hostname overrides AGENT_HOSTNAME when not "".
	Hostname string
	// Key, when it can sign, is the agent's key, held elsewhere than in the
	// credentials file (a PKCS#11 token, a KMS; see signer.NewSignerKey):
	// AGENT_PRIVATE_JWK is then not read. If zero, AGENT_PRIVATE_JWK.
	Key signer.PrivateKey
	// Getenv reads the process environment. If nil, os.Getenv.
	Getenv func(string) string
}

func (o LoadOptions) withDefaults() LoadOptions {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	o.Path = envPath(o.Dir, o.Path)
	return o
}

func envPath(dir, path string) string {
	if path != "" {
		return path
	}
	if dir == "" {
		dir = "."
	}
	return filepath.Join(dir, ".env")
}

// source resolves variables with the precedence explicit > environment > file.
type source struct {
	getenv func(string) string
	file   *envfile.File // empty when there is no file yet
}

func openSource(path string, getenv func(string) string) (*source, error) {
	f, err := envfile.Read(path) // a missing file reads as empty
	if err != nil {
		return nil, fmt.Errorf("agent: read %s: %w", path, err)
	}
	return &source{getenv: getenv, file: f}, nil
}

// get returns the value of name and where it came from ("flag",
// "environment", "file" or "" when absent).
func (s *source) get(explicit, name string) (string, string) {
	if explicit != "" {
		return explicit, "flag"
	}
	if v := s.getenv(name); v != "" {
		return v, "environment"
	}
	if v, ok := s.file.Get(name); ok && v != "" {
		return v, "file"
	}
	return "", ""
}

// Load reads the agent's credentials: AGENT_UID and AGENT_PRIVATE_JWK are
// required, AGENT_HOSTNAME defaults to DefaultHostname. An absent variable
// gives an error wrapping ErrMissing ("missing AGENT_UID: run `idcli agent
// init` or set AGENT_UID"); a malformed private key one wrapping ErrInvalid.
// Neither ever contains the private key.
func Load(opts LoadOptions) (Credentials, error) {
	opts = opts.withDefaults()
	src, err := openSource(opts.Path, opts.Getenv)
	if err != nil {
		return Credentials{}, err
	}
	if opts.Key.CanSign() {
		return src.credentialsWithKey(opts.UID, opts.Hostname, opts.Key)
	}
	return src.credentials(opts.UID, opts.PrivateJWK, opts.Hostname)
}

// credentialsWithKey resolves the uid and hostname for a key held
// elsewhere than in the credentials file.
func (s *source) credentialsWithKey(uidFlag, hostFlag string, key signer.PrivateKey) (Credentials, error) {
	hostname, err := s.hostname(hostFlag)
	if err != nil {
		return Credentials{}, err
	}
	uid, _ := s.get(uidFlag, EnvUID)
	if err := checkUID(uid); err != nil {
		return Credentials{}, err
	}
	return Credentials{UID: uid, Key: key, Hostname: hostname}, nil
}

// checkNoFileKey refuses to pair a key held elsewhere with a credentials
// file that holds a private JWK of another key: the file would then name
// a key the agent no longer uses.
func (s *source) checkNoFileKey(key signer.PrivateKey) error {
	raw, from := s.get("", EnvPrivateJWK)
	if raw == "" {
		return nil
	}
	fk, err := parsePrivate(raw, from)
	if err != nil {
		return err
	}
	if fk.KeyID() != key.KeyID() {
		return &credError{kind: ErrInvalid, msg: fmt.Sprintf(
			"agent: invalid %s: the %s holds a private key (kid %s) other than the external key (kid %s); remove %s from it to use the external key",
			EnvPrivateJWK, from, fk.KeyID(), key.KeyID(), EnvPrivateJWK)}
	}
	return nil
}

func (s *source) credentials(uidFlag, jwkFlag, hostFlag string) (Credentials, error) {
	hostname, err := s.hostname(hostFlag)
	if err != nil {
		return Credentials{}, err
	}
	uid, _ := s.get(uidFlag, EnvUID)
	if uid == "" {
		return Credentials{}, missingError(EnvUID)
	}
	if err := checkUID(uid); err != nil {
		return Credentials{}, err
	}
	raw, from := s.get(jwkFlag, EnvPrivateJWK)
	if raw == "" {
		return Credentials{}, missingError(EnvPrivateJWK)
	}
	key, err := parsePrivate(raw, from)
	if err != nil {
		return Credentials{}, err
	}
	return Credentials{UID: uid, Key: key, Hostname: hostname}, nil
}

// hostname resolves the service base URL: explicit, AGENT_HOSTNAME, default.
func (s *source) hostname(explicit string) (string, error) {
	h, from := s.get(explicit, EnvHostname)
	if h == "" {
		return DefaultHostname, nil
	}
	u, err := signer.ParseServiceURL(h)
	if err != nil {
		if from != "flag" {
			return "", fmt.Errorf("%w (from %s %s)", err, EnvHostname, from)
		}
		return "", err
	}
	return u.String(), nil
}

// parsePrivate parses a private JWK; errors name the variable and the
// member at fault, never the key text.
func parsePrivate(raw, from string) (signer.PrivateKey, error) {
	key, err := signer.ParsePrivateJWK([]byte(raw))
	if err != nil {
		reason := "not a valid Ed25519 private JWK"
		var je *signer.JWKError
		if errors.As(err, &je) {
			reason = je.Reason
			if je.Member != "" {
				reason = "member " + je.Member + " " + je.Reason
			}
		}
		where := ""
		if from != "" {
			where = " (from " + from + ")"
		}
		return signer.PrivateKey{}, &credError{kind: ErrInvalid, msg: fmt.Sprintf(
			"agent: invalid %s%s: %s; set %s to an Ed25519 private JWK or run `idcli agent init` in a new folder",
			EnvPrivateJWK, where, reason, EnvPrivateJWK)}
	}
	return key, nil
}

// missingError reports an absent variable and how to set it.
func missingError(name string) error {
	return &credError{kind: ErrMissing, msg: fmt.Sprintf("agent: missing %s: run `idcli agent init` or set %s", name, name)}
}

// credError is a credentials error whose message is written for the user and
// which matches ErrMissing or ErrInvalid with errors.Is.
type credError struct {
	kind error
	msg  string
}

func (e *credError) Error() string        { return e.msg }
func (e *credError) Is(target error) bool { return target == e.kind }

// DefaultHostname is the service base URL used when neither an explicit
// hostname nor AGENT_HOSTNAME is configured.
const DefaultHostname = "http://localhost:3000"

// checkUID accepts a uid of the form signer.ValidUID checks (agent- and 24
// lowercase hex characters), which is what agentid and vestauth servers
// assign.
func checkUID(uid string) error {
	if uid == "" {
		return missingError(EnvUID)
	}
	if !signer.ValidUID(uid) {
		return &credError{kind: ErrInvalid, msg: fmt.Sprintf(
			"agent: invalid AGENT_UID %q: want %s followed by 24 lowercase hex characters, such as agent-0123456789abcdef01234567", signer.Truncate(uid), signer.UIDPrefix)}
	}
	return nil
}
