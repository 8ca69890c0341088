package main

import "github.com/peterbourgon/ff/v3/ffcli"

// newServerCmd is `idcli server …`: init, start, db:create, db:migrate, db:drop.
func newServerCmd(env *cliEnv) *ffcli.Command {
	return &ffcli.Command{
		Name:       "server",
		ShortUsage: "idcli server <init|start|db:create|db:migrate|db:drop> [flags]",
		ShortHelp:  "self-host the agentid reference server",
		FlagSet:    newFlagSet("idcli server", env),
		Exec:       groupExec,
	}
}
