package ops

// idcli server agents: disable, enable (list, show and delete:
// agents_query.go; approve and reject: review.go).

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"github.com/agentid/agentid/refserver/store"
	"github.com/peterbourgon/ff/v3/ffcli"
)

func agentsCmd(env *Env) *ffcli.Command {
	return env.Group("idcli server agents", "idcli server agents <list|show|disable|enable|approve|reject|delete> [flags]",
		"list, inspect, disable, enable, approve, reject and delete the service's agents", "",
		agentsListCmd(env), agentsShowCmd(env),
		setDisabledCmd(env, true), setDisabledCmd(env, false),
		reviewCmd(env, true), reviewCmd(env, false),
		agentsDeleteCmd(env),
	)
}

// setDisabledCmd is agents disable, or agents enable.
func setDisabledCmd(env *Env, disabled bool) *ffcli.Command {
	var reason string
	c := cmd{path: "agents enable", args: "UID", nargs: 1, flagsUsage: "[--reason TEXT]",
		help:     "enable a disabled agent again (every instance within 1 s, third parties within 60 s)",
		longHelp: `With --json: {"agent":{…as agents show},"changed":true|false}.`,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&reason, "reason", "", "why, for the audit trail (at most 500 bytes)")
		},
		check: func(args []string) error { return checkUIDReason(args[0], reason) },
		run: func(ctx context.Context, o *ops, args []string) error {
			return o.setDisabled(ctx, args[0], disabled, reason)
		}}
	if disabled {
		c.path = "agents disable"
		c.help = "disable an agent: every instance refuses its requests (403) within 1 s; its directory lists no key, so third parties drop its keys within the directory's max-age (60 s)"
	}
	return newCmd(env, c)
}

func (o *ops) setDisabled(ctx context.Context, uid string, disabled bool, reason string) error {
	a, changed, err := o.be.SetAgentDisabled(ctx, uid, disabled, reason)
	if err != nil {
		return o.word(err)
	}
	word := map[bool]string{true: "disabled", false: "enabled"}[disabled]
	if changed {
		o.logChange("agent "+word, slog.String("uid", uid), slog.String("reason", reason))
	}
	if o.asJSON {
		return o.printJSON(struct {
			Agent   store.AgentInfo `json:"agent"`
			Changed bool            `json:"changed"`
		}{a, changed})
	}
	if !changed {
		fmt.Fprintf(o.env.Stdout, "• agent %s already %s\n", uid, word)
		return nil
	}
	fmt.Fprintf(o.env.Stdout, "✔ agent %s %s (every instance within 1 s, third parties within 60 s)\n", uid, word)
	return nil
}
