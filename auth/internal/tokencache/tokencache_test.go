package tokencache

import (
	"fmt"
	"testing"
	"time"
)

func TestCacheHonoursTheTokensTimes(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	c := New[string](10)
	c.Put("tok", "claims", t0, t0.Add(time.Minute), t0)
	for _, tc := range []struct {
		at   time.Time
		want bool
	}{
		{t0.Add(-time.Second), false}, // before it was issued
		{t0, true},
		{t0.Add(59 * time.Second), true},
		{t0.Add(time.Minute), false}, // expired (as jwt: valid only before exp)
	} {
		if v, ok := c.Get("tok", tc.at); ok != tc.want || (ok && v != "claims") {
			t.Errorf("Get at %s = %q, %v; want %v", tc.at.Sub(t0), v, ok, tc.want)
		}
	}
	if _, ok := c.Get("other", t0); ok {
		t.Error("a token never stored was found")
	}
	c.Put("expired", "x", t0, t0, t0)
	if c.Len() != 1 {
		t.Errorf("an expired token was stored: %d kept", c.Len())
	}
}

func TestCacheIsBounded(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	c := New[int](100)
	for i := range 50 {
		c.Put(fmt.Sprint("short", i), i, t0, t0.Add(time.Second), t0)
	}
	for i := range 1000 {
		c.Put(fmt.Sprint("long", i), i, t0, t0.Add(time.Hour), t0.Add(2*time.Second))
		if c.Len() > 100 {
			t.Fatalf("%d kept, max 100", c.Len())
		}
	}
	if v, ok := c.Get("long999", t0.Add(3*time.Second)); !ok || v != 999 {
		t.Errorf("the newest token is not kept: %v %v", v, ok)
	}
	if _, ok := New[int](0).Get("x", t0); ok {
		t.Error("a cache of size 0 answered")
	}
}
