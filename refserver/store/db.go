package store

import (
	"context"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// uidBatch is how many agents one statement names (DeleteAgents, the key
// counts of ListAgents): a list of bound values must stay far below the
// drivers' limits (65,535 for PostgreSQL, 32,766 for SQLite).
const uidBatch = 500

// DB is the reference server's database: what the server reads and
// writes (through refserver.Config.DB) and what an operator's tool does to
// it (idcli server agents, keys, tokens, and idcli bench, which removes the
// agents it registered). It is safe for concurrent use.
type DB struct {
	g   *gorm.DB
	url string // the URL Open opened, for the messages of *DBError; "" after New
}

// Open opens the database at databaseURL (as OpenGorm does) and checks
// within ctx that it answers; its errors are *DBError.
func Open(ctx context.Context, databaseURL string) (*DB, error) {
	g, err := OpenGorm(databaseURL)
	if err != nil {
		return nil, explainDB(databaseURL, err)
	}
	d := &DB{g: g, url: databaseURL}
	if err := d.Ping(ctx); err != nil {
		d.Close()
		return nil, explainDB(databaseURL, err)
	}
	return d, nil
}

// New is the DB of an open gorm database (Close closes it).
func New(g *gorm.DB) *DB { return &DB{g: g} }

// Gorm returns the gorm database d reads and writes, for the PostgreSQL
// replay store and tests.
func (d *DB) Gorm() *gorm.DB { return d.g }

// Close closes the database connections.
func (d *DB) Close() error {
	sqlDB, err := d.g.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// Ping checks within ctx that the database answers.
func (d *DB) Ping(ctx context.Context) error { return pingDB(ctx, d.g) }

// HasAgent reports whether the database holds the agent uid.
func (d *DB) HasAgent(ctx context.Context, uid string) (bool, error) {
	var n int64
	err := d.g.WithContext(ctx).Model(&Agent{}).Where("uid = ?", uid).Count(&n).Error
	return n > 0, err
}

// DeleteAgents deletes the agents uids and their keys, in batches of one
// transaction each, and returns how many agents it deleted (uids it does
// not hold are skipped). The kids of the deleted keys are retired: never
// registered again, their status revoked (see retired.go). It stops at
// the first failing batch, the agents of the batches before it deleted.
func (d *DB) DeleteAgents(ctx context.Context, uids []string) (int, error) {
	removed := 0
	for start := 0; start < len(uids); start += uidBatch {
		batch := uids[start:min(start+uidBatch, len(uids))]
		n := 0
		err := d.g.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := tx.Where("agent_uid IN ?", batch).Delete(&DirectorySignature{}).Error; err != nil {
				return err
			}
			var deleted []PublicJWK
			if err := tx.Clauses(clause.Returning{Columns: []clause.Column{{Name: "kid"}, {Name: "agent_uid"}, {Name: "revoked_at"}}}).
				Where("agent_uid IN ?", batch).Delete(&deleted).Error; err != nil {
				return err
			}
			// The keys stay revoked for good (see retired.go).
			if err := retire(tx, deleted, time.Now().UTC().Truncate(time.Microsecond)); err != nil {
				return err
			}
			// Every instance drops the deleted keys it caches (see
			// changelog.go).
			changes := make([]KeyChange, len(deleted))
			for i, k := range deleted {
				changes[i] = KeyChange{Kid: k.Kid, AgentUID: k.AgentUID, Change: ChangeDelete, Actor: truncActor(actorOf(ctx))}
			}
			var gone []Agent
			res := tx.Clauses(clause.Returning{Columns: []clause.Column{{Name: "uid"}}}).Where("uid IN ?", batch).Delete(&gone)
			if res.Error != nil {
				return res.Error
			}
			n = int(res.RowsAffected)
			entries := make([]auditEntry, len(gone))
			for i, a := range gone {
				entries[i] = auditEntry{Action: ActionDelete, AgentUID: a.UID}
			}
			if err := record(tx, entries...); err != nil {
				return err
			}
			return logChanges(tx, changes) // last: it takes the log's lock until the commit
		})
		if err != nil {
			return removed, err
		}
		removed += n
	}
	return removed, nil
}
