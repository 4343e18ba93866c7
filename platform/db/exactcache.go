package db

import (
	"strings"
	"sync"
	"sync/atomic"
)

// ExactCache keeps values per owner (a user) and key, kept exact rather than
// timed: every write that can change what an owner's entries say invalidates
// the owner after it commits and before it answers, and on Postgres other
// replicas do the same when the write's NOTIFY reaches them (Listen; the
// cache is an Invalidator). A read that raced a write cannot store what it
// read: Put carries the generation Begin returned before the read, and every
// invalidation bumps it. Memory is bounded by max, in the units cost counts
// (entries, bytes): a Put beyond it first drops whole owners, at random.
//
// The auth module's bearer cache and the projects list cache are two.
type ExactCache[K comparable, V any] struct {
	max  int64
	cost func(V) int64

	mu     sync.RWMutex
	gen    uint64
	size   int64
	owners map[string]map[K]V

	live atomic.Bool // may serve and store
}

// NewExactCache returns a cache of at most max cost (<= 0 disables it); cost
// nil counts entries. live says whether it serves from the start (false on
// Postgres until Listen has proven its connection).
func NewExactCache[K comparable, V any](max int64, cost func(V) int64, live bool) *ExactCache[K, V] {
	if cost == nil {
		cost = func(V) int64 { return 1 }
	}
	c := &ExactCache[K, V]{max: max, cost: cost, owners: map[string]map[K]V{}}
	c.live.Store(live && max > 0)
	return c
}

// Enabled reports whether the cache was given room (max > 0).
func (c *ExactCache[K, V]) Enabled() bool { return c.max > 0 }

// Live reports whether the cache serves and stores now.
func (c *ExactCache[K, V]) Live() bool { return c.live.Load() }

// Get returns owner's value for k, if stored and the cache is live.
func (c *ExactCache[K, V]) Get(owner string, k K) (V, bool) {
	if !c.live.Load() {
		var zero V
		return zero, false
	}
	c.mu.RLock()
	v, ok := c.owners[owner][k]
	c.mu.RUnlock()
	return v, ok
}

// Begin returns the generation to pass to Put; call it before reading the
// database.
func (c *ExactCache[K, V]) Begin() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.gen
}

// Put stores v unless anything was invalidated since Begin returned gen (or
// v alone is bigger than the cache).
func (c *ExactCache[K, V]) Put(gen uint64, owner string, k K, v V) {
	n := c.cost(v)
	if !c.live.Load() || n > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen || !c.live.Load() {
		return
	}
	for o := range c.owners { // map order: a random owner goes first
		if c.size+n <= c.max {
			break
		}
		c.dropLocked(o)
	}
	m := c.owners[owner]
	if m == nil {
		m = map[K]V{}
		c.owners[owner] = m
	}
	if old, ok := m[k]; ok {
		c.size -= c.cost(old)
	}
	m[k] = v
	c.size += n
}

func (c *ExactCache[K, V]) dropLocked(owner string) {
	for _, v := range c.owners[owner] {
		c.size -= c.cost(v)
	}
	delete(c.owners, owner)
}

// InvalidateOwner drops every entry of owner.
func (c *ExactCache[K, V]) InvalidateOwner(owner string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.dropLocked(owner)
}

// InvalidateAll drops every entry.
func (c *ExactCache[K, V]) InvalidateAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
}

// Invalidate drops what a notification names: an owner, or "*" for all
// (Invalidator).
func (c *ExactCache[K, V]) Invalidate(_, payload string) {
	if payload == "*" {
		c.InvalidateAll()
		return
	}
	c.InvalidateOwner(payload)
}

// Reset empties the cache and sets whether it may serve (Invalidator).
func (c *ExactCache[K, V]) Reset(live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
	c.live.Store(live && c.max > 0)
}

// Size is the cost of what is stored.
func (c *ExactCache[K, V]) Size() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.size
}

func (c *ExactCache[K, V]) clearLocked() {
	c.gen++
	c.size = 0
	clear(c.owners)
}

// NotifyFunction is the SQL (Postgres) of a trigger function fn that
// notifies channel with the changed row's column: OLD's on DELETE, NEW's
// otherwise, and OLD's too when an UPDATE moved the row to another value.
// An ExactCache keyed by that column hears it through Listen.
func NotifyFunction(fn, channel, column string) string {
	return NotifyFunctionIgnoring(fn, channel, column)
}

// NotifyFunctionIgnoring is NotifyFunction, silent on an UPDATE that changed
// none of the row's columns but ignored: columns written often that no cache
// shows (a counter kept beside the row).
func NotifyFunctionIgnoring(fn, channel, column string, ignored ...string) string {
	skip := ""
	if len(ignored) > 0 {
		cols := "ARRAY['" + strings.Join(ignored, "', '") + "']"
		skip = `
	IF TG_OP = 'UPDATE' AND to_jsonb(OLD) - ` + cols + ` = to_jsonb(NEW) - ` + cols + ` THEN
		RETURN NULL;
	END IF;`
	}
	return `
CREATE OR REPLACE FUNCTION ` + fn + `() RETURNS trigger AS $$
BEGIN` + skip + `
	IF TG_OP = 'DELETE' THEN
		PERFORM pg_notify('` + channel + `', OLD.` + column + `);
	ELSE
		PERFORM pg_notify('` + channel + `', NEW.` + column + `);
		IF TG_OP = 'UPDATE' AND OLD.` + column + ` IS DISTINCT FROM NEW.` + column + ` THEN
			PERFORM pg_notify('` + channel + `', OLD.` + column + `);
		END IF;
	END IF;
	RETURN NULL;
END $$ LANGUAGE plpgsql;`
}

// NotifyTrigger is the SQL (Postgres) that (re)creates trigger on table,
// calling fn (a NotifyFunction) after every insert, update and delete of a row.
func NotifyTrigger(trigger, table, fn string) string {
	return `
DROP TRIGGER IF EXISTS ` + trigger + ` ON ` + table + `;
CREATE TRIGGER ` + trigger + ` AFTER INSERT OR UPDATE OR DELETE ON ` + table + ` FOR EACH ROW
	EXECUTE FUNCTION ` + fn + `();`
}
