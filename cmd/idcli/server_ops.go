package main

// Operating a running service: `idcli server agents|keys|tokens`, on the
// database of the service (DATABASE_URL, as the other server commands).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// opsTimeout bounds the database work of one operator command.
const opsTimeout = 30 * time.Second

// opsCmd is one operator command: its name and positional arguments
// (names for the usage line), its own flags, and what it does with the
// opened database.
type opsCmd struct {
	path, args, help, longHelp string
	flagsUsage                 string // the command's own flags in the usage line
	nargs                      int
	flags                      func(fs *flag.FlagSet)
	run                        func(ctx context.Context, o *ops, args []string) error
}

// ops is what an operator command runs with.
type ops struct {
	env    *cliEnv
	db     *store.DB
	asJSON bool
	by     string // the command and who ran it, as the change log records it
}

func newOpsCmd(env *cliEnv, c opsCmd) *ffcli.Command {
	fs := newFlagSet("idcli server "+c.path, env)
	var f serverFlags
	f.register(fs, false)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if c.flags != nil {
		c.flags(fs)
	}
	usage := "idcli server " + c.path
	if c.args != "" {
		usage += " " + c.args
	}
	if c.flagsUsage != "" {
		usage += " " + c.flagsUsage
	}
	return &ffcli.Command{
		Name:       c.path[strings.LastIndex(c.path, " ")+1:],
		ShortUsage: usage + " [--database-url URL] [--json]",
		ShortHelp:  c.help,
		LongHelp:   c.longHelp,
		FlagSet:    fs,
		Exec: func(ctx context.Context, args []string) error {
			pos, err := env.parseInterspersed(fs, args, c.nargs)
			if err != nil {
				return err
			}
			if len(pos) != c.nargs {
				if c.nargs == 0 {
					return fmt.Errorf("server %s takes no arguments (got %q)", c.path, pos[0])
				}
				return fmt.Errorf("usage: %s", usage)
			}
			s, err := resolveServerSettings(env, f, false)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(ctx, opsTimeout)
			defer cancel()
			url := sqliteURLAbs(env, s.DatabaseURL)
			db, err := store.Open(ctx, url)
			if err != nil {
				return cliDBError(err)
			}
			defer db.Close()
			if err := db.CheckMigrated(ctx); err != nil {
				return cliDBError(err)
			}
			o := &ops{env: env, db: db, asJSON: *asJSON, by: opsActor(env, c.path)}
			return c.run(store.WithActor(ctx, o.by), o, pos)
		},
	}
}

// opsActor names the command and who ran it: "idcli server agents
// disable (user alice on host1)".
func opsActor(env *cliEnv, path string) string {
	user := env.Getenv("USER")
	if user == "" {
		user = "?"
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("idcli server %s (user %s on %s)", path, user, host)
}

// logChange writes the log line of a change made by an operator command
// to stderr: what changed, and who or what command changed it.
func (o *ops) logChange(msg string, attrs ...slog.Attr) {
	log := slog.New(slog.NewTextHandler(o.env.Stderr, nil))
	log.LogAttrs(context.Background(), slog.LevelInfo, msg, append(attrs, slog.String("by", o.by))...)
}

// opsError words an operator command's failure.
func opsError(err error) error {
	switch {
	case errors.Is(err, store.ErrNoSuchAgent), errors.Is(err, store.ErrNoSuchKey), errors.Is(err, store.ErrNoSuchToken):
		return errors.New(strings.TrimPrefix(err.Error(), "refserver: ") + " in this database (check DATABASE_URL / --database-url)")
	}
	return cliDBError(err)
}

func checkUIDArg(uid string) error {
	if !signer.ValidUID(uid) {
		return fmt.Errorf("%q is not an agent uid (want agent-<24 hex>)", signer.Truncate(uid))
	}
	return nil
}

func newServerAgentsCmd(env *cliEnv) *ffcli.Command {
	var limit int
	var after string
	var disabledOnly bool
	return newGroupCmd(env, "idcli server agents", "idcli server agents <list|show|disable|enable> [flags]",
		"list, inspect, disable and enable the service's agents", "",
		newOpsCmd(env, opsCmd{path: "agents list", flagsUsage: "[--limit N] [--after UID] [--disabled]", help: "list the registered agents (oldest uid first)",
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
				list, err := o.db.ListAgents(ctx, after, limit, disabledOnly)
				if err != nil {
					return opsError(err)
				}
				if o.asJSON {
					return writeJSON(o.env.Stdout, struct {
						Agents []store.AgentInfo `json:"agents"`
					}{list}, false)
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
		newOpsCmd(env, opsCmd{path: "agents show", args: "UID", nargs: 1, help: "show an agent and its keys",
			longHelp: `With --json: {"uid","created_at","updated_at","disabled_at","active_keys","keys":[{"kid","created_at","revoked_at"}…]}.`,
			run: func(ctx context.Context, o *ops, args []string) error {
				if err := checkUIDArg(args[0]); err != nil {
					return err
				}
				a, err := o.db.ShowAgent(ctx, args[0])
				if err != nil {
					return opsError(err)
				}
				if o.asJSON {
					return writeJSON(o.env.Stdout, a, false)
				}
				printAgent(o.env.Stdout, a)
				return nil
			}}),
		newOpsCmd(env, opsCmd{path: "agents disable", args: "UID", nargs: 1,
			help:     "disable an agent: every instance refuses its requests (403) within 1 s; its directory lists no key, so third parties drop its keys within the directory's max-age (60 s)",
			longHelp: `With --json: {"agent":{…as agents show},"changed":true|false}.`,
			run:      func(ctx context.Context, o *ops, args []string) error { return o.setDisabled(ctx, args[0], true) }}),
		newOpsCmd(env, opsCmd{path: "agents enable", args: "UID", nargs: 1,
			help:     "enable a disabled agent again (every instance within 1 s, third parties within 60 s)",
			longHelp: `With --json: {"agent":{…as agents show},"changed":true|false}.`,
			run:      func(ctx context.Context, o *ops, args []string) error { return o.setDisabled(ctx, args[0], false) }}),
	)
}

func agentStatus(a store.AgentInfo) string {
	if a.DisabledAt != nil {
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

func (o *ops) setDisabled(ctx context.Context, uid string, disabled bool) error {
	if err := checkUIDArg(uid); err != nil {
		return err
	}
	a, changed, err := o.db.SetAgentDisabled(ctx, uid, disabled, "")
	if err != nil {
		return opsError(err)
	}
	word := map[bool]string{true: "disabled", false: "enabled"}[disabled]
	if changed {
		o.logChange("agent "+word, slog.String("uid", uid))
	}
	if o.asJSON {
		return writeJSON(o.env.Stdout, struct {
			Agent   store.AgentInfo `json:"agent"`
			Changed bool            `json:"changed"`
		}{a, changed}, false)
	}
	if !changed {
		fmt.Fprintf(o.env.Stdout, "• agent %s already %s\n", uid, word)
		return nil
	}
	fmt.Fprintf(o.env.Stdout, "✔ agent %s %s (every instance within 1 s, third parties within 60 s)\n", uid, word)
	return nil
}

func newServerKeysCmd(env *cliEnv) *ffcli.Command {
	return newGroupCmd(env, "idcli server keys", "idcli server keys <revoke> [flags]",
		"revoke agents' keys", "",
		newOpsCmd(env, opsCmd{path: "keys revoke", args: "UID KID", nargs: 2,
			help: "revoke an agent's key: every instance refuses it within 1 s (the agent keeps its other keys)",
			longHelp: "A KID may begin with - (one key id in 64 does): idcli server keys revoke UID -KID\n" +
				"revokes it, and so does idcli server keys revoke -- UID -KID (after --, every word\n" +
				"is an argument); flags may come before or after.\n" +
				`With --json: {"uid","key":{"kid","created_at","revoked_at"},"changed":true|false,"active_keys":N}.`,
			run: func(ctx context.Context, o *ops, args []string) error {
				uid, kid := args[0], args[1]
				if err := checkUIDArg(uid); err != nil {
					return err
				}
				k, changed, err := o.db.RevokeKey(ctx, uid, kid, "")
				if err != nil {
					return opsError(err)
				}
				if changed {
					o.logChange("key revoked", slog.String("uid", uid), slog.String("kid", kid))
				}
				a, err := o.db.ShowAgent(ctx, uid)
				if err != nil {
					return opsError(err)
				}
				if o.asJSON {
					return writeJSON(o.env.Stdout, struct {
						UID        string        `json:"uid"`
						Key        store.KeyInfo `json:"key"`
						Changed    bool          `json:"changed"`
						ActiveKeys int           `json:"active_keys"`
					}{uid, k, changed, a.ActiveKeys}, false)
				}
				if !changed {
					fmt.Fprintf(o.env.Stdout, "• key %s of %s already revoked\n", kid, uid)
					return nil
				}
				fmt.Fprintf(o.env.Stdout, "✔ key %s of %s revoked (every instance within 1 s, third parties within 60 s)\n", kid, uid)
				if a.ActiveKeys == 0 {
					fmt.Fprintf(o.env.Stdout, "• %s has no active key left: it can neither sign nor rotate; it needs a new registration\n", uid)
				}
				return nil
			}}),
	)
}

func newServerTokensCmd(env *cliEnv) *ffcli.Command {
	var uses int64
	var expires time.Duration
	var note string
	return newGroupCmd(env, "idcli server tokens", "idcli server tokens <create|list|revoke> [flags]",
		"invitation tokens, for a service whose registration needs one (idcli server start --registration token)", "",
		newOpsCmd(env, opsCmd{path: "tokens create", flagsUsage: "[--uses N] [--expires DURATION] [--note TEXT]",
			help: "create an invitation token (printed once; only its digest is stored)",
			longHelp: `With --json: {"token":"agentid_inv_…","invite":{"id","prefix","note","uses_left","used","created_at","expires_at","revoked_at"}}.` + "\n" +
				"An agent registers with it: idcli agent init --hostname URL --invite TOKEN.",
			flags: func(fs *flag.FlagSet) {
				fs.Int64Var(&uses, "uses", 1, "how many agents may register with the token")
				fs.DurationVar(&expires, "expires", 7*24*time.Hour, "how long the token is good for (0: no expiry)")
				fs.StringVar(&note, "note", "", "a note for the operator (who the token is for)")
			},
			run: func(ctx context.Context, o *ops, _ []string) error {
				if uses < 1 {
					return fmt.Errorf("--uses %d: want 1 or more", uses)
				}
				if expires < 0 {
					return fmt.Errorf("--expires %v: want 0 (no expiry) or more", expires)
				}
				token, info, err := o.db.CreateInvite(ctx, note, uses, expires)
				if err != nil {
					return opsError(err)
				}
				o.logChange("invitation token created", slog.Uint64("id", info.ID), slog.String("prefix", info.Prefix), slog.Int64("uses", uses))
				if o.asJSON {
					return writeJSON(o.env.Stdout, struct {
						Token  string           `json:"token"`
						Invite store.InviteInfo `json:"invite"`
					}{token, info}, false)
				}
				fmt.Fprintf(o.env.Stdout, "✔ invitation token %d created (%s): shown once, store it now\n%s\n", info.ID, inviteTerms(info), token)
				fmt.Fprintln(o.env.Stdout, "⮕ the agent registers with: [idcli agent init --hostname URL --invite TOKEN]")
				return nil
			}}),
		newOpsCmd(env, opsCmd{path: "tokens list", help: "list the invitation tokens (never the tokens themselves)",
			longHelp: `With --json: {"tokens":[{"id","prefix","note","uses_left","used","created_at","expires_at","revoked_at"}…]}.`,
			run: func(ctx context.Context, o *ops, _ []string) error {
				list, err := o.db.ListInvites(ctx)
				if err != nil {
					return opsError(err)
				}
				if o.asJSON {
					return writeJSON(o.env.Stdout, struct {
						Tokens []store.InviteInfo `json:"tokens"`
					}{list}, false)
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
		newOpsCmd(env, opsCmd{path: "tokens revoke", args: "ID", nargs: 1, help: "revoke an invitation token",
			longHelp: `With --json: {"invite":{…as tokens list},"changed":true|false}.`,
			run: func(ctx context.Context, o *ops, args []string) error {
				id, err := strconv.ParseUint(args[0], 10, 64)
				if err != nil {
					return fmt.Errorf("%q is not a token id (see idcli server tokens list)", signer.Truncate(args[0]))
				}
				info, changed, err := o.db.RevokeInvite(ctx, id)
				if err != nil {
					return opsError(err)
				}
				if changed {
					o.logChange("invitation token revoked", slog.Uint64("id", id))
				}
				if o.asJSON {
					return writeJSON(o.env.Stdout, struct {
						Invite  store.InviteInfo `json:"invite"`
						Changed bool             `json:"changed"`
					}{info, changed}, false)
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
