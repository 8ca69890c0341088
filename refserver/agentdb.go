package refserver

import (
	"context"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// uidBatch is how many agents one statement names (DeleteAgents, the key
// counts of ListAgents): a list of bound values must stay far below the
// drivers' limits (65,535 for PostgreSQL, 32,766 for SQLite).
const uidBatch = 500

// AgentDB is a server's database as a tool outside the server sees it (idcli
// bench, which removes the agents it registered): the tool reaches the
// database through it and links no database package itself.
type AgentDB struct {
	db *gorm.DB
}

// OpenAgentDB opens the database at databaseURL (as OpenDB does) and checks
// within ctx that it answers; its errors are *DBError.
func OpenAgentDB(ctx context.Context, databaseURL string) (*AgentDB, error) {
	db, err := OpenDB(databaseURL)
	if err != nil {
		return nil, explainDB(databaseURL, err)
	}
	a := &AgentDB{db: db}
	if err := pingDB(ctx, db); err != nil {
		a.Close()
		return nil, explainDB(databaseURL, err)
	}
	return a, nil
}

// NewAgentDB is the AgentDB of an open database (Close closes it).
func NewAgentDB(db *gorm.DB) *AgentDB { return &AgentDB{db: db} }

// Close closes the database connections.
func (a *AgentDB) Close() error {
	sqlDB, err := a.db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// HasAgent reports whether the database holds the agent uid.
func (a *AgentDB) HasAgent(ctx context.Context, uid string) (bool, error) {
	var n int64
	err := a.db.WithContext(ctx).Model(&Agent{}).Where("uid = ?", uid).Count(&n).Error
	return n > 0, err
}

// DeleteAgents deletes the agents uids and their keys, in batches of one
// transaction each, and returns how many agents it deleted (uids it does
// not hold are skipped). It stops at the first failing batch, the agents of
// the batches before it deleted.
func (a *AgentDB) DeleteAgents(ctx context.Context, uids []string) (int, error) {
	removed := 0
	for start := 0; start < len(uids); start += uidBatch {
		batch := uids[start:min(start+uidBatch, len(uids))]
		n := 0
		err := a.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := tx.Where("agent_uid IN ?", batch).Delete(&DirectorySignature{}).Error; err != nil {
				return err
			}
			var deleted []PublicJWK
			if err := tx.Clauses(clause.Returning{Columns: []clause.Column{{Name: "kid"}, {Name: "agent_uid"}}}).
				Where("agent_uid IN ?", batch).Delete(&deleted).Error; err != nil {
				return err
			}
			// Every instance drops the deleted keys it caches (see
			// keychanges.go).
			changes := make([]KeyChange, len(deleted))
			for i, k := range deleted {
				changes[i] = KeyChange{Kid: k.Kid, AgentUID: k.AgentUID, Change: changeDelete, Actor: "idcli bench cleanup"}
			}
			res := tx.Where("uid IN ?", batch).Delete(&Agent{})
			if res.Error != nil {
				return res.Error
			}
			n = int(res.RowsAffected)
			return logChanges(tx, changes) // last: it takes the log's lock until the commit
		})
		if err != nil {
			return removed, err
		}
		removed += n
	}
	return removed, nil
}
