package main

import (
	"context"
	"fmt"
	"time"

	"github.com/agentid/agentid/refserver"
	"gorm.io/gorm"
)

// removeBatch is how many agents one statement removes.
const removeBatch = 500

// removeTimeout bounds the removal of a run's agents; it runs even when the
// run was interrupted.
const removeTimeout = time.Minute

// benchDB opens the server's database as `idcli server start` finds it
// (--database-url, DATABASE_URL, ./.env, the default), for the removal of
// the bench agents, and checks that it answers.
func benchDB(env *cliEnv, f serverFlags) (*gorm.DB, error) {
	s, err := resolveServerSettings(env, f, false)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	url := sqliteURLAbs(env, s.DatabaseURL)
	fail := func(cause error) error {
		return fmt.Errorf("bench: the bench agents are removed from the server's database afterwards, but %s does not answer: %v: give the server's database with --database-url (or DATABASE_URL), or --keep-agents to leave them registered",
			refserver.RedactURL(url), cause)
	}
	db, err := refserver.OpenDB(url)
	if err != nil {
		return nil, fail(err)
	}
	sqlDB, err := db.DB()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = sqlDB.PingContext(ctx)
		cancel()
	}
	if err != nil {
		closeGorm(db)
		return nil, fail(err)
	}
	return db, nil
}

func closeGorm(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.Close()
	}
}

// removeAgents deletes the agents uids and their keys from db, in batches,
// and returns how many agents it deleted. It runs on ctx's values but not
// its cancellation (an interrupted run still cleans up), bounded by
// removeTimeout.
func removeAgents(ctx context.Context, db *gorm.DB, uids []string) (int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	removed := 0
	for start := 0; start < len(uids); start += removeBatch {
		batch := uids[start:min(start+removeBatch, len(uids))]
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := tx.Where("agent_uid IN ?", batch).Delete(&refserver.PublicJWK{}).Error; err != nil {
				return err
			}
			res := tx.Where("uid IN ?", batch).Delete(&refserver.Agent{})
			removed += int(res.RowsAffected)
			return res.Error
		})
		if err != nil {
			return removed, err
		}
	}
	return removed, nil
}
