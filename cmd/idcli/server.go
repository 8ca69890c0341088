package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentid/agentid/cmd/idcli/internal/hint"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer/envfile"
	"github.com/agentid/agentid/signer/redact"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// Server configuration defaults (the PORT and DATABASE_URL rows of
// docs/deployment.md).
const (
	defaultServerPort        = "3000"
	defaultServerDatabaseURL = "postgres://localhost/service_production"
)

// serverFlags are the flags shared by the server commands; "" means unset.
type serverFlags struct {
	port, hostname, databaseURL string
}

func (f *serverFlags) register(fs *flag.FlagSet, withPortHost bool) {
	if withPortHost {
		fs.StringVar(&f.port, "port", "", "port to listen on (default: PORT, then "+defaultServerPort+")")
		fs.StringVar(&f.hostname, "hostname", "", "public base URL with scheme (default: HOSTNAME, then http://localhost:<port>)")
	}
	fs.StringVar(&f.databaseURL, "database-url", "", "database URL (default: DATABASE_URL, then "+defaultServerDatabaseURL+")")
}

// serverSettings are the resolved PORT, HOSTNAME and DATABASE_URL.
type serverSettings struct {
	Port, Hostname, DatabaseURL string
}

// resolveServerSettings applies flags > process environment > ./.env > defaults.
// HOSTNAME is resolved (and a scheme-less value warned about) only when
// needHostname is set: the db: commands do not use it.
func resolveServerSettings(env *cliEnv, f serverFlags, needHostname bool) (serverSettings, error) {
	ef, err := envfile.Read(filepath.Join(env.Dir, ".env"))
	if err != nil {
		return serverSettings{}, err
	}
	var s serverSettings
	lookup := func(flagValue, name string) string {
		if flagValue != "" {
			return flagValue
		}
		if v := env.Getenv(name); v != "" {
			return v
		}
		v, _ := ef.Get(name)
		return v
	}
	s.Port = lookup(f.port, "PORT")
	portGiven := s.Port != ""
	if s.Port == "" {
		s.Port = defaultServerPort
	}
	if n, err := strconv.Atoi(s.Port); err != nil || n < 0 || n > 65535 {
		return serverSettings{}, fmt.Errorf("port %q is not a port number (0-65535)", s.Port)
	}
	s.DatabaseURL = lookup(f.databaseURL, "DATABASE_URL")
	if s.DatabaseURL == "" {
		s.DatabaseURL = defaultServerDatabaseURL
	}
	if store.DatabaseKind(s.DatabaseURL) == "" {
		//lint:ignore ST1005 the message ends with the URL form sqlite::memory:
		return serverSettings{}, fmt.Errorf("DATABASE_URL %s is not supported: use postgres://USER:PASS@HOST:PORT/DATABASE, sqlite://PATH or sqlite::memory:", redact.URL(s.DatabaseURL))
	}

	if !needHostname {
		return s, nil
	}
	// HOSTNAME: a flag without a scheme is an error; a variable without a
	// scheme is most likely the shell's machine name and is skipped.
	candidates := []struct{ value, source string }{{f.hostname, "--hostname"}, {env.Getenv("HOSTNAME"), "the environment"}}
	if v, ok := ef.Get("HOSTNAME"); ok {
		candidates = append(candidates, struct{ value, source string }{v, ".env"})
	}
	for _, c := range candidates {
		if c.value == "" {
			continue
		}
		if c.source != "--hostname" && !strings.Contains(c.value, "://") {
			fmt.Fprintf(env.Stderr, "idcli: warning: ignoring HOSTNAME=%q from %s: it has no scheme (want e.g. https://agentid.example)\n", c.value, c.source)
			continue
		}
		svc, err := refserver.ParseHostname(c.value)
		if err != nil {
			return serverSettings{}, fmt.Errorf("%s: %s", c.source, strings.TrimPrefix(err.Error(), "refserver: "))
		}
		s.Hostname = svc.String()
		// A local HOSTNAME names the port the server listens on: from
		// --hostname unless --port is given, from a variable unless PORT is
		// set anywhere.
		if port, ok := localPort(c.value); ok && f.port == "" && (c.source == "--hostname" || !portGiven) {
			s.Port = port
		}
		break
	}
	if s.Hostname == "" {
		s.Hostname = "http://localhost:" + s.Port
	}
	return s, nil
}

// localPort returns the port written in hostname, a valid HOSTNAME value,
// when it names this machine (localhost, a *.localhost name or a loopback
// address). The scheme's default port counts when written
// ("http://localhost:80" is port 80), though the service URL drops it.
func localPort(hostname string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(hostname))
	if err != nil || u.Port() == "" {
		return "", false
	}
	return u.Port(), hint.IsLocalHost(strings.ToLower(u.Hostname()))
}

// dbJSON is the --json output of the `idcli server db:*` commands.
type dbJSON struct {
	Command  string `json:"command"`  // db:create, db:migrate or db:drop
	Database string `json:"database"` // the PostgreSQL database name, the SQLite file, or :memory:
	// Changed is true when the command created, dropped or migrated the
	// database, false when it already was as asked.
	Changed bool `json:"changed"`
}

// dbMigrateJSON is the --json output of `idcli server db:migrate`.
type dbMigrateJSON struct {
	dbJSON
	// Applied lists the migrations applied, oldest first.
	Applied []dbMigration `json:"applied"`
}

type dbMigration struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

func newServerDBCmd(env *cliEnv, name, help string, do func(ctx context.Context, env *cliEnv, s serverSettings, asJSON bool) error) *ffcli.Command {
	fs := newFlagSet("idcli server "+name, env)
	var f serverFlags
	f.register(fs, false)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	return &ffcli.Command{
		Name:       name,
		ShortUsage: "idcli server " + name + " [--database-url URL] [--json]",
		ShortHelp:  help,
		LongHelp:   `With --json: {"command":"` + name + `","database":NAME,"changed":true|false` + map[bool]string{true: `,"applied":[{"id","name"}…]}.`, false: `}.`}[name == "db:migrate"],
		FlagSet:    fs,
		Exec: func(ctx context.Context, args []string) error {
			if err := noArgs("server "+name, args); err != nil {
				return err
			}
			s, err := resolveServerSettings(env, f, false)
			if err != nil {
				return err
			}
			return do(ctx, env, s, *asJSON)
		},
	}
}

func serverDBCreate(ctx context.Context, env *cliEnv, s serverSettings, asJSON bool) error {
	name, created, err := store.CreateDatabase(ctx, sqliteURLAbs(env, s.DatabaseURL))
	if asJSON && err == nil {
		return writeJSON(env.Stdout, dbJSON{Command: "db:create", Database: name, Changed: created}, false)
	}
	return printDBChange(env, "create", "Created", "already exists", name, created, err)
}

func serverDBDrop(ctx context.Context, env *cliEnv, s serverSettings, asJSON bool) error {
	name, dropped, err := store.DropDatabase(ctx, sqliteURLAbs(env, s.DatabaseURL))
	if asJSON && err == nil {
		return writeJSON(env.Stdout, dbJSON{Command: "db:drop", Database: name, Changed: dropped}, false)
	}
	return printDBChange(env, "drop", "Dropped", "does not exist", name, dropped, err)
}

// printDBChange prints what db:create or db:drop (verb) did to the
// database name: done when it changed it, else that the database already
// is as asked (asIs).
func printDBChange(env *cliEnv, verb, done, asIs, name string, changed bool, err error) error {
	switch {
	case err != nil:
		return cliDBError(err)
	case name == store.InMemory:
		fmt.Fprintf(env.Stdout, "Database %s lives in memory: nothing to %s\n", store.QuoteName(name), verb)
	case changed:
		fmt.Fprintf(env.Stdout, "%s database %s\n", done, store.QuoteName(name))
	default:
		fmt.Fprintf(env.Stdout, "Database %s %s\n", store.QuoteName(name), asIs)
	}
	return nil
}

func serverDBMigrate(ctx context.Context, env *cliEnv, s serverSettings, asJSON bool) error {
	url := sqliteURLAbs(env, s.DatabaseURL)
	if !asJSON {
		return cliDBError(store.MigrateDatabase(ctx, url, env.Stdout))
	}
	var log bytes.Buffer
	if err := store.MigrateDatabase(ctx, url, &log); err != nil {
		return cliDBError(err)
	}
	name, err := store.DatabaseName(url)
	if err != nil {
		return cliDBError(err)
	}
	out := dbMigrateJSON{dbJSON: dbJSON{Command: "db:migrate", Database: name}, Applied: []dbMigration{}}
	for _, m := range migratedLine.FindAllStringSubmatch(log.String(), -1) {
		out.Applied = append(out.Applied, dbMigration{ID: m[1], Name: m[2]})
	}
	out.Changed = len(out.Applied) > 0
	return writeJSON(env.Stdout, out, false)
}

// migratedLine matches the line store.Migrate prints once a migration
// is applied: "== ID Name: migrated (0.0123s) ===…".
var migratedLine = regexp.MustCompile(`(?m)^== (\S+) (.+): migrated \(`)

// cliDBError words a refserver database error for the command line:
// refserver names the cause and a fix in terms of DATABASE_URL; where the
// fix is an idcli command, or the --database-url flag, the CLI says so.
func cliDBError(err error) error {
	var de *store.DBError
	if !errors.As(err, &de) {
		return err
	}
	fix := de.Fix
	switch {
	case errors.Is(de.Kind, store.ErrDatabaseNotFound):
		fix = "run idcli server db:create (or fix DATABASE_URL / --database-url)"
	case errors.Is(de.Kind, store.ErrNotMigrated):
		fix = "run idcli server db:migrate"
	default:
		fix = strings.Replace(fix, "DATABASE_URL", "DATABASE_URL / --database-url", 1)
	}
	if fix == "" {
		return errors.New(de.Cause)
	}
	return errors.New(de.Cause + ": " + fix)
}

// sqliteURLAbs resolves the path of a relative sqlite:// URL against
// env.Dir, the command's working directory.
func sqliteURLAbs(env *cliEnv, databaseURL string) string {
	if store.DatabaseKind(databaseURL) != "sqlite" || env.Dir == "" {
		return databaseURL
	}
	path, err := store.SQLitePath(databaseURL)
	if err != nil || path == store.InMemory || filepath.IsAbs(path) {
		return databaseURL
	}
	return "sqlite://" + filepath.Join(env.Dir, path)
}
