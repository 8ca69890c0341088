package ops

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
)

// TestQueryErrorNamesFlag: each store.ErrInvalidQuery the store returns
// (a query the commands' own checks would refuse first) is worded with the
// flag it comes from and without the store's prefix, on PostgreSQL and
// SQLite.
func TestQueryErrorNamesFlag(t *testing.T) {
	t.Parallel()
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, err := store.Open(ctx, b.URL(t))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			env := &Env{DBError: func(err error) error { return errors.New("unworded: " + err.Error()) }}
			big := uint64(math.MaxInt64) + 1
			for flag, call := range map[string]func() error{
				"--before":     func() error { _, err := db.Audit(ctx, store.AuditQuery{Before: big}); return err },
				"--invitation": func() error { _, err := db.Audit(ctx, store.AuditQuery{InvitationID: big}); return err },
				"--limit":      func() error { _, err := db.Audit(ctx, store.AuditQuery{Limit: store.MaxAuditPage + 1}); return err },
				"--state":      func() error { _, _, err := db.Agents(ctx, store.AgentQuery{State: "enabled"}); return err },
			} {
				err := call()
				if !errors.Is(err, store.ErrInvalidQuery) {
					t.Fatalf("%s: the store answered %v, want ErrInvalidQuery", flag, err)
				}
				msg := env.dbError(err).Error()
				if !strings.HasPrefix(msg, flag+": ") || strings.Contains(msg, "store:") || strings.Contains(msg, "unworded") {
					t.Errorf("%s: worded %q, want it to begin with the flag, without the store's prefix", flag, msg)
				}
			}
			other := env.dbError(errors.Join(store.ErrInvalidQuery, errors.New("x"))).Error()
			if strings.Contains(other, "store:") {
				t.Errorf("an ErrInvalidQuery of no known flag: %q", other)
			}
		})
	}
}
