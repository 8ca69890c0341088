package main

import "github.com/peterbourgon/ff/v3/ffcli"

// newAgentCmd is `idcli agent …`: init, headers, rotate, curl.
func newAgentCmd(env *cliEnv) *ffcli.Command {
	return &ffcli.Command{
		Name:       "agent",
		ShortUsage: "idcli agent <init|headers|rotate|curl> [flags]",
		ShortHelp:  "give this agent an identity and sign requests with it",
		FlagSet:    newFlagSet("idcli agent", env),
		Exec:       groupExec,
	}
}
