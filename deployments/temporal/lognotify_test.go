package temporal

import (
	"context"
	"sync"
	"testing"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/internal/deploytest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/stretchr/testify/require"
)

// recordingHub records what ListenLogs hands over.
type recordingHub struct {
	mu  sync.Mutex
	max map[string]int64
}

func (h *recordingHub) LinesStored(id string, seq int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if seq > h.max[id] {
		h.max[id] = seq
	}
}

func (h *recordingHub) seq(id string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.max[id]
}

// TestListenLogsAcrossConnections: lines stored through one pool (another
// replica's log hub) wake the listener of another pool with (id, highest seq).
func TestListenLogsAcrossConnections(t *testing.T) {
	url := dbtest.PostgresURL(t)
	ctx := context.Background()
	writerDB, err := db.Open(ctx, db.Options{URL: url})
	require.NoError(t, err)
	t.Cleanup(func() { writerDB.Close() })
	require.NoError(t, db.Migrate(ctx, writerDB, deployments.Migrations(), LogNotifyMigrations()))
	readerDB, err := db.Open(ctx, db.Options{URL: url})
	require.NoError(t, err)
	t.Cleanup(func() { readerDB.Close() })

	hub := &recordingHub{max: map[string]int64{}}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ListenLogs(lctx, readerDB, hub, nil) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	// The writer side: the deployments log hub of "replica A".
	store := deployments.NewStore(writerDB)
	logs := deployments.NewLogs(store, deployments.LogsConfig{})
	t.Cleanup(logs.Close)
	a, b := platform.NewID(), platform.NewID()
	// LISTEN is asynchronous: keep writing until the listener has seen a line.
	sa, err := logs.Sink(ctx, a)
	require.NoError(t, err)
	deploytest.Eventually(t, "the listener receives notifications", func() bool {
		sa.Log(deployments.StreamBuild, "warm-up")
		require.NoError(t, logs.Flush(ctx))
		return hub.seq(a) > 0
	})
	sb, err := logs.Sink(ctx, b)
	require.NoError(t, err)
	for i := 0; i < 50; i++ {
		sb.Log(deployments.StreamBuild, "line")
	}
	require.NoError(t, logs.Flush(ctx))
	deploytest.Eventually(t, "the highest seq of b arrives", func() bool { return hub.seq(b) == 50 })
	aMax, err := store.LogMaxSeq(ctx, a)
	require.NoError(t, err)
	deploytest.Eventually(t, "the highest seq of a arrives", func() bool { return hub.seq(a) == aMax })
}

func TestParseLogNotification(t *testing.T) {
	id, seq, err := parseLogNotification("abc:42")
	require.NoError(t, err)
	require.Equal(t, "abc", id)
	require.Equal(t, int64(42), seq)
	for _, bad := range []string{"", "abc", ":1", "abc:x"} {
		_, _, err := parseLogNotification(bad)
		require.Error(t, err, bad)
	}
}
