package ops

// idcli server agents approve|reject: an operator's decision on an agent
// pending review (idcli server start --registration approval).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/agentid/agentid/refserver/store"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// reviewCmd is agents approve, or agents reject.
func reviewCmd(env *Env, approve bool) *ffcli.Command {
	var reason string
	c := cmd{path: "agents approve", args: "UID", nargs: 1, flagsUsage: "[--reason TEXT]",
		help: "approve an agent pending review (registration mode approval): every instance serves its keys and verifies its requests within 1 s",
		longHelp: "A decision is final: approving an approved agent changes nothing, and a rejected one cannot be\n" +
			"approved (delete it: its owner's next registration is pending anew).\n" +
			`With --json: {"agent":{…as agents show},"changed":true|false}.`,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&reason, "reason", "", "why, for the audit trail and the agent's owner (at most 500 bytes)")
		},
		check: func(args []string) error { return checkUIDReason(args[0], reason) },
		run: func(ctx context.Context, o *ops, args []string) error {
			return o.review(ctx, args[0], approve, reason)
		}}
	if !approve {
		c.path, c.flagsUsage = "agents reject", "--reason TEXT"
		c.help = "reject an agent pending review, for a reason its owner reads (idcli agent status): it stays refused (403 agent_rejected), its directory empty, on every instance within 1 s"
		c.longHelp = "A decision is final: rejecting a rejected agent changes nothing (the first reason stays), and an\n" +
			"approved one cannot be rejected (disable it instead).\n" +
			`With --json: {"agent":{…as agents show},"changed":true|false}.`
		c.check = func(args []string) error {
			if strings.TrimSpace(reason) == "" {
				return errors.New("agents reject needs --reason TEXT: the agent's owner reads it")
			}
			return checkUIDReason(args[0], reason)
		}
	}
	return newCmd(env, c)
}

func (o *ops) review(ctx context.Context, uid string, approve bool, reason string) error {
	decide, word := o.be.RejectAgent, "rejected"
	if approve {
		decide, word = o.be.ApproveAgent, "approved"
	}
	a, changed, err := decide(ctx, uid, reason)
	if err != nil {
		return o.word(err)
	}
	if changed {
		o.logChange("agent "+word, slog.String("uid", uid), slog.String("reason", reason))
	}
	if o.asJSON {
		return o.printJSON(agentChange{a, changed})
	}
	if !changed {
		fmt.Fprintf(o.env.Stdout, "• agent %s already %s\n", uid, word)
		return nil
	}
	fmt.Fprintf(o.env.Stdout, "✔ agent %s %s (every instance within 1 s)\n", uid, word)
	return nil
}

func (a apiBackend) ApproveAgent(ctx context.Context, uid, reason string) (store.AgentInfo, bool, error) {
	return a.review(ctx, uid, "/approve", reason)
}

func (a apiBackend) RejectAgent(ctx context.Context, uid, reason string) (store.AgentInfo, bool, error) {
	return a.review(ctx, uid, "/reject", reason)
}

func (a apiBackend) review(ctx context.Context, uid, verb, reason string) (store.AgentInfo, bool, error) {
	var ans agentChange
	err := a.c.call(ctx, http.MethodPost, "/agents"+seg(uid)+verb, nil, reasonBody{reason}, &ans, store.ScopeAgentsWrite)
	return ans.Agent, ans.Changed, err
}
