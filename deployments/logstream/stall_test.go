package logstream_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/logstream"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/stretchr/testify/require"
)

// stallingStore is the real store whose first LogInsert waits for first
// and whose second stalls (as a database that stopped answering) until
// release is closed; stalled is closed when it starts stalling.
type stallingStore struct {
	logstream.Store
	inserts atomic.Int32
	first   chan struct{}
	stalled chan struct{}
	release chan struct{}
}

func (s *stallingStore) LogInsert(ctx context.Context, lines []logstream.Line) error {
	switch s.inserts.Add(1) {
	case 1:
		<-s.first
	case 2:
		close(s.stalled)
		<-s.release
	}
	return s.Store.LogInsert(ctx, lines)
}

// within fails the test unless fn returns within a liveness bound (not a
// speed figure: fn waits on nothing but the hub's own locks).
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not return within 5 s", what)
	}
}

// lines collects the seqs of sub's lines until it has want of them.
func lines(t *testing.T, sub *logstream.Subscription, want int) []int64 {
	t.Helper()
	var got []int64
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	for len(got) < want {
		select {
		case ev, ok := <-sub.C:
			require.True(t, ok, "subscription closed after %v (lagged: %v)", got, sub.Lagged())
			for _, ln := range ev.Lines {
				got = append(got, ln.Seq)
			}
		case <-timer.C:
			t.Fatalf("got %v within a minute, want %d lines", got, want)
		}
	}
	return got
}

// TestStalledStoreDuringFanOutBlocksNoSubscriber: while a fan-out to many
// subscribers runs, the writer stores a line queued meanwhile and the
// database stalls on it. Opening and closing streams (Subscribe, Close,
// Lagged), another deployment's build starting (Sink) and a notification
// of lines stored elsewhere (LinesStored) do not wait for the database; once
// it answers, every line arrives, in order.
func TestStalledStoreDuringFanOutBlocksNoSubscriber(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := &stallingStore{
		Store: deployments.NewStore(dbtest.SQLite(t, deployments.Migrations())),
		first: make(chan struct{}), stalled: make(chan struct{}), release: make(chan struct{}),
	}
	// One line per batch: the second is stored while the first's fan-out runs.
	hub := logstream.New(store, logstream.Config{BatchSize: 1, SubscriberBuffer: 16, AccountBudget: -1, EndCheckEvery: time.Hour})
	defer hub.Close()
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(store.release) }) }
	defer release() // also when the test fails: the writer must get to Close

	id := platform.NewID()
	// Enough that the pass is still writing when the writer takes the
	// second line (as TestPassTakesInLinesStoredMeanwhile).
	const subscribers, total = 20000, 5
	subs := make([]*logstream.Subscription, subscribers)
	for i := range subs {
		subs[i] = hub.Subscribe(id)
	}
	sink, err := hub.Sink(ctx, id)
	require.NoError(t, err)
	for i := range total {
		sink.Log(deployments.StreamBuild, fmt.Sprintf("line %d", i))
	}
	close(store.first) // the lines are queued: the first is stored and fanned out
	select {
	case <-store.stalled:
	case <-time.After(time.Minute):
		t.Fatal("the second line was never stored")
	}

	var late *logstream.Subscription
	within(t, "Subscribe", func() { late = hub.Subscribe(id) })
	defer late.Close()
	within(t, "Close", func() { subs[0].Close() })
	within(t, "Lagged", func() { subs[1].Lagged() })
	within(t, "Sink of another deployment", func() {
		_, err := hub.Sink(ctx, platform.NewID())
		require.NoError(t, err)
	})
	within(t, "LinesStored", func() { hub.LinesStored(id, 1) })

	release()
	require.NoError(t, hub.Flush(ctx))
	want := make([]int64, total)
	for i := range want {
		want[i] = int64(i) + 1
	}
	for i, sub := range subs[1:] {
		require.Equal(t, want, lines(t, sub, total), "subscriber %d: every line once, in order", i+1)
	}
	// It subscribed when the first line was published (a stream reads that
	// one from the table): every later line comes to it.
	require.Equal(t, want[1:], lines(t, late, total-1))
	within(t, "the end of the subscription closed during the fan-out", func() {
		for range subs[0].C { // what it got before, then closed
		}
	})
}
