package deployments_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
)

// receive returns the subscription's next event (failing if none comes in a minute).
func receive(t *testing.T, sub *deployments.Subscription) deployments.LogEvent {
	t.Helper()
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	select {
	case ev, ok := <-sub.C:
		require.True(t, ok, "the subscription was closed (lagged: %v)", sub.Lagged())
		return ev
	case <-timer.C:
		t.Fatal("no event within a minute")
		return deployments.LogEvent{}
	}
}

// receiveUntil collects the seqs and messages of lines until the last seq is want.
func receiveUntil(t *testing.T, sub *deployments.Subscription, want int64) ([]int64, []string) {
	t.Helper()
	var got []int64
	var msgs []string
	for len(got) == 0 || got[len(got)-1] < want {
		ev := receive(t, sub)
		require.False(t, ev.Done, "done before line %d (got %v)", want, got)
		for _, ln := range ev.Lines {
			got = append(got, ln.Seq)
			msgs = append(msgs, ln.Message)
		}
	}
	return got, msgs
}

// TestLogsAcrossHubs: two log hubs over one database, as an API replica and a
// worker on two machines. Lines the other hub stored reach this hub's
// subscribers through LinesStored, in order, with no gap and no repeat; the
// sinks' numbering never collides although both write the same deployment.
func TestLogsAcrossHubs(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		store := deployments.NewStore(bdb)
		worker := deployments.NewLogs(store, deployments.LogsConfig{BatchSize: 7})
		defer worker.Close()
		api := deployments.NewLogs(store, deployments.LogsConfig{BatchSize: 7})
		defer api.Close()
		id := platform.NewID()

		// Both sinks exist before any line is stored: both would number from 1.
		ws, err := worker.Sink(ctx, id)
		require.NoError(t, err)
		as, err := api.Sink(ctx, id)
		require.NoError(t, err)
		sub := api.Subscribe(id)
		defer sub.Close()

		for i := range 20 {
			ws.Log(deployments.StreamBuild, fmt.Sprintf("worker %d", i))
		}
		require.NoError(t, worker.Flush(ctx))
		api.LinesStored(id, 20)
		// Nothing was published here before: the hub starts with the newest
		// line (a stream fills what lies before from the table, as it does
		// for any gap); from then on it publishes every line.
		got, msgs := receiveUntil(t, sub, 20)
		assert.Equal(t, []int64{20}, got)
		assert.Equal(t, []string{"worker 19"}, msgs)

		// The API's own line collides with the worker's numbering and is
		// numbered after it.
		as.Log(deployments.StreamSystem, "api 0")
		require.NoError(t, api.Flush(ctx))
		got, msgs = receiveUntil(t, sub, 21)
		assert.Equal(t, []int64{21}, got)
		assert.Equal(t, []string{"api 0"}, msgs)

		// The worker writes on (colliding with the API's line 21); no
		// notification arrives. The API's next line finds the gap and
		// publishes the worker's lines first.
		for i := 20; i < 30; i++ {
			ws.Log(deployments.StreamBuild, fmt.Sprintf("worker %d", i))
		}
		require.NoError(t, worker.Flush(ctx))
		as.Log(deployments.StreamSystem, "api 1")
		require.NoError(t, api.Flush(ctx))
		got, msgs = receiveUntil(t, sub, 32)
		assert.Equal(t, seqs(22, 32), got)
		assert.Equal(t, "worker 20", msgs[0])
		assert.Equal(t, "api 1", msgs[len(msgs)-1])

		// A late or repeated notification publishes nothing twice.
		api.LinesStored(id, 5)
		api.LinesStored(id, 32)
		ws.Log(deployments.StreamBuild, "worker last")
		require.NoError(t, worker.Flush(ctx))
		api.LinesStored(id, 33)
		got, msgs = receiveUntil(t, sub, 33)
		assert.Equal(t, []int64{33}, got)
		assert.Equal(t, []string{"worker last"}, msgs)

		// The end reported by another process: Done follows the lines.
		api.DeploymentEnded(id)
		ev := receive(t, sub)
		assert.True(t, ev.Done)
		assert.Empty(t, ev.Lines)

		stored, err := store.LogList(ctx, deployments.LogListParams{DeploymentID: id, Limit: 1000})
		require.NoError(t, err)
		require.Len(t, stored, 33, "every line stored once")
		for i, ln := range stored {
			assert.Equal(t, int64(i+1), ln.Seq)
		}
	})
}

// TestLogsConcurrentWritersOneDeployment: two hubs writing the same
// deployment at once lose no line and keep each writer's order.
func TestLogsConcurrentWritersOneDeployment(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		store := deployments.NewStore(bdb)
		id := platform.NewID()
		hubs := []*deployments.Logs{
			deployments.NewLogs(store, deployments.LogsConfig{BatchSize: 10}),
			deployments.NewLogs(store, deployments.LogsConfig{BatchSize: 10}),
		}
		const n = 300
		var wg sync.WaitGroup
		for h, hub := range hubs {
			defer hub.Close()
			sink, err := hub.Sink(ctx, id)
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range n {
					sink.Log(deployments.StreamBuild, fmt.Sprintf("%d %04d", h, i))
					if i%25 == 0 {
						_ = hub.Flush(ctx)
					}
				}
				_ = hub.Flush(ctx)
			}()
		}
		wg.Wait()
		stored, err := store.LogList(ctx, deployments.LogListParams{DeploymentID: id, Limit: 10 * n})
		require.NoError(t, err)
		require.Equal(t, 2*n, len(stored), "no line lost")
		next := map[byte]int{}
		for i, ln := range stored {
			require.Equal(t, int64(i+1), ln.Seq)
			h := ln.Message[0]
			require.Equal(t, fmt.Sprintf("%c %04d", h, next[h]), ln.Message, "writer %c out of order", h)
			next[h]++
		}
	})
}

// TestLogsResyncPublishesWhatWasMissed: a notification lost (e.g. while the
// listener reconnected) is made up by Resync: the subscriber gets the newest
// stored line and, once it has published, everything after it.
func TestLogsResyncPublishesWhatWasMissed(t *testing.T) {
	t.Parallel()
	bdb := dbtest.SQLite(t, sets...)
	ctx := context.Background()
	store := deployments.NewStore(bdb)
	worker := deployments.NewLogs(store, deployments.LogsConfig{})
	defer worker.Close()
	api := deployments.NewLogs(store, deployments.LogsConfig{})
	defer api.Close()
	id := platform.NewID()
	sub := api.Subscribe(id)
	defer sub.Close()
	ws, err := worker.Sink(ctx, id)
	require.NoError(t, err)
	for i := range 5 {
		ws.Log(deployments.StreamBuild, fmt.Sprintf("line %d", i))
	}
	require.NoError(t, worker.Flush(ctx))
	api.Resync() // no notification came
	ev := receive(t, sub)
	require.NotEmpty(t, ev.Lines)
	assert.Equal(t, int64(5), ev.Lines[len(ev.Lines)-1].Seq, "up to the newest line")

	for i := 5; i < 9; i++ {
		ws.Log(deployments.StreamBuild, fmt.Sprintf("line %d", i))
	}
	require.NoError(t, worker.Flush(ctx))
	api.Resync()
	got, msgs := receiveUntil(t, sub, 9)
	assert.Equal(t, seqs(6, 9), got)
	assert.Equal(t, "line 5", msgs[0])

	// Without subscribers nothing is read or queued.
	sub.Close()
	api.LinesStored(id, 100)
	api.Resync()
	require.NoError(t, api.Flush(ctx))
}
