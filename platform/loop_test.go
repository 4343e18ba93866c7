package platform_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// A loop runs at once when asked, on each kick, and never after Stop
// returns: its goroutine is gone with it.
func TestEveryRunsUntilStop(t *testing.T) {
	var runs atomic.Int32
	kick := make(chan struct{})
	ran := make(chan struct{}, 10)
	l := platform.Every(context.Background(), time.Hour, true, kick, func(ctx context.Context) {
		runs.Add(1)
		ran <- struct{}{}
	})
	platformtest.Receive(t, ran, time.Minute, "the run at start")
	kick <- struct{}{}
	platformtest.Receive(t, ran, time.Minute, "the kicked run")
	l.Stop()
	l.Stop() // twice is fine
	n := runs.Load()
	select {
	case kick <- struct{}{}:
		t.Fatal("a stopped loop still takes kicks")
	case <-time.After(50 * time.Millisecond):
	}
	assert.Equal(t, int32(2), n)
	assert.Equal(t, n, runs.Load(), "no run after Stop")
}

// A run under way sees its context end at Stop, and Stop waits for it.
func TestEveryStopCancelsTheRun(t *testing.T) {
	started := make(chan struct{})
	var finished atomic.Bool
	l := platform.Every(context.Background(), time.Hour, true, nil, func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		finished.Store(true)
	})
	platformtest.Receive(t, started, time.Minute, "the run to start")
	l.Stop()
	assert.True(t, finished.Load(), "Stop returned before the run did")
}

// A slot holds one loop at a time: a second Start neither calls its
// function nor replaces the loop, Stop ends the loop it holds (its run under
// way included) and empties the slot for a new Start.
func TestLoopSlotHoldsOneLoop(t *testing.T) {
	var slot platform.LoopSlot
	assert.False(t, slot.Stop(), "an empty slot has nothing to stop")
	stopped := make(chan struct{})
	first := func() *platform.Loop {
		return platform.Every(context.Background(), time.Hour, true, nil, func(ctx context.Context) {
			<-ctx.Done()
			close(stopped)
		})
	}
	assert.True(t, slot.Start(first))
	assert.False(t, slot.Start(func() *platform.Loop {
		t.Error("a second Start called its function while a loop is held")
		return nil
	}))
	assert.True(t, slot.Stop())
	select {
	case <-stopped:
	default:
		t.Fatal("Stop returned before the loop's run ended")
	}
	assert.False(t, slot.Stop(), "a second Stop")
	assert.True(t, slot.Start(func() *platform.Loop { return nil }), "an emptied slot takes a new loop")
}
