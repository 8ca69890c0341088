package ops

// idcli server operators: the admin API's operator tokens, create, list,
// revoke. Always on the database, never through the admin API: making or
// ending an operator's right is the one step that needs the database, so
// that no token can mint another.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/agentid/agentid/refserver/store"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// defaultOperatorTTL is the life of an operator token without --expires.
const defaultOperatorTTL = 90 * 24 * time.Hour

func operatorsCmd(env *Env) *ffcli.Command {
	var scopes string
	var expires time.Duration
	return env.Group("idcli server operators", "idcli server operators <create|list|revoke> [flags]",
		"operator tokens of the admin API (/admin/v1/), on the database: create, list, revoke", "",
		newDBCmd(env, dbCmd{path: "operators create", args: "NAME", nargs: 1, flagsUsage: "--scopes SCOPE,… [--expires DURATION]",
			help: "create an operator token for the admin API (printed once; only its digest is stored)",
			longHelp: "NAME: 1 to 64 of a-z 0-9 . _ -, never reused (it names the token in the audit trail).\n" +
				"Scopes: " + strings.Join(store.Scopes(), ", ") + ".\n" +
				`With --json: {"token":"aidop_…","operator":{"name","prefix","scopes":[…],"state","created_at","expires_at","revoked_at","last_used_at"}}.`,
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&scopes, "scopes", "", "the scopes, comma-separated ("+strings.Join(store.Scopes(), ",")+")")
				fs.DurationVar(&expires, "expires", defaultOperatorTTL, "how long the token is good for (at most 8760h, a year)")
			},
			run: func(ctx context.Context, o *ops, db *store.DB, args []string) error {
				if scopes == "" {
					return fmt.Errorf("--scopes is required: one or more of %s, comma-separated", strings.Join(store.Scopes(), ","))
				}
				list, err := store.ParseScopes(scopes)
				if err != nil {
					return operatorError(err)
				}
				if expires <= 0 || expires > store.MaxOperatorTokenTTL {
					return fmt.Errorf("--expires %v: want more than 0 and at most %v (a year); operator tokens always expire", expires, store.MaxOperatorTokenTTL)
				}
				token, info, err := db.CreateOperatorToken(ctx, args[0], list, expires)
				if err != nil {
					return operatorError(err)
				}
				o.logChange("operator token created", slog.String("name", info.Name), slog.String("scopes", strings.Join(info.Scopes, " ")),
					slog.Time("expires", info.ExpiresAt))
				if o.asJSON {
					return o.printJSON(struct {
						Token    string                  `json:"token"`
						Operator store.OperatorTokenInfo `json:"operator"`
					}{token, info})
				}
				fmt.Fprintf(o.env.Stdout, "✔ operator token %s created (%s; expires %s): shown once, store it now\n%s\n",
					info.Name, strings.Join(info.Scopes, ", "), info.ExpiresAt.Format(time.RFC3339), token)
				fmt.Fprintln(o.env.Stdout, "⮕ send it as [Authorization: Bearer TOKEN] to /admin/v1/ (keep it out of command lines)")
				return nil
			}}),
		newDBCmd(env, dbCmd{path: "operators list", help: "list the operator tokens (never the tokens themselves)",
			longHelp: `With --json: {"operators":[{"name","prefix","scopes":[…],"state","created_at","expires_at","revoked_at","last_used_at"}…]}.`,
			run: func(ctx context.Context, o *ops, db *store.DB, _ []string) error {
				list, err := db.ListOperatorTokens(ctx)
				if err != nil {
					return o.word(err)
				}
				if o.asJSON {
					return o.printJSON(struct {
						Operators []store.OperatorTokenInfo `json:"operators"`
					}{list})
				}
				if len(list) == 0 {
					fmt.Fprintln(o.env.Stdout, "no operator tokens")
					return nil
				}
				fmt.Fprintf(o.env.Stdout, "%-20s  %-13s  %-8s  %-20s  %-20s  %s\n", "NAME", "PREFIX", "STATE", "EXPIRES", "LAST USED", "SCOPES")
				for _, t := range list {
					used := "never"
					if t.LastUsedAt != nil {
						used = t.LastUsedAt.Format(time.RFC3339)
					}
					fmt.Fprintf(o.env.Stdout, "%-20s  %-13s  %-8s  %-20s  %-20s  %s\n", t.Name, t.Prefix+"…", t.State,
						t.ExpiresAt.Format(time.RFC3339), used, strings.Join(t.Scopes, ","))
				}
				return nil
			}}),
		newDBCmd(env, dbCmd{path: "operators revoke", args: "NAME", nargs: 1,
			help:     "revoke an operator token: the admin API refuses it from its next request",
			longHelp: `With --json: {"operator":{…as operators list},"changed":true|false}.`,
			run: func(ctx context.Context, o *ops, db *store.DB, args []string) error {
				info, changed, err := db.RevokeOperatorToken(ctx, args[0])
				if err != nil {
					return operatorError(err)
				}
				if changed {
					o.logChange("operator token revoked", slog.String("name", info.Name))
				}
				if o.asJSON {
					return o.printJSON(struct {
						Operator store.OperatorTokenInfo `json:"operator"`
						Changed  bool                    `json:"changed"`
					}{info, changed})
				}
				if !changed {
					fmt.Fprintf(o.env.Stdout, "• operator token %s already revoked\n", info.Name)
					return nil
				}
				fmt.Fprintf(o.env.Stdout, "✔ operator token %s revoked (refused from its next request)\n", info.Name)
				return nil
			}}),
	)
}

// operatorError words a failure of an operators command.
func operatorError(err error) error {
	switch {
	case errors.Is(err, store.ErrInvalidOperatorToken):
		return errors.New(strings.TrimPrefix(err.Error(), "store: invalid operator token request: "))
	case errors.Is(err, store.ErrOperatorTokenExists):
		return errors.New(strings.TrimPrefix(err.Error(), "store: "))
	case errors.Is(err, store.ErrNoSuchOperatorToken):
		return errors.New("no operator token " + strings.TrimPrefix(err.Error(), "store: no such operator token: ") +
			" in this database (see idcli server operators list; check DATABASE_URL / --database-url)")
	}
	return err
}

// dbCmd is a command that runs on the database alone (never on the
// admin API): cmd with a run that takes the database.
type dbCmd struct {
	path, args, help, longHelp, flagsUsage string
	nargs                                  int
	flags                                  func(fs *flag.FlagSet)
	run                                    func(ctx context.Context, o *ops, db *store.DB, args []string) error
}

// newDBCmd is newCmd for a dbCmd: run gets the database the backend is,
// and a backend that is not the database is refused.
func newDBCmd(env *Env, c dbCmd) *ffcli.Command {
	return newCmd(env, cmd{path: c.path, args: c.args, help: c.help, longHelp: c.longHelp, flagsUsage: c.flagsUsage,
		nargs: c.nargs, flags: c.flags, dbOnly: true,
		run: func(ctx context.Context, o *ops, args []string) error {
			db, ok := o.be.(dbBackend)
			if !ok {
				return fmt.Errorf("idcli server %s runs on the database only (DATABASE_URL / --database-url), never through the admin API", c.path)
			}
			return c.run(ctx, o, db.DB, args)
		}})
}
