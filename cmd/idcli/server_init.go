package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/agentid/agentid/signer/envfile"
	"github.com/agentid/agentid/signer/redact"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// newServerInitCmd is `idcli server init`: it writes the resolved PORT,
// HOSTNAME and DATABASE_URL to ./.env.
func newServerInitCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli server init", env)
	var f serverFlags
	f.register(fs, true)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	return &ffcli.Command{
		Name:       "init",
		ShortUsage: "idcli server init [--port P] [--hostname URL] [--database-url URL] [--json]",
		ShortHelp:  "write PORT, HOSTNAME and DATABASE_URL to ./.env",
		LongHelp:   `With --json: {"path":".env","port":"3000","hostname":"http://localhost:3000","database_url":"…" (its user information and parameter values redacted)}.`,
		FlagSet:    fs,
		Exec: func(ctx context.Context, args []string) error {
			if err := noArgs("server init", args); err != nil {
				return err
			}
			s, err := resolveServerSettings(env, f, true)
			if err != nil {
				return err
			}
			// The folder's .env may hold an agent's credentials too: edit
			// it under its lock, as agent init and rotate do, as it is now.
			err = envfile.Update(ctx, filepath.Join(env.Dir, ".env"), func(ef *envfile.File) (bool, error) {
				ef.Set("PORT", s.Port)
				ef.Set("HOSTNAME", s.Hostname)
				ef.Set("DATABASE_URL", s.DatabaseURL)
				return true, nil
			})
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(env.Stdout, serverInitJSON{Path: ".env", Port: s.Port, Hostname: s.Hostname,
					DatabaseURL: redact.URL(s.DatabaseURL)}, false)
			}
			fmt.Fprintf(env.Stdout, "✔ ready (.env/HOSTNAME=%s)\n", s.Hostname)
			return nil
		},
	}
}

// serverInitJSON is the --json output of `idcli server init`.
type serverInitJSON struct {
	Path        string `json:"path"`
	Port        string `json:"port"`
	Hostname    string `json:"hostname"`
	DatabaseURL string `json:"database_url"`
}
