// Package ops is the operator's commands of a running service, `idcli
// server agents|keys|tokens|operators|audit`: each runs on a Backend,
// today the service's database (DATABASE_URL, as the other server
// commands). idcli's main
// package mounts them with Commands, handing over what they need of it
// (flag sets, argument parsing, the database) in an Env.
package ops

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// Env is what the commands take from idcli's main package.
type Env struct {
	Stdout, Stderr io.Writer
	// Getenv reads the process environment.
	Getenv func(string) string
	// FlagSet returns a flag set named name that reports its errors and
	// usage the way every idcli command does.
	FlagSet func(name string) *flag.FlagSet
	// Parse parses the flags of fs wherever they appear in args and
	// returns the positional arguments (n: how many the command takes).
	Parse func(fs *flag.FlagSet, args []string, n int) ([]string, error)
	// Group is the command group path running one of subs.
	Group func(path, shortUsage, shortHelp, longHelp string, subs ...*ffcli.Command) *ffcli.Command
	// Database registers --database-url on fs; the function it returns
	// opens the migrated database it names, its errors worded for the
	// command line.
	Database func(fs *flag.FlagSet) func(ctx context.Context) (*store.DB, error)
	// DBError words a database error for the command line.
	DBError func(error) error
	// Dir is the working directory a relative --token-file is read from.
	Dir string
}

// Commands returns the operator's command groups, to mount under
// `idcli server`.
func Commands(env *Env) []*ffcli.Command {
	return []*ffcli.Command{agentsCmd(env), keysCmd(env), tokensCmd(env), operatorsCmd(env), auditCmd(env)}
}

// opsTimeout bounds the work of one operator command.
const opsTimeout = 30 * time.Second

// cmd is one operator command: its name and positional arguments
// (names for the usage line), its own flags, and what it does on the
// backend.
type cmd struct {
	path, args, help, longHelp string
	flagsUsage                 string // the command's own flags in the usage line
	nargs                      int
	flags                      func(fs *flag.FlagSet)
	dbOnly                     bool // runs on the database alone, never on the admin API
	// check, if set, refuses bad arguments and flags before the backend
	// is opened.
	check func(args []string) error
	run   func(ctx context.Context, o *ops, args []string) error
}

// ops is what an operator command runs with.
type ops struct {
	env    *Env
	be     backend
	word   func(error) error // words a backend's error for the command line
	asJSON bool
	by     string // the command and who ran it, as the change log records it
}

func newCmd(env *Env, c cmd) *ffcli.Command {
	fs := env.FlagSet("idcli server " + c.path)
	open := backendFlags(env, fs, c.dbOnly)
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
		ShortUsage: usage + map[bool]string{false: " [--database-url URL | --server URL [--token-file PATH]] [--json]", true: " [--database-url URL] [--json]"}[c.dbOnly],
		ShortHelp:  c.help,
		LongHelp:   c.longHelp,
		FlagSet:    fs,
		Exec: func(ctx context.Context, args []string) error {
			pos, err := env.Parse(fs, args, c.nargs)
			if err != nil {
				return err
			}
			if len(pos) != c.nargs {
				if c.nargs == 0 {
					return fmt.Errorf("server %s takes no arguments (got %q)", c.path, pos[0])
				}
				return fmt.Errorf("usage: %s", usage)
			}
			if c.check != nil {
				if err := c.check(pos); err != nil {
					return err
				}
			}
			ctx, cancel := context.WithTimeout(ctx, opsTimeout)
			defer cancel()
			be, word, closeBE, err := open(ctx)
			if err != nil {
				return err
			}
			defer closeBE()
			o := &ops{env: env, be: be, word: word, asJSON: *asJSON, by: actor(env, c.path)}
			return c.run(store.WithActor(ctx, o.by), o, pos)
		},
	}
}

// actor names the command and who ran it: "idcli server agents
// disable (user alice on host1)".
func actor(env *Env, path string) string {
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

// dbError words a failure of an operator command on the database.
func (env *Env) dbError(err error) error {
	switch {
	case errors.Is(err, store.ErrNoSuchAgent), errors.Is(err, store.ErrNoSuchKey), errors.Is(err, store.ErrNoSuchToken):
		return errors.New(strings.TrimPrefix(err.Error(), "store: ") + " in this database (check DATABASE_URL / --database-url)")
	case errors.Is(err, store.ErrNotPending), errors.Is(err, store.ErrInvalidReason):
		return errors.New(strings.TrimPrefix(err.Error(), "store: "))
	case errors.Is(err, store.ErrInvalidQuery):
		return queryError(err)
	}
	return env.DBError(err)
}

// printJSON prints v as compact JSON.
func (o *ops) printJSON(v any) error {
	enc := json.NewEncoder(o.env.Stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// queryFlags names the flag behind each refusal store.ErrInvalidQuery
// words, by the words its message begins with.
var queryFlags = []struct{ prefix, flag string }{
	{"invitation id ", "--invitation"}, {"before ", "--before"},
	{"a page holds ", "--limit"}, {"an audit page holds ", "--limit"}, {"unknown state ", "--state"},
}

// queryError words a store.ErrInvalidQuery (which the commands' own checks
// make unlikely) naming its flag, without the store's prefix.
func queryError(err error) error {
	msg := strings.TrimPrefix(err.Error(), store.ErrInvalidQuery.Error()+": ")
	for _, f := range queryFlags {
		if strings.HasPrefix(msg, f.prefix) {
			return fmt.Errorf("%s: %s", f.flag, msg)
		}
	}
	return errors.New(strings.TrimPrefix(err.Error(), "store: "))
}

// idFlag is a flag taking an id: a positive integer no larger than the
// largest signed 64-bit integer (ids are that in both databases; the
// admin API refuses a larger one, and the database drivers will not send
// it). Refused when parsed, before any backend is opened.
type idFlag struct{ p *uint64 }

func (f idFlag) String() string {
	if f.p == nil || *f.p == 0 {
		return ""
	}
	return strconv.FormatUint(*f.p, 10)
}

func (f idFlag) Set(s string) error {
	n, err := parseID(s)
	if err != nil {
		return err
	}
	*f.p = n
	return nil
}

// parseID reads s as an id (see idFlag).
func parseID(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 63)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("want a positive integer of at most %d", int64(math.MaxInt64))
	}
	return n, nil
}

func checkUID(uid string) error {
	if !signer.ValidUID(uid) {
		return fmt.Errorf("%q is not an agent uid (want agent-<24 hex>)", signer.Truncate(uid))
	}
	return nil
}

// checkUIDReason refuses a uid that is not one, and a --reason the store
// would refuse.
func checkUIDReason(uid, reason string) error {
	if err := checkUID(uid); err != nil {
		return err
	}
	if err := store.CheckReason(reason); err != nil {
		return fmt.Errorf("--reason: %s", strings.TrimPrefix(err.Error(), store.ErrInvalidReason.Error()+": "))
	}
	return nil
}
