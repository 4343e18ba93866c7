package platform

import (
	"context"
	"sync"
	"time"
)

// Loop is background work run every interval until Stop: a module's
// periodic re-check, flush or reload. It owns one goroutine, which is gone
// when Stop returns.
type Loop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Every starts fn every interval (and whenever kick receives, if kick is not
// nil) until ctx ends or Stop. When now is true fn also runs once at start.
// fn gets a context that ends at Stop, so a run under way is cut short.
func Every(ctx context.Context, interval time.Duration, now bool, kick <-chan struct{}, fn func(context.Context)) *Loop {
	ctx, cancel := context.WithCancel(ctx)
	l := &Loop{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		if now {
			fn(ctx)
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-kick:
			}
			fn(ctx)
		}
	}()
	return l
}

// Stop ends the loop and waits for a run under way to return. A nil Loop,
// or one already stopped, is fine.
func (l *Loop) Stop() {
	if l == nil {
		return
	}
	l.cancel()
	<-l.done
}

// LoopSlot holds a module's background Loop from its Start to its Close: at
// most one at a time. The zero value is empty and ready to use.
type LoopSlot struct {
	mu   sync.Mutex
	loop *Loop
}

// Start keeps the Loop start returns, unless the slot holds one already:
// then start is not called and Start reports false.
func (s *LoopSlot) Start(start func() *Loop) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loop != nil {
		return false
	}
	s.loop = start()
	return true
}

// Stop empties the slot and ends the Loop it held, waiting for a run under
// way. It reports whether there was one; an empty slot is fine, and so is
// a second Stop.
func (s *LoopSlot) Stop() bool {
	s.mu.Lock()
	l := s.loop
	s.loop = nil
	s.mu.Unlock()
	l.Stop()
	return l != nil
}
