package ops

// idcli server audit: the audit trail, newest first, filtered and paged.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/peterbourgon/ff/v3/ffcli"
)

func auditCmd(env *Env) *ffcli.Command {
	var q store.AuditQuery
	var since string
	return newCmd(env, cmd{path: "audit", flagsUsage: "[--agent UID] [--kid KID] [--action A] [--actor NAME] [--since T] [--invitation ID] [--limit N] [--before ID]",
		help: "read the audit trail: who changed what, when and why (newest first)",
		longHelp: "Each change to an agent, a key, an invitation or an operator token is one row,\n" +
			"with its actor (agent:UID, operator:TOKEN-NAME, or the idcli command run on the\n" +
			"database), the database's time, the reason given and the request id.\n" +
			"--since takes an RFC 3339 time, a date (2026-12-01, UTC) or a duration ago (24h).\n" +
			"--invitation ID: the rows about that invitation token (its id, see idcli server\n" +
			"tokens list): its creation, its revocation and the registrations that spent it.\n" +
			`With --json: {"events":[{"id","time","action","actor","agent","kid","reason","request_id","detail"}…]}.`,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&q.AgentUID, "agent", "", "only the changes to this agent")
			fs.StringVar(&q.Kid, "kid", "", "only the changes to this key")
			fs.StringVar(&q.Action, "action", "", "only this kind of change (agent.disabled, key.revoked, …)")
			fs.StringVar(&q.Actor, "actor", "", "only the changes by this actor, as shown (operator:NAME, agent:UID)")
			fs.StringVar(&since, "since", "", "only the changes at or after this time")
			fs.IntVar(&q.Limit, "limit", 100, fmt.Sprintf("show at most N rows (1 to %d)", store.MaxAuditPage))
			fs.Var(idFlag{&q.InvitationID}, "invitation", "only the rows about this invitation token (its `ID`)")
			fs.Var(idFlag{&q.Before}, "before", "show the rows older than this `ID` (the next page)")
		},
		check: func([]string) error {
			if q.Limit < 1 || q.Limit > store.MaxAuditPage {
				return fmt.Errorf("--limit %d: want 1 to %d", q.Limit, store.MaxAuditPage)
			}
			if q.AgentUID != "" {
				if err := checkUID(q.AgentUID); err != nil {
					return fmt.Errorf("--agent: %w", err)
				}
			}
			if q.Kid != "" && !store.ValidKid(q.Kid) {
				return fmt.Errorf("--kid %q: want a key's RFC 7638 thumbprint, 43 base64url characters", signer.Truncate(q.Kid))
			}
			if q.Action != "" && !slices.Contains(store.Actions(), q.Action) {
				return fmt.Errorf("--action %q: want one of %s", signer.Truncate(q.Action), strings.Join(store.Actions(), ", "))
			}
			if q.Actor != "" && (len(q.Actor) > 128 || store.CheckReason(q.Actor) != nil) {
				return fmt.Errorf("--actor %q: want an actor as the trail shows it (operator:NAME, agent:UID), at most 128 bytes", signer.Truncate(q.Actor))
			}
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return err
				}
				q.Since = t
			}
			return nil
		},
		run: func(ctx context.Context, o *ops, _ []string) error {
			rows, err := o.be.Audit(ctx, q)
			if err != nil {
				return o.word(err)
			}
			if o.asJSON {
				return o.printJSON(struct {
					Events []store.AuditEvent `json:"events"`
				}{rows})
			}
			if len(rows) == 0 {
				fmt.Fprintln(o.env.Stdout, "no audit events")
				return nil
			}
			for _, e := range rows {
				fmt.Fprintln(o.env.Stdout, auditLine(e))
			}
			if len(rows) == q.Limit {
				fmt.Fprintf(o.env.Stdout, "⮕ next page: [idcli server audit%s --before %d]\n", auditFilters(q, since), rows[len(rows)-1].ID)
			}
			return nil
		}})
}

// parseSince reads --since: an RFC 3339 time, a date (midnight UTC), or
// a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time (2026-12-01T09:00:00Z), a date (2026-12-01) or a duration ago (24h)", signer.Truncate(s))
}

// auditLine is one row of the audit trail on one line; what the row's
// writers chose (actor, reason, detail) is quoted when it holds anything
// but printable ASCII without spaces, so that no row can pass for two or
// move the terminal.
func auditLine(e store.AuditEvent) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d  %s  %s  by %s", e.ID, e.CreatedAt.UTC().Format(time.RFC3339), word(e.Action), word(e.Actor))
	for _, f := range []struct{ name, v string }{{"agent", e.AgentUID}, {"kid", e.Kid}, {"reason", e.Reason}, {"request", e.RequestID}} {
		if f.v != "" {
			fmt.Fprintf(&b, "  %s %s", f.name, word(f.v))
		}
	}
	if len(e.Detail) > 0 {
		// Compact JSON (PostgreSQL's jsonb comes back spaced), as is
		// when it is printable ASCII without spaces.
		var c bytes.Buffer
		d := string(e.Detail)
		if json.Compact(&c, e.Detail) == nil {
			d = c.String()
		}
		if !graphic(d) {
			d = strconv.Quote(d)
		}
		fmt.Fprintf(&b, "  detail %s", d)
	}
	return b.String()
}

// word is s as is when it is printable ASCII without spaces or quotes,
// else quoted.
func word(s string) string {
	if s == "" || !graphic(s) || strings.Contains(s, `"`) {
		return strconv.Quote(s)
	}
	return s
}

// graphic reports whether s is printable ASCII without spaces.
func graphic(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// auditFilters is the command line's filters, for the next page's command.
func auditFilters(q store.AuditQuery, since string) string {
	var b strings.Builder
	for _, f := range []struct{ flag, v string }{{"agent", q.AgentUID}, {"kid", q.Kid}, {"action", q.Action}, {"actor", q.Actor}, {"since", since}} {
		if f.v != "" {
			fmt.Fprintf(&b, " --%s %s", f.flag, shellWord(f.v))
		}
	}
	if q.InvitationID != 0 {
		fmt.Fprintf(&b, " --invitation %d", q.InvitationID)
	}
	if q.Limit != 100 {
		fmt.Fprintf(&b, " --limit %d", q.Limit)
	}
	return b.String()
}

// shellWord quotes s for a POSIX shell unless it needs none.
func shellWord(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/+@=,", r)) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}
