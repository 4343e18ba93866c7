package auth

import (
	"sort"
	"sync"
	"time"
)

// Limit is a token bucket: Max attempts at once, refilled evenly over Per
// (so Max attempts per Per on average). The zero Limit means "use the
// default"; a negative Max means unlimited.
type Limit struct {
	Max int
	Per time.Duration
}

func (l Limit) or(def Limit) Limit {
	if l.Max == 0 {
		return def
	}
	if l.Per <= 0 {
		l.Per = def.Per
	}
	return l
}

func (l Limit) unlimited() bool { return l.Max < 0 }

// limiter holds token buckets in process memory (so limits are per replica).
// It keeps at most maxKeys buckets: when full it first drops buckets that have
// refilled completely (they hold no information), then the least recently
// used ones. It starts no goroutine.
type limiter struct {
	mu      sync.Mutex
	now     func() time.Time
	maxKeys int
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
	limit  Limit
}

func newLimiter(now func() time.Time, maxKeys int) *limiter {
	return &limiter{now: now, maxKeys: maxKeys, buckets: make(map[string]*bucket)}
}

// allow takes one token from key's bucket. When none is left it answers false
// and how long until one is.
func (l *limiter) allow(key string, lim Limit) (bool, time.Duration) {
	if lim.unlimited() {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= l.maxKeys {
			l.evict(now)
		}
		b = &bucket{tokens: float64(lim.Max), last: now, limit: lim}
		l.buckets[key] = b
	}
	b.refill(now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	perToken := lim.Per / time.Duration(lim.Max)
	wait := time.Duration((1 - b.tokens) * float64(perToken))
	if wait < time.Second {
		wait = time.Second
	}
	return false, wait
}

// refund gives back the token an attempt took (used when the attempt succeeded).
func (l *limiter) refund(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.buckets[key]; b != nil {
		b.refill(l.now())
		b.tokens = min(b.tokens+1, float64(b.limit.Max))
	}
}

func (b *bucket) refill(now time.Time) {
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(float64(b.limit.Max), b.tokens+float64(b.limit.Max)*float64(el)/float64(b.limit.Per))
		b.last = now
	}
}

// evict makes room for at least one key. Called with l.mu held.
func (l *limiter) evict(now time.Time) {
	for k, b := range l.buckets {
		b.refill(now)
		if b.tokens >= float64(b.limit.Max) {
			delete(l.buckets, k)
		}
	}
	// Still full of active buckets: drop the least recently touched quarter.
	// An attacker who can fill the table can already spread attempts over
	// that many keys, so forgetting the oldest loses little.
	for len(l.buckets) >= l.maxKeys {
		keys := make([]string, 0, len(l.buckets))
		for k := range l.buckets {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return l.buckets[keys[i]].last.Before(l.buckets[keys[j]].last) })
		for _, k := range keys[:max(1, len(keys)/4)] {
			delete(l.buckets, k)
		}
	}
}

func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}
