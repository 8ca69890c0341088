package refserver

import (
	"sync"
	"time"
)

// maxCacheEntries bounds each short-lived cache; past it, new values are
// not cached until expired entries are swept.
const maxCacheEntries = 100_000

// ttlCache is a map whose entries expire a fixed ttl after they were
// stored, measured with now. Invalidate bumps a generation so that a value
// read from the database before the invalidation is not stored after it.
// It is safe for concurrent use.
type ttlCache[V any] struct {
	ttl time.Duration
	now func() time.Time

	mu        sync.RWMutex
	m         map[string]ttlEntry[V]
	gen       uint64
	lastSweep time.Time
}

type ttlEntry[V any] struct {
	v       V
	tag     string // what Invalidate matches (the agent uid)
	expires time.Time
}

func newTTLCache[V any](ttl time.Duration, now func() time.Time) *ttlCache[V] {
	return &ttlCache[V]{ttl: ttl, now: now, m: map[string]ttlEntry[V]{}}
}

// get returns the unexpired value of key and the current generation (to
// pass to put after a miss).
func (c *ttlCache[V]) get(key string) (v V, ok bool, gen uint64) {
	now := c.now()
	c.mu.RLock()
	e, ok := c.m[key]
	gen = c.gen
	c.mu.RUnlock()
	if ok && now.Before(e.expires) {
		return e.v, true, gen
	}
	return v, false, gen
}

// put stores v under key unless invalidate ran since gen was read.
func (c *ttlCache[V]) put(key, tag string, v V, gen uint64) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	if len(c.m) >= maxCacheEntries || now.Sub(c.lastSweep) >= 10*c.ttl {
		for k, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, k)
			}
		}
		c.lastSweep = now
	}
	if len(c.m) < maxCacheEntries {
		c.m[key] = ttlEntry[V]{v: v, tag: tag, expires: now.Add(c.ttl)}
	}
}

// invalidate drops the entries tagged tag (every entry when tag is "").
func (c *ttlCache[V]) invalidate(tag string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for k, e := range c.m {
		if tag == "" || e.tag == tag {
			delete(c.m, k)
		}
	}
}
