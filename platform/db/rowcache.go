package db

import (
	"context"
	"sync"
)

// RowCache is an ExactCache of rows read by id: each row is stored under
// the owner its table's writes name when they invalidate (the row's account,
// or its project; the payload of the table's NOTIFY trigger), with an index
// from id to owner, so a read by id alone finds it. An index entry may
// outlive its row (an invalidation drops rows, not the index): that is a
// miss, never a stale row. The projects module keeps the project row every
// project-scoped route is authorised by in one, and the deployments module
// the finished deployments the status route answers.
type RowCache[V any] struct {
	*ExactCache[string, V]

	mu      sync.RWMutex
	ownerOf map[string]string // id -> owner; emptied when it reaches 4 x max
}

// NewRowCache returns a cache of at most max rows (<= 0 disables it); live
// as NewExactCache.
func NewRowCache[V any](max int64, live bool) *RowCache[V] {
	return &RowCache[V]{ExactCache: NewExactCache[string, V](max, nil, live), ownerOf: map[string]string{}}
}

// Row returns the row id, if stored and the cache is live.
func (c *RowCache[V]) Row(id string) (V, bool) {
	c.mu.RLock()
	owner, ok := c.ownerOf[id]
	c.mu.RUnlock()
	if !ok {
		var zero V
		return zero, false
	}
	return c.Get(owner, id)
}

// PutRow stores row id under owner unless anything was invalidated since
// Begin returned gen (ExactCache.Put).
func (c *RowCache[V]) PutRow(gen uint64, owner, id string, row V) {
	if !c.Live() {
		return
	}
	c.mu.Lock()
	if int64(len(c.ownerOf)) >= 4*c.max {
		clear(c.ownerOf)
	}
	c.ownerOf[id] = owner
	c.mu.Unlock()
	c.Put(gen, owner, id, row)
}

// Read returns row id: stored, or read by read and then stored under the
// owner keep names, when keep says to and nothing was invalidated since the
// read began. What it returns shares slices with what is stored: a caller
// must not change them.
func (c *RowCache[V]) Read(ctx context.Context, id string, read func(context.Context, string) (*V, error), keep func(*V) (owner string, ok bool)) (*V, error) {
	if v, ok := c.Row(id); ok {
		return &v, nil
	}
	gen := c.Begin()
	v, err := read(ctx, id)
	if err == nil {
		if owner, ok := keep(v); ok {
			c.PutRow(gen, owner, id, *v)
		}
	}
	return v, err
}

// Invalidators tell every cache of a listener what a notification names
// (one db.Listen for several caches fed by the same channels).
type Invalidators []Invalidator

// Invalidate passes the notification to each cache.
func (cs Invalidators) Invalidate(channel, payload string) {
	for _, c := range cs {
		c.Invalidate(channel, payload)
	}
}

// Reset resets each cache.
func (cs Invalidators) Reset(live bool) {
	for _, c := range cs {
		c.Reset(live)
	}
}
