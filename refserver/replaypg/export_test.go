package replaypg

import (
	"crypto/sha256"
	"time"
)

// RunOneBatch hands keys to runBatch as one batch (as flight would when the
// calls arrive together) and returns each call's answer in order, for the
// external tests. ok[i] is false when call i got no answer at all.
func (s *Store) RunOneBatch(keys []string, expiry time.Time) (seen []bool, errs []error, ok []bool) {
	batch := make([]*seenReq, len(keys))
	for i, k := range keys {
		batch[i] = &seenReq{sum: sha256.Sum256([]byte(k)), expiry: expiry, done: make(chan seenRes, 1)}
	}
	s.runBatch(batch)
	seen, errs, ok = make([]bool, len(batch)), make([]error, len(batch)), make([]bool, len(batch))
	for i, r := range batch {
		select {
		case res := <-r.done:
			seen[i], errs[i], ok[i] = res.seen, res.err, true
		default:
		}
	}
	return seen, errs, ok
}
