package ops

// idcli server agents: list, show, disable, enable (approve and reject:
// review.go).

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/agentid/agentid/refserver/store"
	"github.com/peterbourgon/ff/v3/ffcli"
)

func agentsCmd(env *Env) *ffcli.Command {
	var limit int
	var after string
	var disabledOnly bool
	return env.Group("idcli server agents", "idcli server agents <list|show|disable|enable|approve|reject> [flags]",
		"list, inspect, disable, enable, approve and reject the service's agents", "",
		newCmd(env, cmd{path: "agents list", flagsUsage: "[--limit N] [--after UID] [--disabled]", help: "list the registered agents (oldest uid first)",
			longHelp: `With --json: {"agents":[{"uid","created_at","updated_at","disabled_at","active_keys"}…]}.`,
			flags: func(fs *flag.FlagSet) {
				fs.IntVar(&limit, "limit", 100, "list at most N agents")
				fs.StringVar(&after, "after", "", "list the agents whose uid sorts after this one (the next page)")
				fs.BoolVar(&disabledOnly, "disabled", false, "list only the disabled agents")
			},
			run: func(ctx context.Context, o *ops, _ []string) error {
				if limit < 1 || limit > 100_000 {
					return fmt.Errorf("--limit %d: want 1 to 100000", limit)
				}
				list, err := o.be.ListAgents(ctx, after, limit, disabledOnly)
				if err != nil {
					return o.word(err)
				}
				if o.asJSON {
					return o.printJSON(struct {
						Agents []store.AgentInfo `json:"agents"`
					}{list})
				}
				if len(list) == 0 {
					fmt.Fprintln(o.env.Stdout, "no agents")
					return nil
				}
				fmt.Fprintf(o.env.Stdout, "%-30s  %-20s  %-11s  %s\n", "UID", "CREATED", "ACTIVE KEYS", "STATUS")
				for _, a := range list {
					fmt.Fprintf(o.env.Stdout, "%-30s  %-20s  %-11d  %s\n", a.UID, a.CreatedAt.Format(time.RFC3339), a.ActiveKeys, agentStatus(a))
				}
				if len(list) == limit {
					fmt.Fprintf(o.env.Stdout, "⮕ next page: [idcli server agents list --after %s]\n", list[len(list)-1].UID)
				}
				return nil
			}}),
		newCmd(env, cmd{path: "agents show", args: "UID", nargs: 1, help: "show an agent and its keys",
			longHelp: `With --json: {"uid","created_at","updated_at","disabled_at","active_keys","keys":[{"kid","created_at","revoked_at"}…]}.`,
			run: func(ctx context.Context, o *ops, args []string) error {
				if err := checkUID(args[0]); err != nil {
					return err
				}
				a, err := o.be.ShowAgent(ctx, args[0])
				if err != nil {
					return o.word(err)
				}
				if o.asJSON {
					return o.printJSON(a)
				}
				printAgent(o.env.Stdout, a)
				return nil
			}}),
		setDisabledCmd(env, true), setDisabledCmd(env, false),
		reviewCmd(env, true), reviewCmd(env, false),
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

func agentStatus(a store.AgentInfo) string {
	switch {
	case a.State == store.StateRejected:
		return "rejected: " + a.ReviewReason
	case a.State == store.StatePending:
		return "pending review"
	case a.DisabledAt != nil:
		return "disabled since " + a.DisabledAt.Format(time.RFC3339)
	}
	return "active"
}

func printAgent(w io.Writer, a store.AgentInfo) {
	fmt.Fprintf(w, "uid:        %s\ncreated:    %s\nupdated:    %s\nstatus:     %s\n", a.UID,
		a.CreatedAt.Format(time.RFC3339), a.UpdatedAt.Format(time.RFC3339), agentStatus(a))
	fmt.Fprintf(w, "keys:       %d active of %d\n", a.ActiveKeys, len(a.Keys))
	for _, k := range a.Keys {
		state := "active"
		if k.RevokedAt != nil {
			state = "revoked " + k.RevokedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "  %s  created %s  %s\n", k.Kid, k.CreatedAt.Format(time.RFC3339), state)
	}
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
