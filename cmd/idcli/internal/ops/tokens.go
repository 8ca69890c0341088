package ops

// idcli server tokens: invitation tokens, create, list, revoke.

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/peterbourgon/ff/v3/ffcli"
)

func tokensCmd(env *Env) *ffcli.Command {
	var uses int64
	var expires time.Duration
	var note string
	var id uint64 // of tokens revoke
	return env.Group("idcli server tokens", "idcli server tokens <create|list|revoke> [flags]",
		"invitation tokens, for a service whose registration needs one (idcli server start --registration token)", "",
		newCmd(env, cmd{path: "tokens create", flagsUsage: "[--uses N] [--expires DURATION] [--note TEXT]",
			help: "create an invitation token (printed once; only its digest is stored)",
			longHelp: `With --json: {"token":"agentid_inv_…","invite":{"id","prefix","note","uses_left","used","created_at","expires_at","revoked_at"}}.` + "\n" +
				"An agent registers with it: idcli agent init --hostname URL --invite TOKEN.",
			flags: func(fs *flag.FlagSet) {
				fs.Int64Var(&uses, "uses", 1, fmt.Sprintf("how many agents may register with the token (1 to %d)", maxInviteUses))
				fs.DurationVar(&expires, "expires", 7*24*time.Hour, "how long the token is good for, in whole seconds (0: no expiry; at most 87600h)")
				fs.StringVar(&note, "note", "", "a note for the operator (who the token is for)")
			},
			check: func([]string) error {
				if uses < 1 || uses > maxInviteUses {
					return fmt.Errorf("--uses %d: want 1 to %d", uses, maxInviteUses)
				}
				if expires < 0 || expires > maxInviteTTL || expires%time.Second != 0 {
					return fmt.Errorf("--expires %v: want 0 (no expiry) or whole seconds up to %dh", expires, maxInviteTTL/time.Hour)
				}
				return nil
			},
			run: func(ctx context.Context, o *ops, _ []string) error {
				token, info, err := o.be.CreateInvite(ctx, note, uses, expires)
				if err != nil {
					return o.word(err)
				}
				o.logChange("invitation token created", slog.Uint64("id", info.ID), slog.String("prefix", info.Prefix), slog.Int64("uses", uses))
				if o.asJSON {
					return o.printJSON(struct {
						Token  string           `json:"token"`
						Invite store.InviteInfo `json:"invite"`
					}{token, info})
				}
				fmt.Fprintf(o.env.Stdout, "✔ invitation token %d created (%s): shown once, store it now\n%s\n", info.ID, inviteTerms(info), token)
				fmt.Fprintln(o.env.Stdout, "⮕ the agent registers with: [idcli agent init --hostname URL --invite TOKEN]")
				return nil
			}}),
		newCmd(env, cmd{path: "tokens list", help: "list the invitation tokens (never the tokens themselves)",
			longHelp: `With --json: {"tokens":[{"id","prefix","note","uses_left","used","created_at","expires_at","revoked_at"}…]}.`,
			run: func(ctx context.Context, o *ops, _ []string) error {
				list, err := o.be.ListInvites(ctx)
				if err != nil {
					return o.word(err)
				}
				if o.asJSON {
					return o.printJSON(struct {
						Tokens []store.InviteInfo `json:"tokens"`
					}{list})
				}
				if len(list) == 0 {
					fmt.Fprintln(o.env.Stdout, "no invitation tokens")
					return nil
				}
				for _, t := range list {
					fmt.Fprintf(o.env.Stdout, "%d  %s…  %s  %q\n", t.ID, t.Prefix, inviteTerms(t), t.Note)
				}
				return nil
			}}),
		newCmd(env, cmd{path: "tokens revoke", args: "ID", nargs: 1, help: "revoke an invitation token",
			longHelp: `With --json: {"invite":{…as tokens list},"changed":true|false}.`,
			check: func(args []string) (err error) {
				if id, err = parseID(args[0]); err != nil {
					return fmt.Errorf("%q is not a token id: %v (see idcli server tokens list)", signer.Truncate(args[0]), err)
				}
				return nil
			},
			run: func(ctx context.Context, o *ops, args []string) error {
				info, changed, err := o.be.RevokeInvite(ctx, id)
				if err != nil {
					return o.word(err)
				}
				if changed {
					o.logChange("invitation token revoked", slog.Uint64("id", id))
				}
				if o.asJSON {
					return o.printJSON(struct {
						Invite  store.InviteInfo `json:"invite"`
						Changed bool             `json:"changed"`
					}{info, changed})
				}
				if !changed {
					fmt.Fprintf(o.env.Stdout, "• invitation token %d already revoked\n", id)
					return nil
				}
				fmt.Fprintf(o.env.Stdout, "✔ invitation token %d revoked\n", id)
				return nil
			}}),
	)
}

// Bounds of tokens create, the admin API's (POST /invitations), on the
// database too, so that the command does the same on both.
const (
	maxInviteUses = 1_000_000
	maxInviteTTL  = 10 * 365 * 24 * time.Hour
)

// inviteTerms says what an invitation token is still good for.
func inviteTerms(t store.InviteInfo) string {
	switch {
	case t.RevokedAt != nil:
		return "revoked " + t.RevokedAt.Format(time.RFC3339)
	case t.UsesLeft == 0:
		return fmt.Sprintf("used up (%d uses)", t.Used)
	}
	s := fmt.Sprintf("%d use(s) left", t.UsesLeft)
	if t.ExpiresAt != nil {
		s += ", expires " + t.ExpiresAt.Format(time.RFC3339)
	}
	return s
}
