// Package tokencache keeps what verifying a signed token found (its claims),
// keyed by the SHA-256 of the token string, for as long as the token is
// valid by its own times: a repeated bearer check skips parsing and the
// signature check. It knows nothing of revocation: the caller checks the
// session and the user on every request as before (auth's bearer check).
// It is not a cache of who may do what.
package tokencache

import (
	"crypto/sha256"
	"sync"
	"time"
)

// Cache holds at most max verified tokens. Safe for concurrent use.
type Cache[V any] struct {
	max int
	mu  sync.RWMutex
	m   map[[sha256.Size]byte]entry[V]
}

type entry[V any] struct {
	v        V
	from, to time.Time // valid at from (issued at, or not before) and until before to (expiry)
}

// New returns a cache of at most max tokens; max <= 0 keeps none.
func New[V any](max int) *Cache[V] {
	return &Cache[V]{max: max, m: map[[sha256.Size]byte]entry[V]{}}
}

// Get returns what was stored for token if it is valid at now: not before
// its from, before its expiry.
func (c *Cache[V]) Get(token string, now time.Time) (V, bool) {
	var zero V
	if c.max <= 0 {
		return zero, false
	}
	k := sha256.Sum256([]byte(token))
	c.mu.RLock()
	e, ok := c.m[k]
	c.mu.RUnlock()
	if !ok || now.Before(e.from) || !now.Before(e.to) {
		return zero, false
	}
	return e.v, true
}

// Put stores v for token, valid from from until before to. When the cache
// is full, expired tokens go first, then tokens at random.
func (c *Cache[V]) Put(token string, v V, from, to, now time.Time) {
	if c.max <= 0 || !now.Before(to) {
		return
	}
	k := sha256.Sum256([]byte(token))
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		for key, e := range c.m {
			if !now.Before(e.to) {
				delete(c.m, key)
			}
		}
		for key := range c.m { // map order: a random token goes
			if len(c.m) < c.max {
				break
			}
			delete(c.m, key)
		}
	}
	c.m[k] = entry[V]{v: v, from: from, to: to}
}

// Len is how many tokens are kept.
func (c *Cache[V]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
