package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/envfile"
)

// Names of the credential variables recording failed directory refreshes:
// how many failed in a row, and when the last one failed (Unix seconds).
// A successful refresh removes them.
const (
	EnvDirectoryRefreshFailures = "AGENT_DIRECTORY_REFRESH_FAILURES"
	EnvDirectoryRefreshFailedAt = "AGENT_DIRECTORY_REFRESH_FAILED_AT"
)

// RefreshBackoffMin and RefreshBackoffMax bound the wait RefreshIfDue
// leaves after a failed refresh before it tries again: RefreshBackoffMin
// after the first failure in a row, doubling with each further one, never
// more than RefreshBackoffMax.
const (
	RefreshBackoffMin = time.Minute
	RefreshBackoffMax = time.Hour
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

// RefreshError is a failed directory refresh (Refresh, RefreshIfDue),
// with the backoff it recorded in the credentials file.
type RefreshError struct {
	// Err is why the refresh failed.
	Err error
	// Failures is how many refreshes in a row have failed, this one
	// included; 0 when the failure could not be recorded.
	Failures int
	// RetryAt is the earliest time RefreshIfDue tries again; zero when
	// the failure could not be recorded.
	RetryAt time.Time
}

func (e *RefreshError) Error() string {
	if e.Failures == 0 {
		return e.Err.Error()
	}
	return fmt.Sprintf("%v (failed refresh %d in a row; the next is put off until %s)", e.Err, e.Failures, e.RetryAt.UTC().Format(time.RFC3339))
}

func (e *RefreshError) Unwrap() error { return e.Err }

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
// file (AGENT_DIRECTORY_SIGNED_AT, AGENT_DIRECTORY_SIGNED_UNTIL) and
// clears any failures recorded. A failure is recorded instead
// (AGENT_DIRECTORY_REFRESH_FAILURES, AGENT_DIRECTORY_REFRESH_FAILED_AT)
// and returned as a *RefreshError, so that RefreshIfDue backs off.
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
		return RefreshResult{}, recordFailure(ctx, opts.now(), path, creds, err)
	}
	err = record(ctx, path, creds, func(f *envfile.File) {
		for _, kv := range directoryVars(ds.Created, ds.Expires) {
			f.Set(kv[0], kv[1])
		}
		f.Delete(EnvDirectoryRefreshFailures)
		f.Delete(EnvDirectoryRefreshFailedAt)
	})
	if errors.Is(err, ErrCredentialsChanged) {
		return RefreshResult{}, err
	}
	if err != nil {
		return RefreshResult{}, fmt.Errorf("agent: the directory signature was handed over but not recorded: %w", err)
	}
	return RefreshResult{DirectorySignature: ds, Path: path}, nil
}

// recordFailure records a failed refresh in the credentials file and
// returns it as a *RefreshError.
func recordFailure(ctx context.Context, now time.Time, path string, creds Credentials, cause error) error {
	re := &RefreshError{Err: cause}
	err := record(ctx, path, creds, func(f *envfile.File) {
		n, _, _ := backoffState(f, now)
		n++
		f.Set(EnvDirectoryRefreshFailures, strconv.Itoa(n))
		f.Set(EnvDirectoryRefreshFailedAt, strconv.FormatInt(now.Unix(), 10))
		re.Failures, re.RetryAt = n, now.Add(refreshBackoff(n))
	})
	if err != nil {
		re.Err = fmt.Errorf("%w (not recorded: %w)", cause, err)
	}
	return re
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

// refreshBackoff is the wait after the n-th failed refresh in a row:
// RefreshBackoffMin doubled n-1 times, at most RefreshBackoffMax.
func refreshBackoff(n int) time.Duration {
	d := RefreshBackoffMin
	for i := 1; i < n && d < RefreshBackoffMax; i++ {
		d *= 2
	}
	return min(d, RefreshBackoffMax)
}

// backoffState reads the failed refreshes recorded in f: how many in a
// row and when the next may be tried. ok is false when none is recorded,
// the record is not a positive count and a Unix time, or it failed after
// now (a clock set back, an edited file): such a record is ignored, so it
// can never put the refresh off for longer than RefreshBackoffMax.
func backoffState(f *envfile.File, now time.Time) (failures int, retryAt time.Time, ok bool) {
	a, _ := f.Get(EnvDirectoryRefreshFailures)
	b, _ := f.Get(EnvDirectoryRefreshFailedAt)
	n, err1 := strconv.Atoi(a)
	at, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || n < 1 {
		return 0, time.Time{}, false
	}
	failed := time.Unix(at, 0)
	if failed.After(now) {
		return 0, time.Time{}, false
	}
	return n, failed.Add(refreshBackoff(n)), true
}

// dueAt returns when the directory signature recorded in f falls due for
// a refresh: half way through its validity, or once the backoff after
// failed refreshes has passed, whichever is later. ok is false when no
// signature is recorded (never due).
func dueAt(f *envfile.File, now time.Time) (time.Time, bool) {
	created, expires, ok := directoryState(f)
	if !ok {
		return time.Time{}, false
	}
	due := refreshAt(created, expires)
	if _, retry, ok := backoffState(f, now); ok && retry.After(due) {
		due = retry
	}
	return due, true
}

// RefreshIfDue refreshes the agent's directory signature (as Refresh does)
// when the one recorded in the credentials file has passed half its
// validity, unless a failed refresh was recorded less than its backoff ago
// (RefreshBackoffMin, doubling per failure in a row, at most
// RefreshBackoffMax). It does nothing, and reports false, when none is
// recorded: an agent whose directory was never signed (made by vestauth,
// or by a service without directory signatures) is left as it is.
func RefreshIfDue(ctx context.Context, opts RefreshOptions) (RefreshResult, bool, error) {
	lo := opts.loadOptions()
	src, err := openSource(lo.Path, lo.Getenv)
	if err != nil {
		return RefreshResult{}, false, err
	}
	now := opts.now()
	if due, ok := dueAt(src.file, now); !ok || now.Before(due) {
		return RefreshResult{}, false, nil
	}
	res, err := refresh(ctx, opts, src, lo.Path)
	return res, err == nil, err
}
