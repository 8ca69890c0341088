package agent

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/envfile"
)

// gitWarning returns a warning when path lies inside a git work tree and is
// not ignored there. Without git, outside a work tree or on any git error it
// returns "".
func gitWarning(ctx context.Context, path string) string {
	git, err := exec.LookPath("git")
	if err != nil {
		return ""
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	dir, base := filepath.Dir(abs), filepath.Base(abs)
	out, err := exec.CommandContext(ctx, git, "-C", dir, "rev-parse", "--is-inside-work-tree").Output()
	if err != nil || strings.TrimSpace(string(out)) != "true" {
		return ""
	}
	err = exec.CommandContext(ctx, git, "-C", dir, "check-ignore", "-q", "--", base).Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return fmt.Sprintf("warning: %s is not git-ignored; add %s to .gitignore so %s is never committed",
			path, base, EnvPrivateJWK)
	}
	return ""
}

// keyVars are the credentials-file variables of the agent uid and its key:
// AGENT_UID, AGENT_PUBLIC_JWK and, when the key is Exportable (not held on
// a token), AGENT_PRIVATE_JWK.
func keyVars(uid string, key signer.PrivateKey) [][2]string {
	vars := [][2]string{
		{EnvUID, uid},
		{EnvPublicJWK, string(key.Public.JWK.MarshalPublic())},
	}
	if key.Exportable() {
		vars = append(vars, [2]string{EnvPrivateJWK, string(key.MarshalPrivateJWK())})
	}
	return vars
}

// credsLockWait bounds how long Init and Rotate wait for the credentials
// file's lock: longer than an init holding it through its two requests
// (DefaultTimeout each), short enough that a holder stuck for good is
// reported rather than waited for.
const credsLockWait = 3 * DefaultTimeout

// lockCreds takes the lock of the credentials file at path
// (envfile.Lock), waiting for it until ctx is done, at most credsLockWait.
func lockCreds(ctx context.Context, path string) (unlock func(), err error) {
	ctx, cancel := context.WithTimeout(ctx, credsLockWait)
	defer cancel()
	unlock, err = envfile.Lock(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return unlock, nil
}

// openLocked takes the lock of the credentials file lo names (lockCreds)
// and reads the file under it; the caller calls unlock once it has written
// the file.
func openLocked(ctx context.Context, lo LoadOptions) (src *source, unlock func(), err error) {
	unlock, err = lockCreds(ctx, lo.Path)
	if err != nil {
		return nil, nil, err
	}
	if src, err = openSource(lo.Path, lo.Getenv); err != nil {
		unlock()
		return nil, nil, err
	}
	return src, unlock, nil
}

// writeCreds sets vars in the credentials file f (keeping every other
// line), writes it atomically with mode 0600 and returns a git-ignore
// warning, if any. The caller holds the file's lock and read f under it.
func writeCreds(ctx context.Context, f *envfile.File, path string, vars [][2]string) (string, error) {
	for _, kv := range vars {
		switch kv[0] {
		case EnvUID, EnvHostname:
			f.SetQuoted(kv[0], kv[1]) // a quoted string, as vestauth writes them
		default:
			f.Set(kv[0], kv[1])
		}
	}
	if err := f.Write(); err != nil { // atomic, mode 0600
		return "", fmt.Errorf("agent: write %s: %w", path, err)
	}
	return gitWarning(ctx, path), nil
}
