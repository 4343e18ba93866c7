package platform

import (
	"context"
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
