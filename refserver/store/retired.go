package store

// Retired key ids: deleting an agent deletes its keys' rows, but keeps
// each kid in retired_kids for good. A kid is a key's thumbprint, so a
// deleted row would free the key itself: its holder (who may be the
// thief an operator revoked it for) could register it again as a new
// agent, and its status would go from revoked back to active. A retired
// kid is refused by registration and rotation (ErrKeyRetired) and its
// status is KeyRevoked.

import (
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// ErrKeyRetired: the key belonged to a deleted agent and may never be
// registered again.
var ErrKeyRetired = errors.New("store: the key belonged to a deleted agent")

// retiredKid is a row of retired_kids: the kid of a deleted agent's key,
// the agent it belonged to, when it stopped being good (its revocation,
// or the deletion) and when the agent was deleted.
type retiredKid struct {
	Kid       string    `gorm:"column:kid;size:64;primaryKey"`
	AgentUID  string    `gorm:"column:agent_uid;size:64;not null"`
	RevokedAt time.Time `gorm:"column:revoked_at;not null"`
	RetiredAt time.Time `gorm:"column:retired_at;not null"`
}

func (retiredKid) TableName() string { return "retired_kids" }

// retire records, within tx, the keys tx deleted (their kid, agent_uid
// and revoked_at) as retired at now: every key of a deleted agent,
// active or not, proven or not, since a deletion is the operator's last
// word on all of them.
func retire(tx *gorm.DB, deleted []PublicJWK, now time.Time) error {
	if len(deleted) == 0 {
		return nil
	}
	rows := make([]retiredKid, len(deleted))
	for i, k := range deleted {
		rows[i] = retiredKid{Kid: k.Kid, AgentUID: k.AgentUID, RevokedAt: now, RetiredAt: now}
		if k.RevokedAt != nil {
			rows[i].RevokedAt = k.RevokedAt.UTC()
		}
	}
	return tx.Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(rows, uidBatch).Error
}

// refuseRetired returns ErrKeyRetired when kid is retired. Call it
// within tx after inserting kid's row: on PostgreSQL the insert waits for
// a deletion of the kid's row in flight to commit, so the read after it
// sees that deletion's retired row (on SQLite write transactions run one
// after the other).
func refuseRetired(tx *gorm.DB, kid string) error {
	var n int64
	if err := tx.Model(&retiredKid{}).Where("kid = ?", kid).Count(&n).Error; err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%w: %s", ErrKeyRetired, kid)
	}
	return nil
}
