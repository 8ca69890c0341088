package replaypg

// Seen and the grouping of concurrent calls into batches: one statement
// per batch, a call alone running its own statement at once.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"time"

	"github.com/agentid/agentid/middleware"
)

// Seen implements middleware.ReplayStore: it records the SHA-256 digest of
// key until expiry and reports whether an unexpired record already existed.
// Of concurrent calls with one key exactly one reports false. Database
// errors wrap middleware.ErrReplayStore.
//
// Concurrent calls are grouped: a statement inserts every key waiting at
// the time it starts (at most MaxBatch), so under load the database sees
// one statement and one commit per batch instead of per request. A lone
// call (no statement running, and none arrived within 2×Config.Linger
// before it) runs its own statement on its own goroutine at once: no
// other goroutine is woken, and nothing waits for a batch to fill. The
// calls that arrive while a statement runs make the next batch: batches
// grow with the load, and each commit (a WAL flush on PostgreSQL) serves
// more calls. At a moderate rate (concurrent calls, more often than once
// per 2×Linger, yet too few per statement round trip to batch by
// themselves) a batch of
// fewer than LingerBatch calls waits until its oldest call is Linger old
// or the batch reaches LingerBatch (or the recent peak of calls in Seen
// at once, if smaller), whichever comes first. More
// statements (up to MaxStatements) run side by side only while a full batch
// is waiting. When a batch's statement fails, each of its keys is tried
// again alone, so one failing key (or a failure that hit the batch by
// chance) fails only the calls it belongs to.
func (s *Store) Seen(ctx context.Context, key string, expiry time.Time) (bool, error) {
	r := &seenReq{sum: sha256.Sum256([]byte(key)), expiry: expiry.UTC(), at: time.Since(epoch)}
	inside := int(s.inside.Add(1))
	others := inside > 1
	defer s.inside.Add(-1)
	s.mu.Lock()
	gap := r.at - s.last
	s.last = r.at
	s.gap += (min(gap, time.Second) - s.gap) / 8
	s.peak = max(inside*64, s.peak-s.peak/64)
	if others {
		s.overlap += (1024 - s.overlap) / 8
	} else {
		s.overlap -= s.overlap / 8
	}
	if s.runners == 0 {
		// No statement runs (so none is pending): this call runs one
		// itself. The calls arriving meanwhile make the next batch,
		// which a goroutine of its own runs if there is one.
		s.runners++
		if !s.arrivingDensely(gap) {
			s.mu.Unlock()
			seen, err := s.insertAlone(ctx, r)
			s.handOffPending()
			return seen, err
		}
		// Concurrent calls are arriving densely: this one leads a batch
		// that waits a little for them.
		r.done = make(chan seenRes, 1)
		s.pending = append(s.pending, r)
		batch := s.take()
		s.mu.Unlock()
		if batch != nil {
			s.runBatch(batch)
		}
		s.handOffPending()
	} else {
		r.done = make(chan seenRes, 1)
		s.pending = append(s.pending, r)
		if s.runners < s.cfg.MaxStatements && len(s.pending) >= s.cfg.MaxBatch {
			s.runners++
			go s.runBatches()
		}
		if s.lingering && len(s.pending) >= s.lingerBatch() {
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
		s.mu.Unlock()
	}
	select {
	case res := <-r.done:
		return res.seen, res.err
	case <-ctx.Done():
		return false, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, ctx.Err())
	}
}

// arrivingDensely reports whether calls arrive often enough that a small batch
// should wait for more: both the call that just came (gap after the one
// before it) and the recent average are within 2×Config.Linger (so a wait
// of Linger can expect at least half a call more), and calls overlap (at
// least a quarter of the recent ones found another call in Seen). A
// single caller whose calls follow one another closely never overlaps:
// waiting would gain it nothing. s.mu is held.
func (s *Store) arrivingDensely(gap time.Duration) bool {
	l := 2 * s.cfg.Linger
	return l > 0 && gap <= l && s.gap <= l && s.overlap >= 256
}

// handOffPending ends the statement of a call that ran one itself: the
// calls that arrived meanwhile get a runBatches goroutine of their own.
func (s *Store) handOffPending() {
	s.mu.Lock()
	if len(s.pending) > 0 {
		go s.runBatches()
	} else {
		s.runners--
	}
	s.mu.Unlock()
}

// insertAlone inserts r's digest in a statement of its own, within ctx and
// Config.Timeout, and reports whether an unexpired record existed.
func (s *Store) insertAlone(ctx context.Context, r *seenReq) (bool, error) {
	now := s.cfg.Now().UTC()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	fresh, err := s.insert(ctx, now, []*seenReq{r})
	if err != nil {
		return false, err
	}
	return !fresh[0], nil
}

type seenReq struct {
	sum    digest
	expiry time.Time
	at     time.Duration // arrival, since epoch
	done   chan seenRes
}

type seenRes struct {
	seen bool
	err  error
}

// runBatches runs batches until no call is waiting.
func (s *Store) runBatches() {
	s.mu.Lock()
	for {
		batch := s.take()
		if batch == nil {
			s.runners--
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		s.runBatch(batch)
		s.mu.Lock()
	}
}

// lingerBatch is the batch size at which lingering stops: LingerBatch, or
// fewer when fewer calls have recently been in Seen at once (a few
// callers each waiting for its answer before the next call: once all of
// them wait, no one else will come). s.mu is held.
func (s *Store) lingerBatch() int {
	return min(s.cfg.LingerBatch, (s.peak+63)/64)
}

// take removes the next batch (at most MaxBatch calls) from pending, or
// returns nil if none is waiting. A batch smaller than LingerBatch, taken
// by the only runner while calls arrive densely, first waits until its
// oldest call is Linger old or LingerBatch calls wait. s.mu is held on
// entry and on return (and released while waiting).
func (s *Store) take() []*seenReq {
	if len(s.pending) == 0 {
		return nil
	}
	if s.runners == 1 && len(s.pending) < s.lingerBatch() && s.arrivingDensely(0) {
		if wait := s.pending[0].at + s.cfg.Linger - time.Since(epoch); wait > 0 {
			s.lingering = true
			s.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-s.wake:
			}
			t.Stop()
			s.mu.Lock()
			s.lingering = false
			select { // a signal sent after the timer fired
			case <-s.wake:
			default:
			}
		}
	}
	n := min(len(s.pending), s.cfg.MaxBatch)
	batch := make([]*seenReq, n)
	copy(batch, s.pending)
	rest := copy(s.pending, s.pending[n:])
	clear(s.pending[rest:])
	s.pending = s.pending[:rest]
	return batch
}

// runBatch inserts the batch's distinct digests in one statement and
// answers every call in it. It sorts batch by digest (so concurrent
// statements lock rows in one order); a digest twice in one batch is new
// at most once, for the call that came first. If the statement fails and
// the batch holds more than one distinct digest, each is inserted again in
// a statement of its own (within the same deadline), and only the calls
// whose own statement fails get an error.
func (s *Store) runBatch(batch []*seenReq) {
	now := s.cfg.Now().UTC()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()

	slices.SortStableFunc(batch, func(a, b *seenReq) int { return bytes.Compare(a.sum[:], b.sum[:]) })
	distinct := make([]*seenReq, 0, len(batch))
	for i, r := range batch {
		if i == 0 || r.sum != batch[i-1].sum {
			distinct = append(distinct, r)
		}
	}
	fresh, err := s.insert(ctx, now, distinct)
	var errs []error // the error of each distinct digest whose insert failed
	switch {
	case err == nil:
	case len(distinct) == 1:
		errs = []error{err}
	default:
		fresh = make([]bool, len(distinct))
		errs = make([]error, len(distinct))
		for i, r := range distinct {
			one, err := s.insert(ctx, now, []*seenReq{r})
			if err != nil {
				errs[i] = err
				continue
			}
			fresh[i] = one[0]
		}
	}
	d := -1 // index in distinct of batch[i]'s digest
	for i, r := range batch {
		first := i == 0 || r.sum != batch[i-1].sum
		if first {
			d++
		}
		switch {
		case errs != nil && errs[d] != nil:
			r.done <- seenRes{err: errs[d]}
		case first:
			r.done <- seenRes{seen: !fresh[d]}
		default: // a later copy in the batch is seen
			r.done <- seenRes{seen: true}
		}
	}
}
