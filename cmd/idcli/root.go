package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/agentid/agentid/signer"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// cliEnv is everything a command touches outside its arguments, so tests can
// drive run with buffers, a fake environment and a temporary directory.
type cliEnv struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads the process environment.
	Getenv func(string) string
	// Dir is the working directory where .env files are read and written.
	Dir string
}

func newEnv() *cliEnv {
	dir, _ := os.Getwd()
	return &cliEnv{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Dir: dir}
}

// exitCode is an error that only sets the process exit status (its message,
// if any, was already printed).
type exitCode int

func (e exitCode) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// newFlagSet returns a FlagSet that reports errors instead of exiting.
func newFlagSet(name string, env *cliEnv) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	return fs
}

// groupExec is the Exec of a command group: it only prints help.
func groupExec(context.Context, []string) error { return flag.ErrHelp }

// run is main without the process: it parses args and runs one command.
func run(ctx context.Context, args []string, env *cliEnv) error {
	fs := newFlagSet("idcli", env)
	version := fs.Bool("version", false, "print the version and exit")
	root := &ffcli.Command{
		Name:       "idcli",
		ShortUsage: "idcli <agent|server|demo|…> [flags] [args]",
		ShortHelp:  "agentid: identity for software agents",
		FlagSet:    fs,
		Subcommands: append([]*ffcli.Command{
			newAgentCmd(env),
			newServerCmd(env),
		}, extraCommands(env)...),
		Exec: func(ctx context.Context, args []string) error {
			if *version {
				fmt.Fprintln(env.Stdout, "idcli", signer.Version)
				return nil
			}
			return flag.ErrHelp
		},
	}
	if err := root.Parse(args); err != nil {
		return err
	}
	return root.Run(ctx)
}
