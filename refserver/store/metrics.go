package store

import (
	"fmt"
	"time"

	"gorm.io/gorm"
)

const metricsStartKey = "agentid:metrics:start"

// ObserveStatements registers gorm callbacks on d that time every
// statement (create, query, update, delete, row, raw) with observe (such
// as metrics.Registry.ObserveDBQuery): the metrics registry links no ORM,
// since idcli proxy uses it too.
func (d *DB) ObserveStatements(observe func(time.Duration)) error {
	db := d.g
	before := func(tx *gorm.DB) { tx.InstanceSet(metricsStartKey, time.Now()) }
	after := func(tx *gorm.DB) {
		if v, ok := tx.InstanceGet(metricsStartKey); ok {
			if t, ok := v.(time.Time); ok {
				observe(time.Since(t))
			}
		}
	}
	cb := db.Callback()
	steps := []struct {
		name   string
		before func(string, func(*gorm.DB)) error
		after  func(string, func(*gorm.DB)) error
	}{
		{"create", cb.Create().Before("gorm:create").Register, cb.Create().After("gorm:create").Register},
		{"query", cb.Query().Before("gorm:query").Register, cb.Query().After("gorm:query").Register},
		{"update", cb.Update().Before("gorm:update").Register, cb.Update().After("gorm:update").Register},
		{"delete", cb.Delete().Before("gorm:delete").Register, cb.Delete().After("gorm:delete").Register},
		{"row", cb.Row().Before("gorm:row").Register, cb.Row().After("gorm:row").Register},
		{"raw", cb.Raw().Before("gorm:raw").Register, cb.Raw().After("gorm:raw").Register},
	}
	for _, s := range steps {
		if err := s.before("agentid:metrics:before_"+s.name, before); err != nil {
			return fmt.Errorf("store: metrics gorm callback: %w", err)
		}
		if err := s.after("agentid:metrics:after_"+s.name, after); err != nil {
			return fmt.Errorf("store: metrics gorm callback: %w", err)
		}
	}
	return nil
}
