package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentid/agentid/cmd/idcli/internal/ops"
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

	// args is the command line run was given: parseInterspersed reads
	// from it whether ffcli stopped at "--".
	args []string

	// usage collects what the flag sets print (help text, flag errors)
	// until run knows whether it is help (stdout) or an error (stderr).
	usage bytes.Buffer
	// lastFlagSet is the FlagSet that printed into usage last: the one
	// whose parse error run rewords.
	lastFlagSet *flag.FlagSet
}

// path resolves a file name given on the command line against env.Dir.
func (env *cliEnv) path(name string) string {
	if filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(env.Dir, name)
}

func newEnv() *cliEnv {
	dir, _ := os.Getwd()
	return &cliEnv{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Dir: dir}
}

// exitCode is an error that only sets the process exit status (its message,
// if any, was already printed).
type exitCode int

func (e exitCode) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// newFlagSet returns a FlagSet that reports errors instead of exiting and
// prints its usage into env.usage.
func newFlagSet(name string, env *cliEnv) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(flagOutput{env: env, fs: fs})
	return fs
}

// newGroupCmd is the command group path (such as "idcli agent"): it runs
// one of subs, and alone prints its help (groupExec).
func newGroupCmd(env *cliEnv, path, shortUsage, shortHelp, longHelp string, subs ...*ffcli.Command) *ffcli.Command {
	return &ffcli.Command{
		Name:        path[strings.LastIndex(path, " ")+1:],
		ShortUsage:  shortUsage,
		ShortHelp:   shortHelp,
		LongHelp:    longHelp,
		FlagSet:     newFlagSet(path, env),
		Subcommands: subs,
		Exec:        groupExec(path, subs),
	}
}

// groupExec is the Exec of the command group path (such as "idcli agent")
// with commands subs: without a command it prints the group's help; an
// unknown command is an error that names it and, when it looks like a typo
// or a known alias, the command meant.
func groupExec(path string, subs []*ffcli.Command) func(context.Context, []string) error {
	return func(_ context.Context, args []string) error {
		if len(args) == 0 || args[0] == "help" {
			return flag.ErrHelp
		}
		unknown := strings.TrimPrefix(path+" "+args[0], "idcli ")
		if s := suggestCommand(path, subs, args); s != "" {
			return fmt.Errorf("unknown command %q (did you mean %s?): run %s --help to list the commands", unknown, s, path)
		}
		return fmt.Errorf("unknown command %q: run %s --help to list the commands", unknown, path)
	}
}

// run is main without the process: it parses args and runs one command.
// Help (-h, --help, a command group alone, `idcli help`) goes to stdout and
// returns flag.ErrHelp, which main treats as success.
func run(ctx context.Context, args []string, env *cliEnv) error {
	env.usage.Reset()
	env.lastFlagSet = nil
	env.args = args
	err := serverWords(runCommand(ctx, args, env))
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		// A bad flag: one line naming it as typed, instead of package
		// flag's message, the usage and the error again.
		if fe := flagError(err, env.lastFlagSet, args); fe != nil {
			env.usage.Reset()
			err = fe
		}
	}
	if env.usage.Len() > 0 {
		out := env.Stderr
		if errors.Is(err, flag.ErrHelp) {
			out = env.Stdout
		}
		io.Copy(out, &env.usage)
	}
	return err
}

func runCommand(ctx context.Context, args []string, env *cliEnv) error {
	root := newRootCmd(env)
	if err := root.Parse(args); err != nil {
		return err
	}
	return root.Run(ctx)
}

// newRootCmd is the command tree: each command group with its commands
// (defined in the group's files), and the single commands.
func newRootCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli", env)
	version := fs.Bool("version", false, "print the version and exit")
	root := &ffcli.Command{
		Name:       "idcli",
		ShortUsage: "idcli [--version] <agent|server|demo|proxy|bench|tool|directory|version|completion> [flags] [args]",
		ShortHelp:  "agentid: identity for software agents",
		LongHelp: "Run idcli COMMAND --help for the flags and arguments of a command. Flags may come\n" +
			"before or after the arguments. An argument may begin with - (a key id does, one in\n" +
			"64): idcli server keys revoke UID -KID reads -KID as the KID; after --, every word\n" +
			"is an argument (idcli server keys revoke -- UID -KID).",
		FlagSet: fs,
		Subcommands: []*ffcli.Command{
			newGroupCmd(env, "idcli agent",
				"idcli agent <init|headers|rotate|curl|directory|status> [flags]",
				"give this agent an identity and sign requests with it",
				"Credentials come from flags, then the process environment, then ./.env:\n"+
					"AGENT_UID, AGENT_PRIVATE_JWK, AGENT_PUBLIC_JWK and AGENT_HOSTNAME\n"+
					"(default http://localhost:3000).",
				newAgentInitCmd(env),
				newAgentHeadersCmd(env),
				newAgentRotateCmd(env),
				newAgentCurlCmd(env),
				newAgentDirectoryCmd(env),
				newAgentStatusCmd(env),
			),
			newGroupCmd(env, "idcli server",
				"idcli server <init|start|db:create|db:migrate|db:drop|agents|keys|tokens|operators|audit> [flags]",
				"self-host the agentid reference server",
				"Settings come from flags, then the process environment (PORT, HOSTNAME,\n"+
					"DATABASE_URL), then the .env file of the current directory, then the defaults\n"+
					"PORT=3000, HOSTNAME=http://localhost:<PORT>, DATABASE_URL="+defaultServerDatabaseURL+".\n"+
					"HOSTNAME must carry a scheme; a bare shell $HOSTNAME (a machine name) is ignored.\n"+
					"DATABASE_URL may also be sqlite://PATH or sqlite::memory: (embedded database).\n"+
					"agents, keys, tokens and audit also run on the admin API, the operator token\n"+
					"read from a file or AGENTID_OPERATOR_TOKEN:\n"+
					"idcli server agents list --server URL --token-file PATH",
				append([]*ffcli.Command{newServerInitCmd(env),
					newServerStartCmd(env),
					newServerDBCmd(env, "db:create", "create the database (needs the CREATEDB privilege)", serverDBCreate),
					newServerDBCmd(env, "db:migrate", "create or update the schema (idempotent)", serverDBMigrate),
					newServerDBCmd(env, "db:drop", "permanently delete the database and all agent data", serverDBDrop),
				}, ops.Commands(opsEnv(env))...)...,
			),
			newDemoCmd(env),
			newProxyCmd(env),
			newGroupCmd(env, "idcli tool", "idcli tool <verify> [flags]",
				"check signed requests captured elsewhere", "", newToolVerifyCmd(env)),
			newGroupCmd(env, "idcli directory", "idcli directory <check> [flags]",
				"inspect signature agents' key directories", "", newDirectoryCheckCmd(env)),
			newBenchCmd(env),
			newVersionCmd(env),
			newCompletionCmd(env),
		},
	}
	rootExec := groupExec("idcli", root.Subcommands)
	root.Exec = func(ctx context.Context, args []string) error {
		if *version {
			printVersion(env, false)
			return nil
		}
		return rootExec(ctx, args)
	}
	setUsage(root)
	return root
}
