package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/agentid/agentid/signer/agent"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// agentHTTPTimeout bounds the registration and rotation requests.
const agentHTTPTimeout = 30 * time.Second

// newAgentInitCmd is `idcli agent init [--hostname H]`.
func newAgentInitCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli agent init", env)
	hostname := fs.String("hostname", "", "service base URL (default: AGENT_HOSTNAME, then "+agent.DefaultHostname+"; no scheme means https://)")
	p11URI := pkcs11URIFlag(fs)
	return &ffcli.Command{
		Name:       "init",
		ShortUsage: "idcli agent init [--hostname H]",
		ShortHelp:  "create (or reuse) this agent's key, register it and write .env",
		FlagSet:    fs,
		Exec: func(ctx context.Context, args []string) error {
			if _, err := parseInterspersed(fs, args); err != nil {
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
			})
			if err != nil {
				return err
			}
			name := envDisplay(env, res.Path)
			if res.IsNew {
				fmt.Fprintf(env.Stdout, "✔ agent created (%s/AGENT_UID=%s)\n", name, res.UID)
			} else {
				fmt.Fprintf(env.Stdout, "• agent exists (%s/AGENT_UID=%s)\n", name, res.UID)
			}
			fmt.Fprintf(env.Stdout, "⮕ next run: [idcli agent curl %s/whoami]\n", res.Hostname)
			if res.Warning != "" {
				fmt.Fprintln(env.Stderr, res.Warning)
			}
			return nil
		},
	}
}
