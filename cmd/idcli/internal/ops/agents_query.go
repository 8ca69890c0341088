package ops

// idcli server agents list (filtered, paged), show (with the key
// history) and delete, and their routes on the admin API.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// maxListed is the most agents one agents list prints (pages of at most
// store.MaxAgentPage are read until it has them).
const maxListed = 100_000

// agentsListCmd is idcli server agents list.
func agentsListCmd(env *Env) *ffcli.Command {
	var q store.AgentQuery
	var limit int
	var since string
	var disabledOnly bool
	return newCmd(env, cmd{path: "agents list",
		flagsUsage: "[--state S] [--created-since T] [--kid KID] [--invitation ID] [--disabled] [--limit N] [--after UID]",
		help:       "list the registered agents (oldest uid first), by state, creation time, key or invitation",
		longHelp: "--state is one of " + strings.Join(store.AgentStates(), ", ") + " (rejected and pending:\n" +
			"an operator's review; no_keys: let in and enabled, but no active key left);\n" +
			"--created-since takes an RFC 3339 time, a date (2026-12-01, UTC) or a duration ago (24h);\n" +
			"--kid finds the agent holding that key, active or not; --invitation the agents that\n" +
			"registered with that invitation token (its id, see idcli server tokens list).\n" +
			`With --json: {"agents":[{"uid","state","created_at","updated_at","disabled_at","active_keys",…}…],"next":"UID"|null}.`,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&q.State, "state", "", "list only the agents in this state")
			fs.StringVar(&since, "created-since", "", "list only the agents created at or after this time")
			fs.StringVar(&q.Kid, "kid", "", "list only the agent holding this key (its thumbprint)")
			fs.Var(idFlag{&q.InvitationID}, "invitation", "list only the agents that registered with this invitation token (its `ID`)")
			fs.IntVar(&limit, "limit", 100, "list at most N agents")
			fs.StringVar(&q.After, "after", "", "list the agents whose uid sorts after this one (the next page)")
			fs.BoolVar(&disabledOnly, "disabled", false, "as --state disabled")
		},
		check: func([]string) error {
			if limit < 1 || limit > maxListed {
				return fmt.Errorf("--limit %d: want 1 to %d", limit, maxListed)
			}
			if disabledOnly {
				if q.State != "" && q.State != store.StateDisabled {
					return fmt.Errorf("--disabled is --state disabled: give one or the other")
				}
				q.State = store.StateDisabled
			}
			if q.State != "" && !validState(q.State) {
				return fmt.Errorf("--state %q: want one of %s", signer.Truncate(q.State), strings.Join(store.AgentStates(), ", "))
			}
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return fmt.Errorf("--created-since%s", strings.TrimPrefix(err.Error(), "--since"))
				}
				q.CreatedSince = t
			}
			if q.Kid != "" && !store.ValidKid(q.Kid) {
				return fmt.Errorf("--kid %q: want a key's RFC 7638 thumbprint, 43 base64url characters", signer.Truncate(q.Kid))
			}
			if q.After != "" {
				if err := checkUID(q.After); err != nil {
					return fmt.Errorf("--after: %w", err)
				}
			}
			return nil
		},
		run: func(ctx context.Context, o *ops, _ []string) error {
			list, next, err := listAgents(ctx, o.be, q, limit)
			if err != nil {
				return o.word(err)
			}
			if o.asJSON {
				page := struct {
					Agents []store.AgentInfo `json:"agents"`
					Next   *string           `json:"next"`
				}{Agents: list}
				if next != "" {
					page.Next = &next
				}
				return o.printJSON(page)
			}
			printAgentList(o.env.Stdout, list)
			if next != "" {
				fmt.Fprintf(o.env.Stdout, "⮕ next page: [idcli server agents list --after %s%s]\n", next, listFilters(q, limit))
			}
			return nil
		}})
}

func validState(s string) bool {
	for _, st := range store.AgentStates() {
		if s == st {
			return true
		}
	}
	return false
}

// listAgents reads at most limit agents q selects, a page of at most
// store.MaxAgentPage at a time, and the uid after which the next page
// begins ("" when there is none).
func listAgents(ctx context.Context, be backend, q store.AgentQuery, limit int) ([]store.AgentInfo, string, error) {
	out := []store.AgentInfo{}
	for {
		q.Limit = min(limit-len(out), store.MaxAgentPage)
		page, next, err := be.Agents(ctx, q)
		if err != nil {
			return nil, "", err
		}
		out = append(out, page...)
		if next == "" || len(out) >= limit || len(page) == 0 {
			return out, next, nil
		}
		q.After = next
	}
}

// listFilters is the command line's filters, for the next page's command
// (--created-since as the time it meant).
func listFilters(q store.AgentQuery, limit int) string {
	var b strings.Builder
	if q.State != "" {
		fmt.Fprintf(&b, " --state %s", q.State)
	}
	if !q.CreatedSince.IsZero() {
		fmt.Fprintf(&b, " --created-since %s", q.CreatedSince.UTC().Format(time.RFC3339Nano))
	}
	if q.Kid != "" {
		fmt.Fprintf(&b, " --kid %s", shellWord(q.Kid))
	}
	if q.InvitationID != 0 {
		fmt.Fprintf(&b, " --invitation %d", q.InvitationID)
	}
	if limit != 100 {
		fmt.Fprintf(&b, " --limit %d", limit)
	}
	return b.String()
}

func printAgentList(w io.Writer, list []store.AgentInfo) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no agents")
		return
	}
	fmt.Fprintf(w, "%-30s  %-20s  %-11s  %s\n", "UID", "CREATED", "ACTIVE KEYS", "STATE")
	for _, a := range list {
		fmt.Fprintf(w, "%-30s  %-20s  %-11d  %s\n", a.UID, a.CreatedAt.Format(time.RFC3339), a.ActiveKeys, agentStatus(a))
	}
}

// agentStatus says the agent's state on one line, with its time and
// reason when it has them (quoted: reasons are other people's text).
func agentStatus(a store.AgentInfo) string {
	switch a.State {
	case store.StateRejected:
		return "rejected" + reason(a.ReviewReason)
	case store.StatePending:
		return "pending review"
	case store.StateDisabled:
		s := "disabled"
		if a.DisabledAt != nil {
			s += " since " + a.DisabledAt.Format(time.RFC3339)
		}
		return s + reason(a.DisabledReason)
	case store.StateNoKeys:
		return "no_keys (no active key left: it can neither sign nor rotate)"
	case "":
		return "?"
	}
	return a.State
}

// reason is ": <quoted reason>", or "" for none.
func reason(r string) string {
	if r == "" {
		return ""
	}
	return ": " + strconv.Quote(r)
}

// agentsShowCmd is idcli server agents show.
func agentsShowCmd(env *Env) *ffcli.Command {
	return newCmd(env, cmd{path: "agents show", args: "UID", nargs: 1, help: "show an agent, its state and every key it has had",
		longHelp: "Each key is active, rotated (a rotation replaced it) or revoked (by an operator,\n" +
			"with the reason), oldest first; unproven keys are marked.\n" +
			`With --json: {"uid","state","created_at","updated_at","disabled_at","active_keys",…,` +
			`"keys":[{"kid","created_at","revoked_at","revoked_why","revoke_reason","proven"}…]}.`,
		check: func(args []string) error { return checkUID(args[0]) },
		run: func(ctx context.Context, o *ops, args []string) error {
			a, err := o.be.ShowAgent(ctx, args[0])
			if err != nil {
				return o.word(err)
			}
			if o.asJSON {
				return o.printJSON(a)
			}
			printAgent(o.env.Stdout, a)
			return nil
		}})
}

func printAgent(w io.Writer, a store.AgentInfo) {
	fmt.Fprintf(w, "uid:        %s\nstate:      %s\ncreated:    %s\nupdated:    %s\n", a.UID, agentStatus(a),
		a.CreatedAt.Format(time.RFC3339), a.UpdatedAt.Format(time.RFC3339))
	if a.ReviewedAt != nil {
		decision := "approved"
		if a.State == store.StateRejected {
			decision = "rejected"
		}
		fmt.Fprintf(w, "reviewed:   %s %s%s\n", decision, a.ReviewedAt.Format(time.RFC3339), reason(a.ReviewReason))
	}
	if a.InvitationID != nil {
		fmt.Fprintf(w, "invitation: %d\n", *a.InvitationID)
	}
	fmt.Fprintf(w, "keys:       %d active of %d\n", a.ActiveKeys, len(a.Keys))
	for _, k := range a.Keys {
		fmt.Fprintf(w, "  %s  created %s  %s\n", k.Kid, k.CreatedAt.Format(time.RFC3339), keyState(k))
	}
}

// keyState says what became of a key.
func keyState(k store.KeyInfo) string {
	s := "active"
	if k.RevokedAt != nil {
		switch k.RevokedWhy {
		case store.RevokedRotated:
			s = "rotated " + k.RevokedAt.Format(time.RFC3339)
		default: // revoked by an operator, or before the cause was recorded
			s = "revoked " + k.RevokedAt.Format(time.RFC3339) + reason(k.RevokeReason)
		}
	}
	if !k.Proven {
		s += " (possession never proven)"
	}
	return s
}

// agentsDeleteCmd is idcli server agents delete.
func agentsDeleteCmd(env *Env) *ffcli.Command {
	return newCmd(env, cmd{path: "agents delete", args: "UID", nargs: 1,
		help: "delete an agent with its keys (recorded in the audit trail); disable it first to withdraw it from third parties",
		longHelp: "Every instance forgets its keys within 1 s. Its directory then answers 404, which\n" +
			"third-party verifiers sit out like an outage (keeping its keys up to their stale\n" +
			"limit, an hour by default), so disable an agent, wait a minute, then delete it.\n" +
			"It asks nothing: a script may run it.\n" +
			`With --json: {"uid","deleted":true}.`,
		check: func(args []string) error { return checkUID(args[0]) },
		run: func(ctx context.Context, o *ops, args []string) error {
			uid := args[0]
			if err := o.be.DeleteAgent(ctx, uid); err != nil {
				return o.word(err)
			}
			o.logChange("agent deleted", slog.String("uid", uid))
			if o.asJSON {
				return o.printJSON(struct {
					UID     string `json:"uid"`
					Deleted bool   `json:"deleted"`
				}{uid, true})
			}
			fmt.Fprintf(o.env.Stdout, "✔ agent %s deleted with its keys (every instance within 1 s; its directory now answers 404)\n", uid)
			return nil
		}})
}

// Agents is GET /agents with q's filters: one page.
func (a apiBackend) Agents(ctx context.Context, aq store.AgentQuery) ([]store.AgentInfo, string, error) {
	q := url.Values{}
	if aq.Limit != 0 {
		q.Set("limit", strconv.Itoa(aq.Limit))
	}
	for k, v := range map[string]string{"state": aq.State, "kid": aq.Kid, "after": aq.After} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !aq.CreatedSince.IsZero() {
		q.Set("created_since", aq.CreatedSince.UTC().Format(time.RFC3339Nano))
	}
	if aq.InvitationID != 0 {
		q.Set("invitation", strconv.FormatUint(aq.InvitationID, 10))
	}
	var page struct {
		Agents []store.AgentInfo `json:"agents"`
		Next   *string           `json:"next"`
	}
	if err := a.c.call(ctx, http.MethodGet, "/agents", q, nil, &page, store.ScopeAgentsRead); err != nil {
		return nil, "", err
	}
	next := ""
	if page.Next != nil {
		next = *page.Next
	}
	return page.Agents, next, nil
}

// DeleteAgent is DELETE /agents/{uid}.
func (a apiBackend) DeleteAgent(ctx context.Context, uid string) error {
	var ans struct {
		Deleted bool `json:"deleted"`
	}
	return a.c.call(ctx, http.MethodDelete, "/agents"+seg(uid), nil, nil, &ans, store.ScopeAgentsWrite)
}
