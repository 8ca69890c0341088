package replaypg

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// purgeSQL deletes at most one batch of expired rows. The subquery form
// works on PostgreSQL, PostgreSQL-compatible engines and SQLite alike.
const purgeSQL = `DELETE FROM replay_nonces WHERE key_hash IN ` +
	`(SELECT key_hash FROM replay_nonces WHERE expires_at < ? LIMIT ?)`

// Purge deletes the rows whose expiry has passed, in batches of
// Config.PurgeBatch rows (so no single statement holds locks for long),
// until none is left or ctx is done. It returns the number deleted.
func (s *Store) Purge(ctx context.Context) (int64, error) {
	now := s.cfg.Now().UTC()
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		res := s.cfg.DB.WithContext(ctx).Exec(purgeSQL, now, s.cfg.PurgeBatch)
		if res.Error != nil {
			return total, fmt.Errorf("replaypg: purge: %w", res.Error)
		}
		total += res.RowsAffected
		if res.RowsAffected < int64(s.cfg.PurgeBatch) {
			return total, nil
		}
	}
}

// Start runs Purge every Config.PurgeInterval in a goroutine until ctx is
// done or stop is called; stop waits for the goroutine to finish. Failures
// are logged to Config.Logger and retried at the next tick.
func (s *Store) Start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(s.cfg.PurgeInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				n, err := s.Purge(ctx)
				if err != nil && ctx.Err() == nil {
					s.cfg.Logger.Warn("replaypg: purge failed", "err", err)
				} else if n > 0 {
					s.cfg.Logger.Debug("replaypg: purged expired nonces", "rows", n)
				}
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}
