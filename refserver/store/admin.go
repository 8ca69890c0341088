package store

// Database administration: creating, migrating and dropping the database a
// DATABASE_URL names, and the meaning of the failures an operator meets.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/agentid/agentid/signer/redact"
)

// InMemory is the SQLite path of an in-memory database (sqlite::memory:):
// it lives and dies with its connection, so there is nothing to create or
// drop, and only the process that opens it can migrate it.
const InMemory = ":memory:"

// Kinds of database failure, matched with errors.Is on the errors of
// CreateDatabase, DropDatabase, MigrateDatabase and Open.
var (
	// ErrDatabaseNotFound: the database the URL names does not exist.
	ErrDatabaseNotFound = errors.New("store: database does not exist")
	// ErrDatabaseUnreachable: no database server answers at the URL.
	ErrDatabaseUnreachable = errors.New("store: database unreachable")
	// ErrDatabaseAuth: the database server refused the URL's credentials.
	ErrDatabaseAuth = errors.New("store: database refused the credentials")
	// ErrDatabasePermission: the user lacks a privilege the operation needs.
	ErrDatabasePermission = errors.New("store: database permission denied")
	// ErrDatabaseInUse: the database cannot be dropped while clients use it.
	ErrDatabaseInUse = errors.New("store: database in use")
	// ErrNotMigrated: migrations are pending (see Pending and Migrate).
	ErrNotMigrated = errors.New("store: database not migrated")
	// ErrDatabase: any other database failure.
	ErrDatabase = errors.New("store: database failure")
)

// DBError explains a database failure to an operator in one line: Error
// returns the cause, then the fix. Passwords never appear in it.
type DBError struct {
	// Kind is one of the Err… kinds above, or ErrUnsupportedDatabaseURL.
	Kind error
	// Cause says what failed, e.g. "cannot reach the database at
	// postgres://db:5432/agentid (connection refused)".
	Cause string
	// Fix says what to do about it in terms of DATABASE_URL and the
	// database's privileges, or is "" when there is nothing to suggest.
	Fix string
	// Err is the underlying error, if any.
	Err error
}

func (e *DBError) Error() string {
	if e.Fix == "" {
		return e.Cause
	}
	return e.Cause + ": " + e.Fix
}

// Unwrap returns Kind and Err, so errors.Is matches either.
func (e *DBError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// SQLSTATE codes decoded by explainDB and the admin operations.
const (
	sqlstateInvalidCatalog    = "3D000" // database does not exist
	sqlstateInvalidPassword   = "28P01"
	sqlstateInvalidAuthSpec   = "28000"
	sqlstateDuplicateDatabase = "42P04"
	sqlstateInsufficientPriv  = "42501"
	sqlstateObjectInUse       = "55006"
)

// pgCode returns the SQLSTATE of a PostgreSQL error in err's chain, or "".
func pgCode(err error) (string, *pgconn.PgError) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code, pgErr
	}
	return "", nil
}

// explainDB turns a failure to connect to (or use) databaseURL into a
// *DBError. nil stays nil; a *DBError is returned as is.
func explainDB(databaseURL string, err error) error {
	if err == nil {
		return nil
	}
	var de *DBError
	if errors.As(err, &de) {
		return err
	}
	where := redact.URL(databaseURL)
	code, pgErr := pgCode(err)
	switch {
	case code == sqlstateInvalidCatalog:
		return &DBError{Kind: ErrDatabaseNotFound, Err: err,
			Cause: fmt.Sprintf("database %s does not exist", QuoteName(postgresDBName(databaseURL))),
			Fix:   "create it or fix DATABASE_URL"}
	case code == sqlstateInvalidPassword || code == sqlstateInvalidAuthSpec:
		return &DBError{Kind: ErrDatabaseAuth, Err: err,
			Cause: fmt.Sprintf("the database at %s refused the credentials (%s)", where, pgErr.Message),
			Fix:   "fix the user and password in DATABASE_URL"}
	case pgErr != nil:
		return &DBError{Kind: ErrDatabase, Err: err,
			Cause: fmt.Sprintf("the database at %s failed: %s (SQLSTATE %s)", where, pgErr.Message, pgErr.Code)}
	case errors.Is(err, ErrUnsupportedDatabaseURL):
		return &DBError{Kind: ErrUnsupportedDatabaseURL, Err: err,
			Cause: oneLine(strings.TrimPrefix(err.Error(), "store: "))}
	}
	return &DBError{Kind: ErrDatabaseUnreachable, Err: err,
		Cause: fmt.Sprintf("cannot reach the database at %s (%s)", where, connCause(err)),
		Fix:   "start PostgreSQL or point DATABASE_URL at a running server"}
}

// connCause names the root cause of a connection failure briefly.
func connCause(err error) string {
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &dnsErr):
		return "unknown host " + dnsErr.Name
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timed out"
	case errors.Is(err, fs.ErrNotExist):
		return "no such file or directory"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	}
	for {
		next := errors.Unwrap(err)
		if next == nil {
			break
		}
		err = next
	}
	return oneLine(err.Error())
}

// oneLine joins s onto one line and shortens it to 200 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// postgresDBName returns the database name of a postgres:// URL.
func postgresDBName(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}

// DatabaseName returns what CreateDatabase and DropDatabase act on: the
// database name of a PostgreSQL URL, the file path of a SQLite URL, or
// InMemory.
func DatabaseName(databaseURL string) (string, error) {
	switch DatabaseKind(databaseURL) {
	case "sqlite":
		p, err := SQLitePath(databaseURL)
		if err != nil {
			return "", explainDB(databaseURL, err)
		}
		return p, nil
	case "postgres":
		name := postgresDBName(databaseURL)
		if name == "" {
			return "", &DBError{Kind: ErrUnsupportedDatabaseURL,
				Cause: fmt.Sprintf("DATABASE_URL %s names no database", redact.URL(databaseURL)),
				Fix:   "give postgres://USER:PASS@HOST:PORT/DATABASE"}
		}
		return name, nil
	}
	return "", explainDB(databaseURL, fmt.Errorf("%w: %q (want postgres://, postgresql://, sqlite://PATH or sqlite::memory:)", ErrUnsupportedDatabaseURL, redact.URL(databaseURL)))
}

// CreateDatabase creates the database databaseURL names: a PostgreSQL
// database (connecting to the "postgres" maintenance database, or
// template1, with the URL's credentials; the user needs CREATEDB) or a
// SQLite file (relative paths are relative to the working directory). It
// returns the name (see DatabaseName) and whether it was created: false with
// a nil error means the database already existed, or is InMemory. Errors
// are *DBError.
func CreateDatabase(ctx context.Context, databaseURL string) (name string, created bool, err error) {
	if name, err = DatabaseName(databaseURL); err != nil || name == InMemory {
		return name, false, err
	}
	if DatabaseKind(databaseURL) == "sqlite" {
		if _, err := os.Stat(name); err == nil {
			return name, false, nil
		}
		db, err := OpenGorm(databaseURL)
		if err != nil {
			return name, false, explainDB(databaseURL, err)
		}
		closeDB(db)
		return name, true, nil
	}
	err = withMaintenanceDB(ctx, databaseURL, func(db *gorm.DB) error {
		exists, err := databaseExists(db, name)
		if err != nil || exists {
			return err
		}
		err = db.Exec("CREATE DATABASE " + quoteIdent(name)).Error
		switch code, _ := pgCode(err); {
		case err == nil:
			created = true
			return nil
		case code == sqlstateDuplicateDatabase: // created concurrently
			return nil
		case code == sqlstateInsufficientPriv:
			return &DBError{Kind: ErrDatabasePermission, Err: err,
				Cause: fmt.Sprintf("cannot create database %s: permission denied", QuoteName(name)),
				Fix:   "grant the user CREATEDB (ALTER ROLE … CREATEDB) or create it as a superuser"}
		}
		return &DBError{Kind: ErrDatabase, Err: err,
			Cause: fmt.Sprintf("cannot create database %s: %s", QuoteName(name), oneLine(err.Error()))}
	})
	return name, created, err
}

// DropDatabase permanently deletes the database databaseURL names, with
// every agent and key in it: a PostgreSQL database (refused while clients
// are connected: ErrDatabaseInUse) or a SQLite file and its -wal and -shm
// files. It returns the name and whether it was dropped: false with a nil
// error means it did not exist, or is InMemory. Errors are *DBError.
func DropDatabase(ctx context.Context, databaseURL string) (name string, dropped bool, err error) {
	if name, err = DatabaseName(databaseURL); err != nil || name == InMemory {
		return name, false, err
	}
	if DatabaseKind(databaseURL) == "sqlite" {
		if err := os.Remove(name); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return name, false, nil
			}
			return name, false, &DBError{Kind: ErrDatabase, Err: err,
				Cause: fmt.Sprintf("cannot drop database %s: %s", QuoteName(name), connCause(err))}
		}
		os.Remove(name + "-wal")
		os.Remove(name + "-shm")
		return name, true, nil
	}
	err = withMaintenanceDB(ctx, databaseURL, func(db *gorm.DB) error {
		exists, err := databaseExists(db, name)
		if err != nil || !exists {
			return err
		}
		err = db.Exec("DROP DATABASE IF EXISTS " + quoteIdent(name)).Error
		switch code, _ := pgCode(err); {
		case err == nil:
			dropped = true
			return nil
		case code == sqlstateObjectInUse:
			return &DBError{Kind: ErrDatabaseInUse, Err: err,
				Cause: fmt.Sprintf("cannot drop database %s: it is in use", QuoteName(name)),
				Fix:   "stop the server (and other clients) first"}
		}
		return &DBError{Kind: ErrDatabase, Err: err,
			Cause: fmt.Sprintf("cannot drop database %s: %s", QuoteName(name), oneLine(err.Error()))}
	})
	return name, dropped, err
}

// MigrateDatabase opens databaseURL, applies the pending migrations with
// Migrate (printing its lines to w; nil for none) and closes it. Errors are
// *DBError.
func MigrateDatabase(ctx context.Context, databaseURL string, w io.Writer) error {
	db, err := OpenGorm(databaseURL)
	if err != nil {
		return explainDB(databaseURL, err)
	}
	defer closeDB(db)
	return migrateExplained(ctx, db, w)
}

// Migrate applies the pending migrations with Migrate (printing its lines
// to w; nil for none). Errors are *DBError.
func (d *DB) Migrate(ctx context.Context, w io.Writer) error {
	return migrateExplained(ctx, d.g, w)
}

// migrateExplained is Migrate with its failure as a *DBError.
func migrateExplained(ctx context.Context, db *gorm.DB, w io.Writer) error {
	if err := Migrate(ctx, db, w); err != nil {
		return &DBError{Kind: ErrDatabase, Err: err,
			Cause: "migration failed: " + oneLine(strings.TrimPrefix(err.Error(), "store: "))}
	}
	return nil
}

// withMaintenanceDB runs fn on the "postgres" maintenance database (or
// template1 when that does not exist), reached with databaseURL's
// credentials.
func withMaintenanceDB(ctx context.Context, databaseURL string, fn func(db *gorm.DB) error) error {
	var db *gorm.DB
	var err error
	for _, m := range []string{"postgres", "template1"} {
		if db, err = OpenGorm(maintenanceURL(databaseURL, m)); err == nil {
			break
		}
		if code, _ := pgCode(err); code != sqlstateInvalidCatalog {
			break
		}
	}
	if err != nil {
		return explainDB(databaseURL, err)
	}
	defer closeDB(db)
	return fn(db.WithContext(ctx))
}

// maintenanceURL is databaseURL pointing at database name instead.
func maintenanceURL(databaseURL, name string) string {
	u, _ := url.Parse(databaseURL)
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

func databaseExists(db *gorm.DB, name string) (bool, error) {
	var n int64
	if err := db.Raw("SELECT count(*) FROM pg_database WHERE datname = ?", name).Scan(&n).Error; err != nil {
		return false, &DBError{Kind: ErrDatabase, Err: err, Cause: "cannot list databases: " + oneLine(err.Error())}
	}
	return n > 0, nil
}

// closeDB closes db's connection pool.
func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.Close()
	}
}
