package db

import "testing"

// A read that raced an invalidation cannot store what it read; a bypassed
// cache neither serves nor stores; the bound holds.
func TestExactCacheRaceGuard(t *testing.T) {
	c := NewExactCache[string, string](10, nil, true)
	gen := c.Begin()
	c.InvalidateOwner("u1") // a write committed while the read was in flight
	c.Put(gen, "u1", "f1", "old")
	if _, ok := c.Get("u1", "f1"); ok {
		t.Fatal("a read older than an invalidation was stored")
	}
	c.Put(c.Begin(), "u1", "f1", "new")
	if v, ok := c.Get("u1", "f1"); !ok || v != "new" {
		t.Fatal("a fresh read was not stored")
	}
	c.Invalidate("keelson_x", "*")
	if _, ok := c.Get("u1", "f1"); ok {
		t.Fatal(`"*" left an entry`)
	}
	c.Reset(false)
	c.Put(c.Begin(), "u1", "f1", "x")
	if _, ok := c.Get("u1", "f1"); ok {
		t.Fatal("a bypassed cache served or stored")
	}
	c.Reset(true)
	for i := range 25 {
		c.Put(c.Begin(), string(rune('a'+i%7)), string(rune('a'+i)), "v")
		if c.Size() > 10 {
			t.Fatalf("%d entries, max 10", c.Size())
		}
	}
	if off := NewExactCache[string, string](-1, nil, true); off.Live() {
		t.Fatal("a disabled cache serves")
	}
}

// With a cost per value, the bound is in that cost, and a value bigger than
// the whole cache is not kept.
func TestExactCacheCost(t *testing.T) {
	c := NewExactCache[int, []byte](100, func(b []byte) int64 { return int64(len(b)) }, true)
	c.Put(c.Begin(), "a", 1, make([]byte, 60))
	c.Put(c.Begin(), "a", 1, make([]byte, 50)) // replaces: 50, not 110
	if c.Size() != 50 {
		t.Fatalf("size %d after a replace, want 50", c.Size())
	}
	c.Put(c.Begin(), "b", 1, make([]byte, 70)) // a is dropped to make room
	if _, ok := c.Get("a", 1); ok || c.Size() != 70 {
		t.Fatalf("size %d, a kept: %v", c.Size(), ok)
	}
	c.Put(c.Begin(), "c", 1, make([]byte, 101))
	if _, ok := c.Get("c", 1); ok {
		t.Fatal("a value bigger than the cache was kept")
	}
}
