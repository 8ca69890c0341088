package replaypg

import (
	"crypto/sha256"
	"time"
)

// RunOneBatch hands keys to runBatch as one batch (as runBatches would when the
// calls arrive together) and returns each call's answer in order, for the
// external tests. ok[i] is false when call i got no answer at all.
func (s *Store) RunOneBatch(keys []string, expiry time.Time) (seen []bool, errs []error, ok []bool) {
	calls := make([]*seenReq, len(keys))
	for i, k := range keys {
		calls[i] = &seenReq{sum: sha256.Sum256([]byte(k)), expiry: expiry, done: make(chan seenRes, 1)}
	}
	s.runBatch(append([]*seenReq(nil), calls...)) // runBatch reorders its batch
	seen, errs, ok = make([]bool, len(calls)), make([]error, len(calls)), make([]bool, len(calls))
	for i, r := range calls {
		select {
		case res := <-r.done:
			seen[i], errs[i], ok[i] = res.seen, res.err, true
		default:
		}
	}
	return seen, errs, ok
}

// Statements reports how many statements Seen has run, for the benchmarks.
func (s *Store) Statements() int64 { return s.stmts.Load() }

// UsesPgx reports whether Seen's statements go to pgx directly.
func (s *Store) UsesPgx() bool { return s.pg != nil && !s.noPgx.Load() }

// SetDense makes the store take the next calls for a dense, overlapping
// stream of n concurrent callers (as after many concurrent calls in quick
// succession).
func (s *Store) SetDense(n int) {
	s.mu.Lock()
	s.last, s.gap, s.overlap, s.peak = time.Since(epoch), 0, 1024, n*64
	s.mu.Unlock()
}

// DisablePgx makes Seen use gorm even on PostgreSQL.
func (s *Store) DisablePgx() { s.noPgx.Store(true) }
