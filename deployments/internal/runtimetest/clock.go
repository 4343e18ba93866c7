package runtimetest

import (
	"sync"
	"testing"
	"time"
)

// Clock is a fake clock for the supervisor: Now moves only on Advance, and
// After fires once Advance reached its time. Every After is announced, so a
// test learns that the supervisor waits, and for how long, without sleeping.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
	waits  chan time.Duration
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

// NewClock returns a Clock at a fixed time.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), waits: make(chan time.Duration, 64)}
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the time once the clock advanced by d.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.timers = append(c.timers, fakeTimer{at: c.now.Add(d), ch: ch})
	c.waits <- d
	return ch
}

// Advance moves the clock by d and fires the timers due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	c.timers = kept
}

// NextWait returns the duration of the next After call, waiting for it; the
// test fails if none comes within limit (a bound on a hang, not a timing).
func (c *Clock) NextWait(t testing.TB, limit time.Duration) time.Duration {
	t.Helper()
	select {
	case d := <-c.waits:
		return d
	case <-time.After(limit):
		t.Fatalf("the supervisor waited on no timer within %s", limit)
		return 0
	}
}
