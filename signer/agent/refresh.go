package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/envfile"
)

// recordWait bounds how long a refresh waits for the credentials file's
// lock to record its outcome (a rotation or an init may hold it through
// their request). Past it the outcome is not recorded: the next signed
// call finds the refresh due again.
const recordWait = 2 * time.Second

// ErrCredentialsChanged is wrapped by the error of a refresh whose
// credentials file, when the refresh came to record its outcome, named
// another agent or held another key than the one that signed (a rotation
// or an init landed meanwhile). The refresh then writes nothing: the file
// stays as the rotation left it.
var ErrCredentialsChanged = errors.New("agent: the credentials file changed during the refresh")

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
//
// The request is made without the credentials file's lock; the outcome is
// recorded under it (envfile.Update), in the file as it is then, and only
// while it still names the agent and the key that signed: otherwise (a
// rotation landed meanwhile) nothing is written and the error wraps
// ErrCredentialsChanged. The lock is awaited for at most 2 s.
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
	err = record(ctx, path, creds, func(f *envfile.File) {
		for _, kv := range directoryVars(ds.Created, ds.Expires) {
			f.Set(kv[0], kv[1])
		}
	})
	if errors.Is(err, ErrCredentialsChanged) {
		return RefreshResult{}, err
	}
	if err != nil {
		return RefreshResult{}, fmt.Errorf("agent: the directory signature was handed over but not recorded: %w", err)
	}
	return RefreshResult{DirectorySignature: ds, Path: path}, nil
}

// record edits the credentials file at path under its lock, waiting for
// the lock at most recordWait (even once ctx is done: the outcome of a
// request already made is worth recording), while the file still names
// the agent and key of creds.
func record(ctx context.Context, path string, creds Credentials, edit func(*envfile.File)) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordWait)
	defer cancel()
	return envfile.Update(ctx, path, func(f *envfile.File) (bool, error) {
		if err := checkSameAgent(f, path, creds); err != nil {
			return false, err
		}
		edit(f)
		return true, nil
	})
}

// checkSameAgent fails, wrapping ErrCredentialsChanged, when the
// credentials file f names an agent other than creds.UID or holds a key
// other than creds.Key (its private JWK or, for a key held elsewhere, its
// public JWK). A file that names neither (the credentials came from the
// environment or flags) passes.
func checkSameAgent(f *envfile.File, path string, creds Credentials) error {
	if uid, _ := f.Get(EnvUID); uid != "" && uid != creds.UID {
		return fmt.Errorf("%w: %s now names agent %s, not %s; nothing was written", ErrCredentialsChanged, path, signer.Truncate(uid), creds.UID)
	}
	want := creds.Key.Public.Thumbprint
	got, name := "", ""
	if raw, _ := f.Get(EnvPrivateJWK); raw != "" {
		name = EnvPrivateJWK
		if k, err := signer.ParsePrivateJWK([]byte(raw)); err == nil {
			got = k.Public.Thumbprint
		}
	} else if raw, _ := f.Get(EnvPublicJWK); raw != "" {
		name = EnvPublicJWK
		if k, err := signer.ParsePublicJWK([]byte(raw)); err == nil {
			got = k.Thumbprint
		}
	}
	switch {
	case name == "" || got == want:
		return nil
	case got == "":
		return fmt.Errorf("%w: %s in %s is no longer a valid key; nothing was written", ErrCredentialsChanged, name, path)
	}
	return fmt.Errorf("%w: %s now holds key %s, not %s which signed the refresh (a rotation landed meanwhile?); nothing was written", ErrCredentialsChanged, path, got, want)
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
