// Package lru is the module's one bounded cache, shared by keyfetch, the
// verifier (middleware), the reference server and signer: size-bounded,
// least recently used, with an optional time to live per entry measured by
// an injected clock.
//
//	c := lru.New[string, Key](10_000, 500*time.Millisecond, nil)
//	c.Add("kid", key)
//	k, ok := c.Get("kid") // false once 500 ms have passed or the entry was evicted
//	c.RemoveFunc(func(kid string, k Key) bool { return k.Owner == uid })
package lru

import (
	"sync"
	"time"
)

// Cache is a size-bounded LRU cache. When it holds Size entries, adding a
// new key evicts the least recently used one. With a TTL, an entry also
// stops being returned TTL after it was added (expired entries are dropped
// when met, or evicted like any other). All methods are safe for
// concurrent use.
//
// Generation supports read-through caching without resurrecting stale
// values: read the generation before loading a value from its source, then
// store it with AddIfGeneration, which does nothing if a removal happened
// meanwhile.
type Cache[K comparable, V any] struct {
	size int
	ttl  time.Duration
	now  func() time.Time

	mu    sync.Mutex
	items map[K]*entry[K, V]
	root  entry[K, V] // sentinel: root.next is the most recently used
	gen   uint64

	onRemove func(K, V) // see OnRemove
}

type entry[K comparable, V any] struct {
	key        K
	value      V
	expires    time.Time // zero: never
	prev, next *entry[K, V]
}

// New returns an empty cache of at most size entries (size must be
// positive; New panics otherwise). If ttl > 0, each entry expires ttl
// after it was added, measured with now; if ttl is 0, entries leave only
// by eviction or removal. If now is nil, time.Now is used.
func New[K comparable, V any](size int, ttl time.Duration, now func() time.Time) *Cache[K, V] {
	if size <= 0 {
		panic("lru: size must be positive")
	}
	if now == nil {
		now = time.Now
	}
	c := &Cache[K, V]{size: size, ttl: ttl, now: now, items: make(map[K]*entry[K, V])}
	c.root.next, c.root.prev = &c.root, &c.root
	return c
}

// Get returns the value of key and marks it most recently used. An expired
// entry is removed and reported missing.
func (c *Cache[K, V]) Get(key K) (V, bool) {
	var now time.Time
	if c.ttl > 0 {
		now = c.now()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[key]
	if !ok {
		var zero V
		return zero, false
	}
	if c.ttl > 0 && !now.Before(e.expires) {
		c.unlink(e)
		var zero V
		return zero, false
	}
	c.moveToFront(e)
	return e.value, true
}

// Add stores value under key as the most recently used entry (replacing
// any previous value and restarting its TTL), evicting the least recently
// used entry when the cache is full.
func (c *Cache[K, V]) Add(key K, value V) {
	var expires time.Time
	if c.ttl > 0 {
		expires = c.now().Add(c.ttl)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.add(key, value, expires)
}

// AddIfGeneration is Add, done only if no Remove, RemoveFunc or Purge has
// run since Generation returned gen. It reports whether value was stored.
func (c *Cache[K, V]) AddIfGeneration(key K, value V, gen uint64) bool {
	var expires time.Time
	if c.ttl > 0 {
		expires = c.now().Add(c.ttl)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return false
	}
	c.add(key, value, expires)
	return true
}

// Generation returns a number that changes at every Remove, RemoveFunc and
// Purge (see AddIfGeneration).
func (c *Cache[K, V]) Generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// Remove drops key and reports whether it was present.
func (c *Cache[K, V]) Remove(key K) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	e, ok := c.items[key]
	if ok {
		c.unlink(e)
	}
	return ok
}

// RemoveFunc drops every entry for which match returns true and returns
// how many it dropped. match runs with the cache locked: it must not call
// the cache.
func (c *Cache[K, V]) RemoveFunc(match func(K, V) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	n := 0
	for e := c.root.next; e != &c.root; {
		next := e.next
		if match(e.key, e.value) {
			c.unlink(e)
			n++
		}
		e = next
	}
	return n
}

// Purge drops every entry.
func (c *Cache[K, V]) Purge() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if c.onRemove != nil {
		for e := c.root.next; e != &c.root; e = e.next {
			c.onRemove(e.key, e.value)
		}
	}
	clear(c.items)
	c.root.next, c.root.prev = &c.root, &c.root
}

// OnRemove sets fn to be called with each entry that leaves the cache:
// evicted, removed, purged or dropped on expiry (not when Add replaces the
// value of a key it holds). fn runs with the cache locked: it must not
// call the cache. Set it before the cache is shared.
func (c *Cache[K, V]) OnRemove(fn func(K, V)) { c.onRemove = fn }

// Len returns the number of entries held, expired ones not yet dropped
// included.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}

func (c *Cache[K, V]) add(key K, value V, expires time.Time) {
	if e, ok := c.items[key]; ok {
		e.value, e.expires = value, expires
		c.moveToFront(e)
		return
	}
	if len(c.items) >= c.size {
		c.unlink(c.root.prev)
	}
	e := &entry[K, V]{key: key, value: value, expires: expires}
	c.items[key] = e
	c.insertFront(e)
}

func (c *Cache[K, V]) unlink(e *entry[K, V]) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	delete(c.items, e.key)
	if c.onRemove != nil {
		c.onRemove(e.key, e.value)
	}
}

func (c *Cache[K, V]) insertFront(e *entry[K, V]) {
	e.prev, e.next = &c.root, c.root.next
	c.root.next.prev = e
	c.root.next = e
}

func (c *Cache[K, V]) moveToFront(e *entry[K, V]) {
	if c.root.next == e {
		return
	}
	e.prev.next, e.next.prev = e.next, e.prev
	c.insertFront(e)
}
