package main

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/agentid/agentid/signer/suggest"
)

// flagOutput is where a command's FlagSet prints (help text, parse
// errors): env.usage. It also notes which FlagSet printed last, so that
// run can word a parse error with that command's flags.
type flagOutput struct {
	env *cliEnv
	fs  *flag.FlagSet
}

func (o flagOutput) Write(p []byte) (int, error) {
	o.env.lastFlagSet = o.fs
	return o.env.usage.Write(p)
}

// flagErrorPatterns are the messages of package flag's parse errors.
var (
	flagUndefined = regexp.MustCompile(`^flag provided but not defined: -(.+)$`)
	flagNeedsArg  = regexp.MustCompile(`^flag needs an argument: -(.+)$`)
	flagBadValue  = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-([^:]+): (.*)$`)
	flagBadSyntax = regexp.MustCompile(`^bad flag syntax: (.*)$`)
)

// flagError rewords a parse error of package flag (returned by fs.Parse,
// possibly wrapped) as one line naming the flag as the user typed it, with
// a "did you mean" for an unknown flag. It returns nil when err is not a
// flag parse error.
func flagError(err error, fs *flag.FlagSet, args []string) error {
	if fs == nil {
		return nil
	}
	inner := err
	for u := errors.Unwrap(inner); u != nil; u = errors.Unwrap(inner) {
		inner = u
	}
	msg := inner.Error()
	helpHint := "run " + fs.Name() + " --help for its flags"
	// main prefixes "idcli: "; the command follows it.
	cmd := strings.TrimSpace(strings.TrimPrefix(fs.Name(), "idcli"))
	if cmd != "" {
		cmd += ": "
	}
	switch {
	case flagUndefined.MatchString(msg):
		name := flagUndefined.FindStringSubmatch(msg)[1]
		typed := typedFlag(name, args)
		if s := suggestFlag(name, fs); s != "" {
			return fmt.Errorf("%sunknown flag %s (did you mean %s?): %s", cmd, typed, s, helpHint)
		}
		if others := commandsWithFlag(name); len(others) > 0 {
			return fmt.Errorf("%sunknown flag %s (a flag of %s): %s", cmd, typed, strings.Join(others, ", "), helpHint)
		}
		return fmt.Errorf("%sunknown flag %s: %s", cmd, typed, helpHint)
	case flagNeedsArg.MatchString(msg):
		name := flagNeedsArg.FindStringSubmatch(msg)[1]
		return fmt.Errorf("%sflag %s needs a value: %s", cmd, typedFlag(name, args), helpHint)
	case flagBadValue.MatchString(msg):
		m := flagBadValue.FindStringSubmatch(msg)
		return fmt.Errorf("%sflag %s: invalid value %s (%s)", cmd, typedFlag(m[2], args), m[1], m[3])
	case flagBadSyntax.MatchString(msg):
		return fmt.Errorf("%sbad flag syntax %q: %s", cmd, flagBadSyntax.FindStringSubmatch(msg)[1], helpHint)
	}
	return nil
}

// typedFlag returns the flag name as it appears in args ("--host" or
// "-host"), or its conventional spelling when it cannot be found.
func typedFlag(name string, args []string) string {
	for _, a := range args {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		spelled, _, _ := strings.Cut(a, "=")
		if strings.TrimLeft(spelled, "-") == name {
			return spelled
		}
	}
	return flagSpelling(name)
}

// flagSpelling is how help texts write a flag: -X for a one-letter name,
// --name otherwise.
func flagSpelling(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// suggestFlag returns the flags of fs close to name (see suggest.Close), spelled
// as help texts write them and joined by " or ", or "".
func suggestFlag(name string, fs *flag.FlagSet) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	var out []string
	for _, n := range suggest.Close(name, names) {
		out = append(out, flagSpelling(n))
	}
	return strings.Join(out, " or ")
}

// commandAliases maps, per command group, words people type for a command
// to the command they mean (relative to the group).
var commandAliases = map[string]map[string]string{
	"idcli": {
		"migrate": "server db:migrate", "serve": "server start", "start": "server start",
		"init": "agent init", "register": "agent init", "headers": "agent headers", "sign": "agent headers",
		"rotate": "agent rotate", "curl": "agent curl", "verify": "tool verify", "check": "directory check",
		"completions": "completion",
	},
	"idcli server": {
		"migrate": "db:migrate", "create": "db:create", "drop": "db:drop",
		"createdb": "db:create", "dropdb": "db:drop", "run": "start", "serve": "start",
	},
	"idcli agent":     {"register": "init", "sign": "headers", "rotate-keys": "rotate", "request": "curl"},
	"idcli tool":      {"check": "verify"},
	"idcli directory": {"verify": "check", "fetch": "check"},
}

// suggestCommand returns the command (a full path such as "idcli server
// db:migrate") that args[0], unknown in the group path with commands subs,
// most likely meant, or "".
func suggestCommand(path string, subs []*ffcli.Command, args []string) string {
	typed := strings.ToLower(args[0])
	if typed == "db" && len(args) > 1 && path == "idcli server" {
		// "server db migrate" for "server db:migrate"
		name := "db:" + strings.ToLower(args[1])
		if slices.ContainsFunc(subs, func(c *ffcli.Command) bool { return c.Name == name }) {
			return path + " " + name
		}
	}
	if a, ok := commandAliases[path][typed]; ok {
		return path + " " + a
	}
	var names []string
	for _, c := range subs {
		names = append(names, c.Name)
	}
	var out []string
	for _, n := range suggest.Close(args[0], names) {
		out = append(out, path+" "+n)
	}
	return strings.Join(out, " or ")
}

// commandsWithFlag returns the commands (as "idcli agent curl") that define
// the flag name, for a flag given to the wrong command: the first three,
// then "…" if there are more.
func commandsWithFlag(name string) []string {
	var out []string
	var walk func(c *ffcli.Command, path string)
	walk = func(c *ffcli.Command, path string) {
		if c.FlagSet != nil && c.FlagSet.Lookup(name) != nil {
			out = append(out, path)
		}
		for _, sub := range c.Subcommands {
			walk(sub, path+" "+sub.Name)
		}
	}
	walk(newRootCmd(&cliEnv{}), "idcli")
	if len(out) > 3 {
		out = append(out[:3], "…")
	}
	return out
}
