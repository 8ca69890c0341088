package main

import (
	"flag"

	"github.com/agentid/agentid/cmd/idcli/internal/agentstatus"
	"github.com/agentid/agentid/signer"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// newAgentStatusCmd mounts `idcli agent status` (internal/agentstatus).
func newAgentStatusCmd(env *cliEnv) *ffcli.Command {
	return agentstatus.Command(agentstatus.Env{Stdout: env.Stdout, Dir: env.Dir, Getenv: env.Getenv,
		FlagSet: newFlagSet("idcli agent status", env),
		Parse: func(fs *flag.FlagSet, args []string) error {
			_, err := env.positional(fs, args, 0, "idcli agent status [flags]", "agent status takes no arguments")
			return err
		},
		Key: func(fs *flag.FlagSet) func() (signer.PrivateKey, func(), error) {
			uri := pkcs11URIFlag(fs)
			return func() (signer.PrivateKey, func(), error) {
				tk, err := env.openTokenKey(*uri, false)
				if err != nil {
					return signer.PrivateKey{}, nil, err
				}
				return tk.Signing(), tk.Close, nil
			}
		}})
}
