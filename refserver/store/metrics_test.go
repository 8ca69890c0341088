package store_test

import (
	"strings"
	"testing"

	"github.com/agentid/agentid/middleware/metrics"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
)

// TestObserveStatements (moved from package metrics with the gorm callbacks):
// every statement is timed into the database latency histogram.
func TestObserveStatements(t *testing.T) {
	db := dbtest.Open(t, "sqlite::memory:")
	reg := metrics.NewRegistry()
	if err := store.New(db).ObserveStatements(reg.ObserveDBQuery); err != nil {
		t.Fatalf("ObserveStatements: %v", err)
	}
	if err := db.Exec("CREATE TABLE t (x integer)").Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("INSERT INTO t VALUES (1)").Error; err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := db.Table("t").Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	reg.WriteTo(&b)
	if want := "agentid_db_query_duration_seconds_count 3\n"; !strings.Contains(b.String(), want) {
		t.Errorf("exposition lacks %q:\n%s", want, b.String())
	}
}
