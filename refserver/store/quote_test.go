package store_test

import (
	"context"
	"testing"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
)

// TestQuoteName: a name is written in single quotes, a quote in it
// doubled and a character that does not print escaped, so it can neither
// end the quotes early nor forge a line of output.
func TestQuoteName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"agentid", "'agentid'"},
		{"/var/lib/agentid.db", "'/var/lib/agentid.db'"},
		{"it's", "'it''s'"},
		{"''", "''''''"},
		{`a"b`, `'a"b'`},
		{"a\nDatabase 'x' dropped", `'a\nDatabase ''x'' dropped'`},
		{"tab\there\x00\x1b[31m", `'tab\there\x00\x1b[31m'`},
		{"über", "'über'"},
		{"", "''"},
	} {
		if got := store.QuoteName(tt.in); got != tt.want {
			t.Errorf("QuoteName(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestDatabaseNameWithQuotes (PostgreSQL): a database whose name holds
// quotes, a semicolon and SQL is created, migrated and dropped as that one
// name (CREATE and DROP DATABASE quote it as an identifier), and no other
// database is touched.
func TestDatabaseNameWithQuotes(t *testing.T) {
	t.Parallel()
	base := dbtest.PostgresBaseURL(t)
	for _, name := range []string{
		`agentid_q'uo"te_` + dbtest.RandomHex(4),
		`agentid_x"; DROP DATABASE "test"; --` + dbtest.RandomHex(4),
	} {
		u, err := dbtest.WithDatabase(base, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.DropDatabase(context.Background(), u) })
		checkAdminCycle(t, u, name)
	}
	// The database the URL of the test names is still there.
	db, err := store.Open(context.Background(), base)
	if err != nil {
		t.Fatalf("the test database: %v", err)
	}
	db.Close()
}
