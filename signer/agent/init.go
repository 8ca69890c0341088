package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/agentid/agentid/signer"
)

// InitOptions configure Init.
type InitOptions struct {
	// Dir is the folder holding the .env file. If "", the current directory.
	Dir string
	// Path is the credentials file. If "", Dir/.env.
	Path string
	// Hostname is the service base URL given explicitly (--hostname). If "",
	// AGENT_HOSTNAME (environment, then file), then DefaultHostname. Without
	// a scheme, https:// is assumed.
	Hostname string
	// HTTPClient sends the registration. If nil, a client whose requests
	// time out after DefaultTimeout.
	HTTPClient *http.Client
	// Getenv reads the process environment. If nil, os.Getenv.
	Getenv func(string) string
	// Rand is the source for a new key and the nonce. If nil, crypto/rand.
	Rand io.Reader
	// Now is the signing clock. If nil, time.Now.
	Now func() time.Time
	// Key, when it can sign, is the key to register, held elsewhere than in
	// the credentials file (a PKCS#11 token, a KMS): AGENT_PRIVATE_JWK is
	// then neither read nor written, and a credentials file holding another
	// private key is refused. If zero, the file's key or a new one.
	Key signer.PrivateKey
	// Invite, if set, is the invitation token of a service whose
	// registration needs one (see Client.Invite).
	Invite string
}

// InitResult is what Init did.
type InitResult struct {
	// UID is the agent uid the service assigned (or already had) for the key.
	UID string
	// PublicJWK is the registered public key (no d).
	PublicJWK signer.JWK
	// Path is the credentials file written.
	Path string
	// IsNew is true when the service created the agent, false when the key
	// was already registered.
	IsNew bool
	// Pending is true when the agent waits for the approval of the
	// service's operator (Registration.Pending); its directory is then not
	// signed (the service would refuse): sign it once approved
	// (Client.RefreshDirectory, `idcli agent directory refresh`).
	Pending bool
	// Hostname is the service base URL used.
	Hostname string
	// WellKnownURL is the agent's key directory URL, as the service reported it.
	WellKnownURL string
	// Warning is non-empty when the credentials file lies in a git work tree
	// and is not git-ignored.
	Warning string
	// Directory is the directory signature handed to the service after
	// the registration (zero when that failed: DirectoryError says why).
	Directory DirectorySignature
	// DirectoryError is why the agent's directory could not be signed
	// (a service without directory signatures answers 404), or nil. The
	// agent is registered either way.
	DirectoryError error
}

// Init gives the agent an identity (`idcli agent init`). It reuses the
// private key in AGENT_PRIVATE_JWK (environment, then file) or generates
// one, registers its public key with POST {hostname}/agents signed by that
// key (proof of possession: covers @method, @authority, @path and
// content-digest, no Signature-Agent), and writes AGENT_UID,
// AGENT_PUBLIC_JWK, AGENT_PRIVATE_JWK — and AGENT_HOSTNAME when the service
// is not DefaultHostname — to the credentials file with mode 0600, keeping
// every other line. Registering an already registered key is not an error:
// the result then has IsNew false. Once registered, the agent signs its
// key directory (Client.RefreshDirectory: the agent host is known only
// from the registration's answer) and records the signature's validity
// (AGENT_DIRECTORY_SIGNED_AT, AGENT_DIRECTORY_SIGNED_UNTIL); a failure
// there is reported in DirectoryError, not as Init's error. An agent
// pending the operator's approval (Pending) does not sign it yet. Init holds the
// credentials file's lock (envfile.Lock) from before it reads the file
// until it has written it, waiting for it until ctx is done, at most 90 s.
func Init(ctx context.Context, opts InitOptions) (InitResult, error) {
	lo := LoadOptions{Dir: opts.Dir, Path: opts.Path, Getenv: opts.Getenv}.withDefaults()
	src, unlock, err := openLocked(ctx, lo)
	if err != nil {
		return InitResult{}, err
	}
	defer unlock()
	hostname, err := src.hostname(opts.Hostname)
	if err != nil {
		return InitResult{}, err
	}
	key := opts.Key
	if key.CanSign() {
		err = src.checkNoFileKey(key)
	} else {
		key, err = src.reuseOrGenerate(opts.Rand)
	}
	if err != nil {
		return InitResult{}, err
	}
	cl := &Client{HTTPClient: opts.HTTPClient, Now: opts.Now, Rand: opts.Rand, Invite: opts.Invite}
	reg, err := cl.Register(ctx, hostname, key)
	if err != nil {
		return InitResult{}, err
	}
	vars := keyVars(reg.UID, key)
	if hostname != DefaultHostname {
		vars = append(vars, [2]string{EnvHostname, hostname})
	}
	var dir DirectorySignature
	var dirErr error
	if !reg.Pending {
		dir, dirErr = cl.RefreshDirectory(ctx, hostname, reg.UID, key)
		if dirErr == nil {
			vars = append(vars, directoryVars(dir.Created, dir.Expires)...)
		}
	}
	warn, err := writeCreds(ctx, src.file, lo.Path, vars)
	if err != nil {
		return InitResult{}, err
	}
	return InitResult{
		Directory:      dir,
		DirectoryError: dirErr,
		UID:            reg.UID,
		PublicJWK:      reg.PublicJWK,
		Path:           lo.Path,
		IsNew:          reg.IsNew,
		Pending:        reg.Pending,
		Hostname:       hostname,
		WellKnownURL:   reg.WellKnownURL,
		Warning:        warn,
	}, nil
}

// reuseOrGenerate returns the configured private key or a new one. When the
// environment and the file hold different keys it refuses, rather than
// overwrite a private key in the file.
func (s *source) reuseOrGenerate(r io.Reader) (signer.PrivateKey, error) {
	raw, from := s.get("", EnvPrivateJWK)
	if raw == "" {
		return signer.GenerateKey(r)
	}
	key, err := parsePrivate(raw, from)
	if err != nil {
		return signer.PrivateKey{}, err
	}
	if from == "environment" {
		if fv, ok := s.file.Get(EnvPrivateJWK); ok && fv != "" {
			fk, err := parsePrivate(fv, "file")
			if err != nil {
				return signer.PrivateKey{}, err
			}
			if fk.KeyID() != key.KeyID() {
				return signer.PrivateKey{}, &credError{kind: ErrInvalid, msg: fmt.Sprintf(
					"agent: invalid %s: the environment's key (kid %s) differs from the credentials file's (kid %s); unset one of them",
					EnvPrivateJWK, key.KeyID(), fk.KeyID())}
			}
		}
	}
	return key, nil
}

// RotateOptions configure Rotate.
type RotateOptions struct {
	// Dir is the folder holding the .env file. If "", the current directory.
	Dir string
	// Path is the credentials file. If "", Dir/.env.
	Path string
	// UID, PrivateJWK and Hostname override the variables when not "".
	UID, PrivateJWK, Hostname string
	// Tag is the tag of the current key's signature. If "", web-bot-auth.
	Tag string
	// Nonce is the nonce of the current key's signature. If "", random.
	Nonce string
	// HTTPClient sends the request. If nil, a client whose requests time
	// out after DefaultTimeout.
	HTTPClient *http.Client
	// Getenv reads the process environment. If nil, os.Getenv.
	Getenv func(string) string
	// Rand is the source for the new key and the nonces. If nil, crypto/rand.
	Rand io.Reader
	// Now is the signing clock. If nil, time.Now.
	Now func() time.Time
	// Key, when it can sign, is the current key, held elsewhere than in the
	// credentials file (a PKCS#11 token, a KMS): AGENT_PRIVATE_JWK is then
	// not read, and a credentials file holding another private key is
	// refused. If zero, AGENT_PRIVATE_JWK.
	Key signer.PrivateKey
	// Next, when it can sign, is the new key, made by the caller (generated
	// on the token). If it is not Exportable, AGENT_PRIVATE_JWK is not
	// written. If zero, a new key is generated from Rand and written.
	Next signer.PrivateKey
}

// RotateResult is what Rotate did.
type RotateResult struct {
	// UID is the agent uid, unchanged.
	UID string
	// PublicJWK is the new public key (no d).
	PublicJWK signer.JWK
	// Path is the credentials file written.
	Path string
	// WellKnownURL is the agent's key directory URL, as the service reported it.
	WellKnownURL string
	// Warning is non-empty when the credentials file lies in a git work tree
	// and is not git-ignored.
	Warning string
	// DirectorySignedUntil is when the directory signature handed over
	// with the rotation expires.
	DirectorySignedUntil time.Time
}

// Rotate replaces the agent's key and keeps its uid (`idcli agent
// rotate`). It generates a key and sends PUT
// {hostname}/agents/{uid}/keys with body {"public_jwk": new}, signed twice:
// sig1 by the current key (covers @method, @authority, @path,
// content-digest and "signature-agent";key="sig1", with Signature-Agent
// naming the agent) and sig2 by the new key (tag agentid-key-possession,
// same components without signature-agent). On success it rewrites
// AGENT_PUBLIC_JWK and AGENT_PRIVATE_JWK (and AGENT_UID, unchanged) in the
// credentials file. The credentials file is checked to be writable before
// the request, since the new private key exists nowhere else. Rotate holds
// the credentials file's lock (envfile.Lock) from before it reads the file
// until it has written the new key, waiting for it until ctx is done (at
// most 90 s): two rotations run one after the other, and a directory
// refresh that signed with the old key finds the new one when it comes to
// record its outcome and writes nothing (ErrCredentialsChanged).
func Rotate(ctx context.Context, opts RotateOptions) (RotateResult, error) {
	lo := LoadOptions{Dir: opts.Dir, Path: opts.Path, Getenv: opts.Getenv}.withDefaults()
	src, unlock, err := openLocked(ctx, lo)
	if err != nil {
		return RotateResult{}, err
	}
	defer unlock()
	var creds Credentials
	if opts.Key.CanSign() {
		if creds, err = src.credentialsWithKey(opts.UID, opts.Hostname, opts.Key); err == nil {
			err = src.checkNoFileKey(opts.Key)
		}
	} else {
		creds, err = src.credentials(opts.UID, opts.PrivateJWK, opts.Hostname)
	}
	if err != nil {
		return RotateResult{}, err
	}
	if err := checkWritable(lo.Path); err != nil {
		return RotateResult{}, err
	}
	next := opts.Next
	if !next.CanSign() {
		if next, err = signer.GenerateKey(opts.Rand); err != nil {
			return RotateResult{}, err
		}
	}
	cl := &Client{HTTPClient: opts.HTTPClient, Tag: opts.Tag, Nonce: opts.Nonce, Now: opts.Now, Rand: opts.Rand}
	reg, err := cl.RotateKey(ctx, creds.Hostname, creds.UID, creds.Key, next)
	if err != nil {
		return RotateResult{}, err
	}
	vars := append(keyVars(creds.UID, next), directoryVars(reg.DirectorySignedAt, reg.DirectorySignedUntil)...)
	warn, err := writeCreds(ctx, src.file, lo.Path, vars)
	if err != nil {
		return RotateResult{}, err
	}
	return RotateResult{UID: reg.UID, PublicJWK: reg.PublicJWK, Path: lo.Path, WellKnownURL: reg.WellKnownURL, Warning: warn,
		DirectorySignedUntil: reg.DirectorySignedUntil}, nil
}

// checkWritable fails early when path (or, if absent, its folder) cannot be
// written.
func checkWritable(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err == nil {
		return f.Close()
	}
	if !os.IsNotExist(err) {
		return fmt.Errorf("agent: %s is not writable: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".agentid-write-check-*")
	if err != nil {
		return fmt.Errorf("agent: cannot create %s: %w", path, err)
	}
	name := tmp.Name()
	tmp.Close()
	return os.Remove(name)
}

// Headers returns the three signature headers for a request to rawURL with
// method, under the default profile: it covers @authority only,
// Signature-Agent sig1="<scheme>://<uid>.<service host>". tag "" means
// web-bot-auth; nonce "" means 64 random bytes (base64url).
func Headers(method, rawURL string, creds Credentials, tag, nonce string) (signer.SignatureHeaders, error) {
	opts, err := creds.Options()
	if err != nil {
		return signer.SignatureHeaders{}, err
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return signer.SignatureHeaders{}, fmt.Errorf("agent: invalid url %q: want a full URL with http(s) scheme and host", signer.Truncate(rawURL))
	}
	opts.Tag, opts.Nonce = tag, nonce
	h, err := signer.Headers(method, rawURL, creds.Key, opts)
	if err != nil {
		return signer.SignatureHeaders{}, fmt.Errorf("agent: headers: %w", err)
	}
	return h, nil
}
