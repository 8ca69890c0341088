package refserver

import (
	"fmt"
	"time"

	"github.com/agentid/agentid/middleware/metrics"
	"gorm.io/gorm"
)

const metricsStartKey = "agentid:metrics:start"

// instrumentGorm registers gorm callbacks on db that time every statement
// (create, query, update, delete, row, raw) into reg's
// agentid_db_query_duration_seconds. It lives here, not in package
// metrics, so that the registry links no ORM (idcli proxy uses it too).
func instrumentGorm(db *gorm.DB, reg *metrics.Registry) error {
	before := func(tx *gorm.DB) { tx.InstanceSet(metricsStartKey, time.Now()) }
	after := func(tx *gorm.DB) {
		if v, ok := tx.InstanceGet(metricsStartKey); ok {
			if t, ok := v.(time.Time); ok {
				reg.ObserveDBQuery(time.Since(t))
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
			return fmt.Errorf("refserver: metrics gorm callback: %w", err)
		}
		if err := s.after("agentid:metrics:after_"+s.name, after); err != nil {
			return fmt.Errorf("refserver: metrics gorm callback: %w", err)
		}
	}
	return nil
}
