package main

// The operator's commands of a running service (`idcli server
// agents|keys|tokens|audit`) live in internal/ops; opsEnv hands them what
// they take from this package.

import (
	"context"
	"flag"

	"github.com/agentid/agentid/cmd/idcli/internal/ops"
	"github.com/agentid/agentid/refserver/store"
	"github.com/peterbourgon/ff/v3/ffcli"
)

func opsEnv(env *cliEnv) *ops.Env {
	return &ops.Env{
		Stdout: env.Stdout, Stderr: env.Stderr, Getenv: env.Getenv,
		FlagSet: func(name string) *flag.FlagSet { return newFlagSet(name, env) },
		Parse:   env.parseInterspersed,
		Group: func(path, shortUsage, shortHelp, longHelp string, subs ...*ffcli.Command) *ffcli.Command {
			return newGroupCmd(env, path, shortUsage, shortHelp, longHelp, subs...)
		},
		Database: func(fs *flag.FlagSet) func(context.Context) (*store.DB, error) {
			var f serverFlags
			f.register(fs, false)
			return func(ctx context.Context) (*store.DB, error) {
				s, err := resolveServerSettings(env, f, false)
				if err != nil {
					return nil, err
				}
				db, err := store.Open(ctx, sqliteURLAbs(env, s.DatabaseURL))
				if err != nil {
					return nil, cliDBError(err)
				}
				if err := db.CheckMigrated(ctx); err != nil {
					db.Close()
					return nil, cliDBError(err)
				}
				return db, nil
			}
		},
		DBError: cliDBError,
		Dir:     env.Dir,
	}
}
