package main

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/hint"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// agentJSON is the --json output of `idcli agent init` and `idcli agent
// rotate`; it never holds the private key.
type agentJSON struct {
	UID          string     `json:"uid"`
	Kid          string     `json:"kid"`
	PublicJWK    signer.JWK `json:"public_jwk"`
	WellKnownURL string     `json:"well_known_url"`
	Path         string     `json:"path"`
	IsNew        *bool      `json:"is_new,omitempty"`
	Hostname     string     `json:"hostname,omitempty"`
	State        string     `json:"state,omitempty"` // "pending": waiting for the operator's approval
	// DirectorySignedUntil is when the directory signature handed over
	// expires (absent when none was).
	DirectorySignedUntil *time.Time `json:"directory_signed_until,omitempty"`
}

// agentJSONShape documents agentJSON in the help texts.
const agentJSONShape = `{"uid","kid","public_jwk","well_known_url","path" (the credentials file),"directory_signed_until" (when the key directory's signature expires; absent when it is unsigned)}`

// agentHTTPTimeout bounds the registration and rotation requests.
const agentHTTPTimeout = 30 * time.Second

// newAgentInitCmd is `idcli agent init [--hostname H]`.
func newAgentInitCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli agent init", env)
	hostname := fs.String("hostname", "", "service base URL (default: AGENT_HOSTNAME, then "+agent.DefaultHostname+"; no scheme means https://)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	p11URI := pkcs11URIFlag(fs)
	invite := fs.String("invite", "", "invitation token, for a service whose registration needs one (default: AGENT_INVITE; sent in the "+signer.InviteHeader+" header, covered by the signature)")
	return &ffcli.Command{
		Name:       "init",
		ShortUsage: "idcli agent init [--hostname H] [--invite TOKEN] [--pkcs11-uri URI] [--json]",
		ShortHelp:  "create (or reuse) this agent's key, register it and write .env",
		LongHelp:   "With --json: " + agentJSONShape + `, plus "is_new" (false when the key was already registered), "hostname", and "state":"pending" while the agent waits for the operator's approval.`,
		FlagSet:    fs,
		Exec: func(ctx context.Context, args []string) error {
			if _, err := env.parseInterspersed(fs, args, -1); err != nil {
				return err
			}
			tk, err := env.openTokenKey(*p11URI, true)
			if err != nil {
				return err
			}
			defer tk.Close()
			res, err := agent.Init(ctx, agent.InitOptions{
				Key:        tk.Signing(),
				Dir:        env.Dir,
				Hostname:   *hostname,
				Getenv:     env.Getenv,
				HTTPClient: &http.Client{Timeout: agentHTTPTimeout},
				Invite:     cmp.Or(*invite, env.Getenv("AGENT_INVITE")),
			})
			if err != nil {
				return hint.With(err, serviceHint(agentHostname(env, *hostname), err))
			}
			name := envDisplay(env, res.Path)
			if res.DirectoryError != nil {
				fmt.Fprintf(env.Stderr, "warning: the agent's key directory is served unsigned: %v (run idcli agent directory refresh)\n", serverWords(res.DirectoryError))
			}
			if *asJSON {
				if res.Warning != "" {
					fmt.Fprintln(env.Stderr, res.Warning)
				}
				isNew := res.IsNew
				out := agentJSON{UID: res.UID, Kid: res.PublicJWK.Kid, PublicJWK: res.PublicJWK,
					WellKnownURL: res.WellKnownURL, Path: name, IsNew: &isNew, Hostname: res.Hostname}
				if res.Pending {
					out.State = "pending"
				} else if res.DirectoryError == nil {
					until := res.Directory.Expires.UTC()
					out.DirectorySignedUntil = &until
				}
				return writeJSON(env.Stdout, out, false)
			}
			if res.IsNew {
				fmt.Fprintf(env.Stdout, "✔ agent created (%s/AGENT_UID=%s)\n", name, res.UID)
			} else {
				fmt.Fprintf(env.Stdout, "• agent exists (%s/AGENT_UID=%s)\n", name, res.UID)
			}
			if res.Pending {
				fmt.Fprintln(env.Stdout, "• pending review: its requests verify once the service's operator approves it; then sign its key directory (idcli agent directory refresh)")
				fmt.Fprintln(env.Stdout, "⮕ next run: [idcli agent status]")
			} else {
				fmt.Fprintf(env.Stdout, "⮕ next run: [idcli agent curl %s/whoami]\n", res.Hostname)
			}
			if res.DirectoryError == nil && !res.Pending {
				fmt.Fprintf(env.Stdout, "✔ key directory signed until %s\n", res.Directory.Expires.UTC().Format(time.RFC3339))
			}
			if res.Warning != "" {
				fmt.Fprintln(env.Stderr, res.Warning)
			}
			return nil
		},
	}
}
