package dbtest

import (
	"fmt"
	"strings"
	"testing"

	"gorm.io/gorm"
)

// Dump returns every row of table, each column as name=value, one line a
// row: what a backup of the table holds, for a test that looks for a
// secret in it.
func Dump(t testing.TB, db *gorm.DB, table string) string {
	t.Helper()
	rows, err := db.Raw("SELECT * FROM " + table).Rows() // table: a constant of the test
	if err != nil {
		t.Fatalf("dbtest: dump %s: %v", table, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatalf("dbtest: dump %s: %v", table, err)
	}
	var b strings.Builder
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatalf("dbtest: dump %s: %v", table, err)
		}
		for i, v := range vals {
			if bs, ok := v.([]byte); ok {
				v = string(bs)
			}
			fmt.Fprintf(&b, "%s=%v ", cols[i], v)
		}
		b.WriteByte('\n')
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("dbtest: dump %s: %v", table, err)
	}
	return b.String()
}
