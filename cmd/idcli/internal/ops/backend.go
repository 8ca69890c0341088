package ops

// What the commands run on: the service's database (--database-url,
// DATABASE_URL), or its admin API (--server, with an operator token).

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/agentid/agentid/refserver/store"
)

// backend is what the commands run on: dbBackend or apiBackend.
type backend interface {
	Agents(ctx context.Context, q store.AgentQuery) ([]store.AgentInfo, string, error)
	DeleteAgent(ctx context.Context, uid string) error
	ShowAgent(ctx context.Context, uid string) (store.AgentInfo, error)
	SetAgentDisabled(ctx context.Context, uid string, disabled bool, reason string) (store.AgentInfo, bool, error)
	ApproveAgent(ctx context.Context, uid, reason string) (store.AgentInfo, bool, error)
	RejectAgent(ctx context.Context, uid, reason string) (store.AgentInfo, bool, error)
	RevokeKey(ctx context.Context, uid, kid, reason string) (keyRevocation, error)
	CreateInvite(ctx context.Context, note string, uses int64, ttl time.Duration) (string, store.InviteInfo, error)
	ListInvites(ctx context.Context) ([]store.InviteInfo, error)
	RevokeInvite(ctx context.Context, id uint64) (store.InviteInfo, bool, error)
	Audit(ctx context.Context, q store.AuditQuery) ([]store.AuditEvent, error)
}

// keyRevocation is what keys revoke did: the answer of the admin API's
// route, and the command's --json.
type keyRevocation struct {
	UID        string        `json:"uid"`
	Key        store.KeyInfo `json:"key"`
	Changed    bool          `json:"changed"`
	ActiveKeys int           `json:"active_keys"`
}

// dbBackend runs the commands on the database.
type dbBackend struct{ *store.DB }

var _ backend = dbBackend{}

func (d dbBackend) RevokeKey(ctx context.Context, uid, kid, reason string) (keyRevocation, error) {
	k, changed, err := d.DB.RevokeKey(ctx, uid, kid, reason)
	if err != nil {
		return keyRevocation{}, err
	}
	a, err := d.ShowAgent(ctx, uid)
	if err != nil {
		return keyRevocation{}, err
	}
	return keyRevocation{UID: uid, Key: k, Changed: changed, ActiveKeys: a.ActiveKeys}, nil
}

// opener opens a command's backend: the backend, the wording of its
// errors for the command line, and its close.
type opener func(ctx context.Context) (backend, func(error) error, func(), error)

// backendFlags registers on fs the flags choosing the backend
// (--database-url; unless dbOnly, --server and --token-file) and returns
// the function opening the one they choose.
func backendFlags(env *Env, fs *flag.FlagSet, dbOnly bool) opener {
	openDB := env.Database(fs)
	var server, tokenFile string
	if !dbOnly {
		fs.StringVar(&server, "server", "", "run on the admin API of the service at this URL (its HOSTNAME) instead of the database; the operator token is read from "+TokenEnv+" or --token-file")
		fs.StringVar(&tokenFile, "token-file", "", "with --server: read the operator token from this file (not from "+TokenEnv+")")
	}
	return func(ctx context.Context) (backend, func(error) error, func(), error) {
		if server == "" {
			if tokenFile != "" {
				return nil, nil, nil, fmt.Errorf("--token-file is for the admin API: give --server URL too")
			}
			db, err := openDB(ctx)
			if err != nil {
				return nil, nil, nil, err
			}
			return dbBackend{db}, env.dbError, func() { db.Close() }, nil
		}
		if f := fs.Lookup("database-url"); f != nil && f.Value.String() != "" {
			return nil, nil, nil, fmt.Errorf("give --server (the admin API) or --database-url (the database), not both")
		}
		base, err := parseServer(server)
		if err != nil {
			return nil, nil, nil, err
		}
		token, err := readToken(env.Getenv, env.Dir, tokenFile, env.Stderr)
		if err != nil {
			return nil, nil, nil, err
		}
		return apiBackend{newClient(base, token)}, func(err error) error { return err }, func() {}, nil
	}
}
