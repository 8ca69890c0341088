package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/hint"
	"github.com/agentid/agentid/signer/agent"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// newAgentRotateCmd is `idcli agent rotate`.
func newAgentRotateCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli agent rotate", env)
	uid := fs.String("uid", "", "agent uid (default: AGENT_UID)")
	privateJWK := fs.String("private-jwk", "", "current private JWK as JSON (default: AGENT_PRIVATE_JWK)")
	hostname := fs.String("hostname", "", "service base URL (default: AGENT_HOSTNAME, then "+agent.DefaultHostname+")")
	tag := fs.String("tag", "", "tag of the current key's signature (default: web-bot-auth)")
	nonce := fs.String("nonce", "", "nonce of the current key's signature (default: random)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	p11URI := pkcs11URIFlag(fs)
	return &ffcli.Command{
		Name:       "rotate",
		ShortUsage: "idcli agent rotate [--uid U] [--private-jwk JWK] [--hostname H] [--tag T] [--nonce N] [--pkcs11-uri URI] [--json]",
		LongHelp:   "With --json: " + agentJSONShape + " of the new key.",
		ShortHelp:  "replace this agent's key (the uid stays) and rewrite .env",
		FlagSet:    fs,
		Exec: func(ctx context.Context, args []string) error {
			if _, err := env.parseInterspersed(fs, args, -1); err != nil {
				return err
			}
			cur, next, finish, err := env.rotateTokenKeys(*p11URI)
			if err != nil {
				return err
			}
			res, err := agent.Rotate(ctx, agent.RotateOptions{
				Key:        cur.Signing(),
				Next:       next.Signing(),
				Dir:        env.Dir,
				UID:        *uid,
				PrivateJWK: *privateJWK,
				Hostname:   *hostname,
				Tag:        *tag,
				Nonce:      *nonce,
				Getenv:     env.Getenv,
				HTTPClient: &http.Client{Timeout: agentHTTPTimeout},
			})
			if ferr := finish(err == nil); ferr != nil {
				fmt.Fprintln(env.Stderr, "warning: --pkcs11-uri:", ferr)
			}
			if err != nil {
				return hint.With(err, serviceHint(agentHostname(env, *hostname), err))
			}
			if *asJSON {
				if res.Warning != "" {
					fmt.Fprintln(env.Stderr, res.Warning)
				}
				until := res.DirectorySignedUntil.UTC()
				return writeJSON(env.Stdout, agentJSON{UID: res.UID, Kid: res.PublicJWK.Kid, PublicJWK: res.PublicJWK,
					WellKnownURL: res.WellKnownURL, Path: envDisplay(env, res.Path), DirectorySignedUntil: &until}, false)
			}
			fmt.Fprintf(env.Stdout, "✔ agent keys rotated (%s/AGENT_UID=%s)\n", envDisplay(env, res.Path), res.UID)
			fmt.Fprintf(env.Stdout, "⮕ new kid %s (every older key of the agent is revoked)\n", res.PublicJWK.Kid)
			fmt.Fprintf(env.Stdout, "✔ key directory signed by the new key until %s\n", res.DirectorySignedUntil.UTC().Format(time.RFC3339))
			if res.Warning != "" {
				fmt.Fprintln(env.Stderr, res.Warning)
			}
			return nil
		},
	}
}
