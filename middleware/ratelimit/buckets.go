package ratelimit

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxKeys bounds the buckets a Buckets holds when
// BucketsConfig.MaxKeys is 0.
const DefaultMaxKeys = 100_000

const maxShards = 64

// BucketsConfig configures a Buckets.
type BucketsConfig struct {
	// MaxKeys bounds the buckets held. When a shard is full, buckets that
	// have refilled completely (so dropping them changes nothing) are
	// dropped first, then an arbitrary one. If 0, DefaultMaxKeys.
	MaxKeys int
	// Idle, if set, drops every bucket that is full again and unused for
	// Idle, in one sweep at most every Idle; else buckets are dropped only
	// when a shard is full.
	Idle time.Duration
	// Now is the clock. If nil, time.Now is used.
	Now func() time.Time
}

// Buckets holds token buckets in this process's memory, one per key. It is
// safe for concurrent use.
//
// A bucket is held under a fixed-size name: 128 bits of two seeded hashes
// of its key (hash/maphash, seeds drawn per Buckets, so a client cannot
// choose keys that collide), never the key itself, so a bucket costs the
// same whatever the length of its key.
type Buckets struct {
	now       func() time.Time
	idle      int64 // nanoseconds; 0: no sweep
	lastSweep atomic.Int64
	perShard  int
	seeds     [2]maphash.Seed
	shards    []shard
}

// bucketName is the fixed-size name of a bucket.
type bucketName [2]uint64

type shard struct {
	mu      sync.Mutex
	buckets map[bucketName]bucket
}

type bucket struct {
	tokens float64
	last   int64 // unix nanoseconds of the last update
	full   int64 // unix nanoseconds when the bucket is full again
}

// NewBuckets returns an empty Buckets.
func NewBuckets(cfg BucketsConfig) *Buckets {
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	n := min(maxShards, cfg.MaxKeys) // n shards of MaxKeys/n: never more than MaxKeys in all
	b := &Buckets{now: cfg.Now, idle: int64(max(cfg.Idle, 0)), perShard: cfg.MaxKeys / n,
		seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, shards: make([]shard, n)}
	for i := range b.shards {
		b.shards[i].buckets = make(map[bucketName]bucket)
	}
	b.lastSweep.Store(cfg.Now().UnixNano())
	return b
}

// Take refills the bucket of key (burst tokens at most, refilled at rate
// per second; a bucket not seen before starts full) and takes one token
// from it if it holds one. It returns whether a token was taken and the
// tokens left afterwards.
func (b *Buckets) Take(key string, burst int, rate float64) (ok bool, tokens float64) {
	now := b.now().UnixNano()
	if b.idle > 0 {
		if last := b.lastSweep.Load(); now-last >= b.idle && b.lastSweep.CompareAndSwap(last, now) {
			b.sweep(now)
		}
	}
	name := bucketName{maphash.String(b.seeds[0], key), maphash.String(b.seeds[1], key)}
	sh := &b.shards[name[0]%uint64(len(b.shards))]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	bk, found := sh.buckets[name]
	if !found {
		if len(sh.buckets) >= b.perShard {
			sh.evict(now)
		}
		bk = bucket{tokens: float64(burst), last: now}
	} else if el := now - bk.last; el > 0 {
		bk.tokens = min(float64(burst), bk.tokens+float64(el)/1e9*rate)
		bk.last = now
	}
	ok = bk.tokens >= 1
	if ok {
		bk.tokens--
	}
	bk.full = now + int64((float64(burst)-bk.tokens)/rate*1e9)
	sh.buckets[name] = bk
	return ok, bk.tokens
}

// sweep drops the buckets full again and unused for b.idle.
func (b *Buckets) sweep(now int64) {
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		for k, bk := range sh.buckets {
			if now >= bk.full && now-bk.last >= b.idle {
				delete(sh.buckets, k)
			}
		}
		sh.mu.Unlock()
	}
}

// evict drops the buckets that are full again, or one arbitrary bucket
// when none is. sh.mu is held.
func (sh *shard) evict(now int64) {
	n := len(sh.buckets)
	for k, bk := range sh.buckets {
		if now >= bk.full {
			delete(sh.buckets, k)
		}
	}
	if len(sh.buckets) < n {
		return
	}
	for k := range sh.buckets {
		delete(sh.buckets, k)
		return
	}
}

// Len returns the number of buckets held.
func (b *Buckets) Len() int {
	n := 0
	for i := range b.shards {
		b.shards[i].mu.Lock()
		n += len(b.shards[i].buckets)
		b.shards[i].mu.Unlock()
	}
	return n
}
