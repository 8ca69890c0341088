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

	"github.com/agentid/agentid/cmd/idcli/internal/envflag"
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
		fs.StringVar(&f.port, "port", "", "port to listen on (default: AGENTID_PORT, PORT, then "+defaultServerPort+")")
		fs.StringVar(&f.hostname, "hostname", "", "public base URL with scheme (default: AGENTID_HOSTNAME, HOSTNAME, then http://localhost:<port>)")
	}
	fs.StringVar(&f.databaseURL, "database-url", "", "database URL (default: AGENTID_DATABASE_URL, DATABASE_URL, then "+defaultServerDatabaseURL+")")
}

// serverSettings are the resolved PORT, HOSTNAME and DATABASE_URL.
type serverSettings struct {
	Port, Hostname, DatabaseURL string
}

// serverEnvPrefix prefixes the variables of the server's flags:
// AGENTID_RATE_LIMIT sets --rate-limit.
const serverEnvPrefix = "AGENTID"

// serverEnv is where the server commands read variables: the process
// environment, then ./.env.
func serverEnv(env *cliEnv) ([]envflag.Source, error) {
	ef, err := envfile.Read(filepath.Join(env.Dir, ".env"))
	if err != nil {
		return nil, err
	}
	dotenv := func(k string) string { v, _ := ef.Get(k); return v }
	return []envflag.Source{{Lookup: env.Getenv}, {Lookup: dotenv, Where: " in .env"}}, nil
}

// withServerEnv makes every flag of c settable from its AGENTID_ variable
// (the environment, then .env) when the command line leaves it unset, names
// the variable in each flag's help, and in c's errors about a flag so set.
func withServerEnv(env *cliEnv, c *ffcli.Command) *ffcli.Command {
	envflag.Document(c.FlagSet, serverEnvPrefix)
	run := c.Exec
	c.Exec = func(ctx context.Context, args []string) error {
		set, err := applyServerEnv(env, c.FlagSet)
		if err != nil {
			return err
		}
		return set.Reword(run(ctx, args))
	}
	return c
}

func applyServerEnv(env *cliEnv, fs *flag.FlagSet) (envflag.Sources, error) {
	src, err := serverEnv(env)
	if err != nil {
		return nil, err
	}
	return envflag.Apply(fs, serverEnvPrefix, src...)
}

// resolveServerSettings applies flags > AGENTID_ variables > the older
// PORT, HOSTNAME and DATABASE_URL > defaults, each variable from the process
// environment, then ./.env. HOSTNAME is resolved (and a scheme-less value
// warned about) only when needHostname is set: the db: commands do not use
// it.
func resolveServerSettings(env *cliEnv, f serverFlags, needHostname bool) (serverSettings, error) {
	src, err := serverEnv(env)
	if err != nil {
		return serverSettings{}, err
	}
	// lookup returns the value of a setting and where it came from; an
	// AGENTID_ variable counts as its flag.
	lookup := func(flagValue, flagName, name string) (v, source string, explicit bool) {
		if flagValue != "" {
			return flagValue, "--" + flagName, true
		}
		v, n, where := envflag.First(src, envflag.Var(serverEnvPrefix, flagName), name)
		return v, n + where, strings.HasPrefix(n, serverEnvPrefix)
	}
	port, source, portExplicit := lookup(f.port, "port", "PORT")
	s := serverSettings{Port: port}
	portGiven := s.Port != ""
	if s.Port == "" {
		s.Port = defaultServerPort
	}
	if n, err := strconv.Atoi(s.Port); err != nil || n < 0 || n > 65535 {
		return serverSettings{}, fmt.Errorf("%s %q is not a port number (0-65535)", source, s.Port)
	}
	s.DatabaseURL, source, _ = lookup(f.databaseURL, "database-url", "DATABASE_URL")
	if s.DatabaseURL == "" {
		s.DatabaseURL, source = defaultServerDatabaseURL, "DATABASE_URL"
	}
	if store.DatabaseKind(s.DatabaseURL) == "" {
		return serverSettings{}, fmt.Errorf("%s %s is not supported: use postgres://USER:PASS@HOST:PORT/DATABASE, sqlite::memory: or sqlite://PATH", source, redact.URL(s.DatabaseURL))
	}

	if !needHostname {
		return s, nil
	}
	// HOSTNAME: --hostname or AGENTID_HOSTNAME without a scheme is an
	// error; HOSTNAME without a scheme is most likely the shell's machine
	// name and is skipped.
	type candidate struct {
		value, name, where string
		explicit           bool
	}
	candidates := []candidate{{f.hostname, "--hostname", "", true}}
	for _, n := range []string{envflag.Var(serverEnvPrefix, "hostname"), "HOSTNAME"} {
		for _, e := range src {
			candidates = append(candidates, candidate{e.Lookup(n), n, e.Where, n != "HOSTNAME"})
		}
	}
	for _, c := range candidates {
		if c.value == "" {
			continue
		}
		if !c.explicit && !strings.Contains(c.value, "://") {
			fmt.Fprintf(env.Stderr, "idcli: warning: ignoring %s=%q%s: it has no scheme (want e.g. https://agentid.example)\n", c.name, c.value, c.where)
			continue
		}
		svc, err := refserver.ParseHostname(c.value)
		if err != nil {
			return serverSettings{}, fmt.Errorf("%s%s: %s", c.name, c.where, strings.TrimPrefix(err.Error(), "refserver: "))
		}
		s.Hostname = svc.String()
		// A local HOSTNAME names the port the server listens on: from
		// --hostname (or AGENTID_HOSTNAME) unless --port is given, from
		// HOSTNAME unless PORT is set anywhere.
		if port, ok := localPort(c.value); ok && !portExplicit && (c.explicit || !portGiven) {
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
