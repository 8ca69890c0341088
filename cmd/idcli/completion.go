package main

import (
	"context"
	"flag"
	"io"
	"strings"

	"github.com/agentid/agentid/cmd/idcli/internal/completion"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// completionEntries walks the command tree rooted at c.
func completionEntries(c *ffcli.Command, path string) []completion.Entry {
	e := completion.Entry{Path: path}
	for _, sub := range c.Subcommands {
		e.Cmds = append(e.Cmds, sub.Name)
	}
	if c.FlagSet != nil {
		c.FlagSet.VisitAll(func(f *flag.Flag) {
			e.Flags = append(e.Flags, flagSpelling(f.Name))
			if !isBoolFlag(f) {
				e.Valued = append(e.Valued, f.Name)
			}
		})
	}
	e.Flags = append(e.Flags, "--help")
	out := []completion.Entry{e}
	for _, sub := range c.Subcommands {
		out = append(out, completionEntries(sub, strings.TrimSpace(path+" "+sub.Name))...)
	}
	return out
}

// isBoolFlag reports whether f is a switch (-v rather than -X VALUE).
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// newCompletionCmd is `idcli completion bash|zsh|fish`.
func newCompletionCmd(env *cliEnv) *ffcli.Command {
	shell := func(name, help, load string, write func(io.Writer, []completion.Entry)) *ffcli.Command {
		return &ffcli.Command{
			Name:       name,
			ShortUsage: "idcli completion " + name,
			ShortHelp:  help,
			LongHelp:   "Load it with:\n  " + load,
			FlagSet:    newFlagSet("idcli completion "+name, env),
			Exec: func(_ context.Context, args []string) error {
				if err := noArgs("completion "+name, args); err != nil {
					return err
				}
				write(env.Stdout, completionEntries(newRootCmd(&cliEnv{}), ""))
				return nil
			},
		}
	}
	return newGroupCmd(env, "idcli completion", "idcli completion <bash|zsh|fish>",
		"print a shell completion script (commands and flags)",
		"The script completes idcli's commands and, after a word starting with -, the\n"+
			"flags of the command typed so far; a flag's value completes as a file name.",
		shell("bash", "bash completion script", `source <(idcli completion bash)   # in ~/.bashrc`, completion.Bash),
		shell("zsh", "zsh completion script", `source <(idcli completion zsh)   # in ~/.zshrc, after compinit`, completion.Zsh),
		shell("fish", "fish completion script", `idcli completion fish > ~/.config/fish/completions/idcli.fish`, completion.Fish),
	)
}
