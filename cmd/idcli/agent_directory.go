package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/hint"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// newAgentDirectoryCmd is the group `idcli agent directory`.
func newAgentDirectoryCmd(env *cliEnv) *ffcli.Command {
	return newGroupCmd(env, "idcli agent directory", "idcli agent directory <refresh> [flags]",
		"sign this agent's key directory (the service serves the signature)",
		"The service holds no private key: the agent signs its own directory response\n"+
			"(tag http-message-signatures-directory, keyid = thumbprint, covering\n"+
			"\"@authority\";req and content-digest) and hands the signature over. init and\n"+
			"rotate do it; agent curl refreshes it past half its validity, in the\n"+
			"background of its call (waiting at most 2s after it), and after a failed\n"+
			"refresh waits 1 min, doubling per failure, at most 1 h, before the next.",
		newAgentDirectoryRefreshCmd(env))
}

// directoryJSON is the --json output of `idcli agent directory refresh`.
type directoryJSON struct {
	UID          string    `json:"uid"`
	KeyID        string    `json:"keyid"`
	WellKnownURL string    `json:"well_known_url"`
	Created      time.Time `json:"created"`
	Expires      time.Time `json:"expires"`
	Path         string    `json:"path"`
}

// newAgentDirectoryRefreshCmd is `idcli agent directory refresh`.
func newAgentDirectoryRefreshCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli agent directory refresh", env)
	uid := fs.String("uid", "", "agent uid (default: AGENT_UID)")
	privateJWK := fs.String("private-jwk", "", "private JWK as JSON (default: AGENT_PRIVATE_JWK)")
	hostname := fs.String("hostname", "", "service base URL (default: AGENT_HOSTNAME, then "+agent.DefaultHostname+")")
	validity := fs.Duration("validity", agent.DefaultDirectoryValidity, "how long the signature is valid (the service accepts at most 744h)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	p11URI := pkcs11URIFlag(fs)
	return &ffcli.Command{
		Name:       "refresh",
		ShortUsage: "idcli agent directory refresh [--uid U] [--private-jwk JWK] [--hostname H] [--validity D] [--pkcs11-uri URI] [--json]",
		ShortHelp:  "sign this agent's key directory afresh and hand the signature to the service",
		LongHelp:   `With --json: {"uid","keyid","well_known_url","created","expires","path"}.`,
		FlagSet:    fs,
		Exec: func(ctx context.Context, args []string) error {
			if _, err := env.parseInterspersed(fs, args, -1); err != nil {
				return err
			}
			if *validity <= 0 {
				return fmt.Errorf("agent directory refresh: --validity %v: want a positive duration such as 168h", *validity)
			}
			tk, err := env.openTokenKey(*p11URI, false)
			if err != nil {
				return err
			}
			defer tk.Close()
			res, err := agent.Refresh(ctx, agent.RefreshOptions{
				Key:        tk.Signing(),
				Dir:        env.Dir,
				UID:        *uid,
				PrivateJWK: *privateJWK,
				Hostname:   *hostname,
				Validity:   *validity,
				Getenv:     env.Getenv,
				HTTPClient: &http.Client{Timeout: agentHTTPTimeout},
			})
			if err != nil {
				return hint.With(err, serviceHint(agentHostname(env, *hostname), err))
			}
			if *asJSON {
				return writeJSON(env.Stdout, directoryJSON{UID: res.UID, KeyID: res.KeyID, WellKnownURL: res.WellKnownURL,
					Created: res.Created.UTC(), Expires: res.Expires.UTC(), Path: envDisplay(env, res.Path)}, false)
			}
			fmt.Fprintf(env.Stdout, "✔ directory signed (%s/AGENT_UID=%s) until %s\n", envDisplay(env, res.Path), res.UID, res.Expires.UTC().Format(time.RFC3339))
			fmt.Fprintf(env.Stdout, "⮕ check it: [idcli directory check %s]\n", res.WellKnownURL)
			return nil
		},
	}
}

// curlRefreshGrace is how long `idcli agent curl` waits, once its call is
// done, for a directory refresh still running; past it the refresh is
// abandoned and recorded as failed, so the next runs back off.
const curlRefreshGrace = 2 * time.Second

// curlRefresh is the agent.RefreshTransport of `idcli agent curl`: a due
// directory refresh runs in the background of the call.
type curlRefresh struct {
	*agent.RefreshTransport
	env       *cliEnv
	abandoned atomic.Bool
}

// newCurlRefresh wraps tr (the signing transport) in a RefreshTransport
// for the agent's credentials in env's folder, key held elsewhere when it
// can sign.
func newCurlRefresh(env *cliEnv, tr http.RoundTripper, key signer.PrivateKey) *curlRefresh {
	c := &curlRefresh{env: env}
	c.RefreshTransport = &agent.RefreshTransport{
		Base: tr,
		Options: agent.RefreshOptions{Key: key, Dir: env.Dir, Getenv: env.Getenv,
			HTTPClient: &http.Client{Timeout: agentHTTPTimeout}},
		Timeout:   agentHTTPTimeout,
		OnError:   c.onError,
		OnRefresh: c.onRefresh,
	}
	return c
}

func (c *curlRefresh) onError(err error) {
	next := ""
	var re *agent.RefreshError
	if errors.As(err, &re) && re.Failures > 0 {
		next = fmt.Sprintf("; the next try is put off until %s", re.RetryAt.UTC().Format(time.RFC3339))
		err = re.Err
	}
	if c.abandoned.Load() {
		fmt.Fprintf(c.env.Stderr, "warning: the agent's directory signature is due for a refresh, which the service had not answered %v after the call: abandoned%s (run idcli agent directory refresh)\n", curlRefreshGrace, next)
		return
	}
	fmt.Fprintf(c.env.Stderr, "warning: the agent's directory signature is due for a refresh, which failed: %v%s (run idcli agent directory refresh)\n", serverWords(err), next)
}

func (c *curlRefresh) onRefresh(res agent.RefreshResult) {
	fmt.Fprintf(c.env.Stderr, "• directory signature refreshed until %s\n", res.Expires.UTC().Format(time.RFC3339))
}

// finish waits at most curlRefreshGrace for a refresh still running, then
// abandons it (Close records it as failed).
func (c *curlRefresh) finish() {
	ctx, cancel := context.WithTimeout(context.Background(), curlRefreshGrace)
	defer cancel()
	if c.Wait(ctx) != nil {
		c.abandoned.Store(true)
	}
	c.Close()
}
