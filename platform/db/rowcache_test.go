package db

import "testing"

// A row is found by its id alone, whatever owner it is stored under; an
// invalidation of that owner (a notification too) drops it, and a row moved
// to another owner is found under the new one. Several caches share one
// listener through Invalidators.
func TestRowCacheByID(t *testing.T) {
	c := NewRowCache[string](2, true)
	other := NewExactCache[string, string](10, nil, true)
	both := Invalidators{other, c}
	c.PutRow(c.Begin(), "project1", "d1", "LIVE")
	if v, ok := c.Row("d1"); !ok || v != "LIVE" {
		t.Fatalf("Row(d1) = %q, %v", v, ok)
	}
	both.Invalidate("keelson_x", "project2")
	if _, ok := c.Row("d1"); !ok {
		t.Fatal("another owner's notification dropped the row")
	}
	both.Invalidate("keelson_x", "project1")
	if _, ok := c.Row("d1"); ok {
		t.Fatal("the owner's notification left the row")
	}
	gen := c.Begin()
	c.InvalidateOwner("project1")
	c.PutRow(gen, "project1", "d1", "stale")
	if _, ok := c.Row("d1"); ok {
		t.Fatal("a read older than an invalidation was stored")
	}
	c.PutRow(c.Begin(), "owner2", "d1", "moved")
	if v, ok := c.Row("d1"); !ok || v != "moved" {
		t.Fatalf("Row(d1) after a move = %q, %v", v, ok)
	}
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"} {
		c.PutRow(c.Begin(), "o", id, id)
	}
	if n := len(c.ownerOf); n > 8 {
		t.Fatalf("index holds %d ids, want at most 4 x max", n)
	}
	both.Reset(false)
	if _, ok := c.Row("i"); ok {
		t.Fatal("a reset cache served")
	}
}
