package main

import (
	"context"
	"fmt"
	"time"

	"github.com/agentid/agentid/refserver"
)

// removeTimeout bounds the removal of a run's agents; it runs even when the
// run was interrupted.
const removeTimeout = time.Minute

// benchDB opens the server's database as `idcli server start` finds it
// (--database-url, DATABASE_URL, ./.env, the default), for the removal of
// the bench agents, and checks that it answers.
func benchDB(env *cliEnv, f serverFlags) (*refserver.AgentDB, error) {
	s, err := resolveServerSettings(env, f, false)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	url := sqliteURLAbs(env, s.DatabaseURL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := refserver.OpenAgentDB(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("bench: the bench agents are removed from the server's database afterwards, but %s does not answer: %v: give the server's database with --database-url (or DATABASE_URL), or --keep-agents to leave them registered",
			refserver.RedactURL(url), err)
	}
	return db, nil
}

// removeAgents deletes the agents uids and their keys from db and returns
// how many agents it deleted. It runs on ctx's values but not its
// cancellation (an interrupted run still cleans up), bounded by
// removeTimeout.
func removeAgents(ctx context.Context, db *refserver.AgentDB, uids []string) (int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	return db.DeleteAgents(ctx, uids)
}
