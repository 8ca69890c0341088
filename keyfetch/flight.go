package keyfetch

import (
	"context"
	"fmt"

	"github.com/agentid/agentid/signer"
)

// flight is one shared fetch of a key set. waiters counts the callers
// waiting for it; when the last one leaves, the fetch is cancelled.
type flight struct {
	done    chan struct{} // closed when e and err are set
	e       *entry
	err     error
	waiters int
	cancel  context.CancelCauseFunc
}

// refresh fetches set once for all concurrent callers and stores the
// outcome. seen is the entry the caller found (nil if none): if another
// flight stored a usable entry since, that one is returned without fetching
// again. The fetch runs detached from ctx with its own timeout, and is
// cancelled when every caller waiting for it has given up on its ctx; an
// abandoned fetch stores nothing.
func (f *Fetcher) refresh(ctx context.Context, set signer.KeySet, seen *entry) (*entry, error) {
	key := set.Kind.String() + " " + set.URL
	f.fmu.Lock()
	fl := f.flights[key]
	if fl == nil {
		fctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		fl = &flight{done: make(chan struct{}), cancel: cancel}
		f.flights[key] = fl
		go f.fly(fctx, key, fl, set, seen)
	}
	fl.waiters++
	f.fmu.Unlock()
	select {
	case <-fl.done:
		return fl.e, fl.err
	case <-ctx.Done():
		f.fmu.Lock()
		if fl.waiters--; fl.waiters == 0 {
			fl.cancel(errAbandoned)
			if f.flights[key] == fl { // later callers start a fresh fetch
				delete(f.flights, key)
			}
		}
		f.fmu.Unlock()
		return nil, &FetchError{URL: set.URL, Err: fmt.Errorf("gave up waiting: %w", ctx.Err())}
	}
}

// fly runs the shared fetch fl.
func (f *Fetcher) fly(ctx context.Context, key string, fl *flight, set signer.KeySet, seen *entry) {
	defer fl.cancel(nil)
	e, err := func() (*entry, error) {
		if cur := f.load(keyOf(set)); cur != nil && cur != seen {
			now := f.cfg.Now()
			if now.Before(cur.freshUntil) || (cur.err != nil && now.Before(cur.errUntil)) {
				return cur, nil
			}
		}
		tctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
		defer cancel()
		return f.fetchAndStore(tctx, set)
	}()
	f.fmu.Lock()
	if f.flights[key] == fl {
		delete(f.flights, key)
	}
	f.fmu.Unlock()
	fl.e, fl.err = e, err
	close(fl.done)
}

// acquireHost takes one of MaxFetchesPerHost slots of host, reporting
// false when none is free.
func (f *Fetcher) acquireHost(host string) bool {
	if f.cfg.MaxFetchesPerHost < 0 {
		return true
	}
	f.fmu.Lock()
	defer f.fmu.Unlock()
	if f.busy[host] >= f.cfg.MaxFetchesPerHost {
		return false
	}
	f.busy[host]++
	return true
}

func (f *Fetcher) releaseHost(host string) {
	if f.cfg.MaxFetchesPerHost < 0 {
		return
	}
	f.fmu.Lock()
	defer f.fmu.Unlock()
	if f.busy[host]--; f.busy[host] <= 0 {
		delete(f.busy, host)
	}
}
