package ops

// idcli server keys: revoke.

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/peterbourgon/ff/v3/ffcli"
)

func keysCmd(env *Env) *ffcli.Command {
	var reason string
	return env.Group("idcli server keys", "idcli server keys <revoke> [flags]",
		"revoke agents' keys", "",
		newCmd(env, cmd{path: "keys revoke", args: "UID KID", nargs: 2, flagsUsage: "[--reason TEXT]",
			help: "revoke an agent's key: every instance refuses it within 1 s (the agent keeps its other keys)",
			longHelp: "A KID may begin with - (one key id in 64 does): idcli server keys revoke UID -KID\n" +
				"revokes it, and so does idcli server keys revoke -- UID -KID (after --, every word\n" +
				"is an argument); flags may come before or after.\n" +
				`With --json: {"uid","key":{"kid","created_at","revoked_at"},"changed":true|false,"active_keys":N}.`,
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&reason, "reason", "", "why, for the audit trail (at most 500 bytes)")
			},
			check: func(args []string) error {
				if !store.ValidKid(args[1]) {
					return fmt.Errorf("%q is not a key id (a key's thumbprint, 43 base64url characters: see idcli server agents show UID)", signer.Truncate(args[1]))
				}
				return checkUIDReason(args[0], reason)
			},
			run: func(ctx context.Context, o *ops, args []string) error {
				uid, kid := args[0], args[1]
				rv, err := o.be.RevokeKey(ctx, uid, kid, reason)
				if err != nil {
					return o.word(err)
				}
				if rv.Changed {
					o.logChange("key revoked", slog.String("uid", uid), slog.String("kid", kid), slog.String("reason", reason))
				}
				if o.asJSON {
					return o.printJSON(rv)
				}
				if !rv.Changed {
					fmt.Fprintf(o.env.Stdout, "• key %s of %s already revoked\n", kid, uid)
					return nil
				}
				fmt.Fprintf(o.env.Stdout, "✔ key %s of %s revoked (every instance within 1 s, third parties within 60 s)\n", kid, uid)
				if rv.ActiveKeys == 0 {
					fmt.Fprintf(o.env.Stdout, "• %s has no active key left: it can neither sign nor rotate; it needs a new registration\n", uid)
				}
				return nil
			}}),
	)
}
