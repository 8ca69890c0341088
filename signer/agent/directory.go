package agent

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/envfile"
)

// DefaultDirectoryValidity is how long the directory signatures an agent
// makes are valid. The agent refreshes them past half of it (RefreshIfDue).
const DefaultDirectoryValidity = 7 * 24 * time.Hour

// Names of the credential variables recording the agent's last directory
// signature: its created and expires times, in Unix seconds. An agent
// without them (made by vestauth, or before directory signatures) is never
// refreshed on its own.
const (
	EnvDirectorySignedAt    = "AGENT_DIRECTORY_SIGNED_AT"
	EnvDirectorySignedUntil = "AGENT_DIRECTORY_SIGNED_UNTIL"
)

// DirectorySignature is the directory signature the service stored.
type DirectorySignature struct {
	// UID is the agent whose directory is signed.
	UID string
	// WellKnownURL is the agent's key directory URL.
	WellKnownURL string
	// KeyID is the signing key's thumbprint.
	KeyID string
	// Created and Expires bound its validity: past Expires the directory is
	// served unsigned.
	Created, Expires time.Time
}

// directorySignatureJSON is one member of directory_signatures.
type directorySignatureJSON struct {
	Input     string `json:"signature_input"`
	Signature string `json:"signature"`
}

func (c *Client) directoryValidity() time.Duration {
	if c.DirectoryValidity > 0 {
		return c.DirectoryValidity
	}
	return DefaultDirectoryValidity
}

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// signOwnDirectory signs the key directory of agent uid at svc as the
// service will serve it once key is the agent's only key: the body holds
// key's public JWK as the service stores it, the authority is the agent
// host.
func (c *Client) signOwnDirectory(svc signer.ServiceURL, uid string, key signer.PrivateKey) (directorySignatureJSON, time.Time, time.Time, error) {
	pk, err := signer.ParsePublicJWK(key.Public.JWK.MarshalPublic())
	if err != nil {
		return directorySignatureJSON{}, time.Time{}, time.Time{}, fmt.Errorf("agent: directory signature: %w", err)
	}
	created := c.now().Truncate(time.Second)
	expires := created.Add(c.directoryValidity())
	ds, err := signer.SignDirectory(key, svc.Scheme, uid+"."+svc.Host, signer.DirectoryBody([]signer.JWK{pk.JWK}), created, expires)
	if err != nil {
		return directorySignatureJSON{}, time.Time{}, time.Time{}, fmt.Errorf("agent: directory signature: %w", err)
	}
	return directorySignatureJSON{Input: ds.Input, Signature: base64.StdEncoding.EncodeToString(ds.Value)}, created, expires, nil
}

// RefreshDirectory signs agent uid's key directory with key (its only
// key) and hands the signature to the service at serviceURL: PUT
// {serviceURL}/agents/{uid}/directory-signatures with body
// {"directory_signatures":[…]}, signed by key as a rotation's sig1 is
// (covering @method, @authority, @path, content-digest and
// "signature-agent";key="sig1"). The signature covers "@authority";req
// (the agent host) and the Content-Digest of the directory body, with tag
// http-message-signatures-directory and keyid the key's thumbprint, and is
// valid for DirectoryValidity.
func (c *Client) RefreshDirectory(ctx context.Context, serviceURL, uid string, key signer.PrivateKey) (DirectorySignature, error) {
	svc, err := signer.ParseServiceURL(serviceURL)
	if err != nil {
		return DirectorySignature{}, err
	}
	if err := checkUID(uid); err != nil {
		return DirectorySignature{}, err
	}
	ds, created, expires, err := c.signOwnDirectory(svc, uid, key)
	if err != nil {
		return DirectorySignature{}, err
	}
	body := jsonBody(map[string]any{"directory_signatures": []directorySignatureJSON{ds}})
	req, err := newJSONRequest(ctx, http.MethodPut, svc.String()+"/agents/"+url.PathEscape(uid)+"/directory-signatures", body)
	if err != nil {
		return DirectorySignature{}, err
	}
	if err := c.signAsAgent(req, key, svc, uid); err != nil {
		return DirectorySignature{}, fmt.Errorf("agent: sign directory refresh: %w", err)
	}
	ar, _, err := send(c.HTTPClient, req, http.StatusOK)
	if err != nil {
		return DirectorySignature{}, err
	}
	if ar.UID != uid {
		return DirectorySignature{}, fmt.Errorf("agent: the service answered for uid %s, want %s", ar.UID, uid)
	}
	if len(ar.DirectorySignatures) != 1 || ar.DirectorySignatures[0].KeyID != key.Public.Thumbprint {
		return DirectorySignature{}, fmt.Errorf("agent: the service did not store the directory signature of key %s", key.Public.Thumbprint)
	}
	return DirectorySignature{UID: uid, WellKnownURL: ar.WellKnownURL, KeyID: key.Public.Thumbprint, Created: created, Expires: expires}, nil
}

// directoryVars are the credentials-file variables recording a directory
// signature's validity.
func directoryVars(created, expires time.Time) [][2]string {
	return [][2]string{
		{EnvDirectorySignedAt, strconv.FormatInt(created.Unix(), 10)},
		{EnvDirectorySignedUntil, strconv.FormatInt(expires.Unix(), 10)},
	}
}

// directoryState reads the recorded validity of the agent's directory
// signature from the credentials file; ok is false when none is recorded
// (or the record is not two Unix times in order).
func directoryState(f *envfile.File) (created, expires time.Time, ok bool) {
	a, _ := f.Get(EnvDirectorySignedAt)
	b, _ := f.Get(EnvDirectorySignedUntil)
	at, err1 := strconv.ParseInt(a, 10, 64)
	until, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || until <= at {
		return time.Time{}, time.Time{}, false
	}
	return time.Unix(at, 0), time.Unix(until, 0), true
}

// RefreshDue reports whether a directory signature valid from created to
// expires should be refreshed at now: once half its validity has passed.
func RefreshDue(created, expires, now time.Time) bool {
	return !now.Before(refreshAt(created, expires))
}

// refreshAt is when a directory signature valid from created to expires
// falls due for a refresh (RefreshDue): half way through its validity.
func refreshAt(created, expires time.Time) time.Time {
	return created.Add(expires.Sub(created) / 2)
}

// RefreshOptions configure Refresh and RefreshIfDue.
type RefreshOptions struct {
	// Dir is the folder holding the .env file. If "", the current directory.
	Dir string
	// Path is the credentials file. If "", Dir/.env.
	Path string
	// UID, PrivateJWK and Hostname override the variables when not "".
	UID, PrivateJWK, Hostname string
	// Key, when it can sign, is the agent's key, held elsewhere than in the
	// credentials file. If zero, AGENT_PRIVATE_JWK.
	Key signer.PrivateKey
	// Validity is how long the signature is valid. If 0,
	// DefaultDirectoryValidity.
	Validity time.Duration
	// HTTPClient sends the request. If nil, a client whose requests time
	// out after DefaultTimeout.
	HTTPClient *http.Client
	// Getenv reads the process environment. If nil, os.Getenv.
	Getenv func(string) string
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
}

// loadOptions are the LoadOptions that locate o's credentials file.
func (o RefreshOptions) loadOptions() LoadOptions {
	return LoadOptions{Dir: o.Dir, Path: o.Path, Getenv: o.Getenv}.withDefaults()
}

// now reads o's clock.
func (o RefreshOptions) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// RefreshResult is what Refresh did.
type RefreshResult struct {
	DirectorySignature
	// Path is the credentials file written.
	Path string
}

// Refresh signs the agent's key directory afresh and hands the signature
// to the service (`idcli agent directory refresh`; see
// Client.RefreshDirectory), then records its validity in the credentials
// file (AGENT_DIRECTORY_SIGNED_AT, AGENT_DIRECTORY_SIGNED_UNTIL).
func Refresh(ctx context.Context, opts RefreshOptions) (RefreshResult, error) {
	lo := opts.loadOptions()
	src, err := openSource(lo.Path, lo.Getenv)
	if err != nil {
		return RefreshResult{}, err
	}
	return refresh(ctx, opts, src, lo.Path)
}

func refresh(ctx context.Context, opts RefreshOptions, src *source, path string) (RefreshResult, error) {
	var creds Credentials
	var err error
	if opts.Key.CanSign() {
		creds, err = src.credentialsWithKey(opts.UID, opts.Hostname, opts.Key)
	} else {
		creds, err = src.credentials(opts.UID, opts.PrivateJWK, opts.Hostname)
	}
	if err != nil {
		return RefreshResult{}, err
	}
	cl := &Client{HTTPClient: opts.HTTPClient, Now: opts.Now, DirectoryValidity: opts.Validity}
	ds, err := cl.RefreshDirectory(ctx, creds.Hostname, creds.UID, creds.Key)
	if err != nil {
		return RefreshResult{}, err
	}
	if _, err := writeCreds(ctx, src.file, path, directoryVars(ds.Created, ds.Expires)); err != nil {
		return RefreshResult{}, err
	}
	return RefreshResult{DirectorySignature: ds, Path: path}, nil
}

// RefreshIfDue refreshes the agent's directory signature (as Refresh does)
// when the one recorded in the credentials file has passed half its
// validity. It does nothing, and reports false, when none is recorded: an
// agent whose directory was never signed (made by vestauth, or by a
// service without directory signatures) is left as it is. Signed calls
// run it first (`idcli agent curl`), so a directory in use stays signed.
func RefreshIfDue(ctx context.Context, opts RefreshOptions) (RefreshResult, bool, error) {
	lo := opts.loadOptions()
	src, err := openSource(lo.Path, lo.Getenv)
	if err != nil {
		return RefreshResult{}, false, err
	}
	created, expires, ok := directoryState(src.file)
	if !ok || !RefreshDue(created, expires, opts.now()) {
		return RefreshResult{}, false, nil
	}
	res, err := refresh(ctx, opts, src, lo.Path)
	return res, err == nil, err
}

// RefreshTransport is an http.RoundTripper that keeps the agent's directory
// signature fresh on the agent's signed calls: before passing a request to
// Base it runs RefreshIfDue with Options when the signature recorded in
// the credentials file is past half its validity. The record is read once
// and again only after a refresh attempt, so a call costs no file access
// until the signature is due; a failed refresh is reported to OnError and
// tried again after RetryAfter, and the call goes on either way. It is
// safe for concurrent use; one refresh runs at a time.
//
//	creds, _ := agent.Load(agent.LoadOptions{})
//	client := &http.Client{Transport: &agent.RefreshTransport{Base: creds.Transport(nil)}}
type RefreshTransport struct {
	// Base sends the requests (it signs them: Credentials.Transport). If
	// nil, http.DefaultTransport.
	Base http.RoundTripper
	// Options locate the credentials and the service, as for Refresh.
	Options RefreshOptions
	// OnError, if set, receives each failed refresh.
	OnError func(error)
	// RetryAfter is how long a failed refresh waits before the next try.
	// If 0, one minute.
	RetryAfter time.Duration

	mu     sync.Mutex
	loaded bool
	due    time.Time // zero: nothing recorded, never due
}

// RoundTrip implements http.RoundTripper.
func (t *RefreshTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.refreshIfDue(req.Context())
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(req)
}

func (t *RefreshTransport) refreshIfDue(ctx context.Context) {
	now := t.Options.now
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.loaded {
		t.loaded = true
		t.due = t.readDue()
	}
	if t.due.IsZero() || now().Before(t.due) {
		return
	}
	if _, _, err := RefreshIfDue(ctx, t.Options); err != nil {
		if t.OnError != nil {
			t.OnError(err)
		}
		retry := t.RetryAfter
		if retry <= 0 {
			retry = time.Minute
		}
		t.due = now().Add(retry)
		return
	}
	t.due = t.readDue()
}

// readDue returns when the recorded signature is due for a refresh (zero
// when none is recorded or the file cannot be read).
func (t *RefreshTransport) readDue() time.Time {
	f, err := envfile.Read(t.Options.loadOptions().Path)
	if err != nil {
		return time.Time{}
	}
	created, expires, ok := directoryState(f)
	if !ok {
		return time.Time{}
	}
	return refreshAt(created, expires)
}
