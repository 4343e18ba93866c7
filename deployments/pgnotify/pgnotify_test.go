package pgnotify

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

var _ Hub = (*deployments.Logs)(nil)

// TestListenAcrossPools: a worker's log hub and an API replica's log hub on
// two connection pools (two processes) over one Postgres database. Lines the
// worker stores reach the API's subscriber in order, without gap or repeat,
// and the deployment's end reaches it as Done after them.
func TestListenAcrossPools(t *testing.T) {
	url := dbtest.PostgresURL(t)
	ctx := context.Background()
	open := func() *deployments.Store {
		bdb, err := db.Open(ctx, db.Options{URL: url})
		require.NoError(t, err)
		t.Cleanup(func() { bdb.Close() })
		require.NoError(t, db.Migrate(ctx, bdb, deployments.Migrations(), Migrations()))
		return deployments.NewStore(bdb)
	}
	workerStore, apiStore := open(), open()
	worker := deployments.NewLogs(workerStore, deployments.LogsConfig{})
	t.Cleanup(worker.Close)
	api := deployments.NewLogs(apiStore, deployments.LogsConfig{})
	t.Cleanup(api.Close)

	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Listen(lctx, apiStoreDB(t, url), api, Config{ResyncEvery: time.Hour}) }()
	t.Cleanup(func() { cancel(); require.NoError(t, platformtest.Receive(t, done, time.Minute, "Listen to return")) })

	now := time.Now().UTC().Truncate(time.Microsecond)
	d := &deployments.Deployment{ID: platform.NewID(), ProjectID: platform.NewID(), OwnerID: platform.NewID(),
		ProjectSlug: "app", Status: deployments.StatusQueued, Steps: deployments.NewSteps(), Region: "local",
		WorkflowName: "deploy-x", Attempt: 1, CreatedAt: now, UpdatedAt: now}
	_, err := workerStore.DeploymentInsert(ctx, d, 0)
	require.NoError(t, err)

	sub := api.Subscribe(d.ID)
	defer sub.Close()
	sink, err := worker.Sink(ctx, d.ID)
	require.NoError(t, err)
	// LISTEN takes effect asynchronously: write until the first line arrives.
	var last int64
	platformtest.Eventually(t, 20*time.Second, "the first notified line reaches the subscriber", func() bool {
		sink.Log(deployments.StreamBuild, "warm-up")
		require.NoError(t, worker.Flush(ctx))
		select {
		case ev := <-sub.C:
			require.NotEmpty(t, ev.Lines)
			last = ev.Lines[len(ev.Lines)-1].Seq
			return true
		default:
			return false
		}
	})
	// From then on every line, in order, exactly once.
	for i := range 120 {
		sink.Log(deployments.StreamBuild, fmt.Sprintf("line %d", i))
		if i%7 == 0 {
			require.NoError(t, worker.Flush(ctx))
		}
	}
	require.NoError(t, worker.Flush(ctx))
	want, err := workerStore.LogMaxSeq(ctx, d.ID)
	require.NoError(t, err)
	var got []int64
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	for len(got) == 0 || got[len(got)-1] < want {
		select {
		case ev, ok := <-sub.C:
			require.True(t, ok, "subscription closed")
			require.False(t, ev.Done)
			for _, ln := range ev.Lines {
				got = append(got, ln.Seq)
			}
		case <-timer.C:
			t.Fatalf("lines up to %d did not arrive; got %v", want, got)
		}
	}
	for i, s := range got {
		require.Equal(t, last+int64(i)+1, s, "no gap, no repeat: %v", got)
	}

	// The worker ends the deployment: the status trigger tells the API.
	d.Status = deployments.StatusFailed
	ok, err := workerStore.DeploymentUpdate(ctx, d, []deployments.Status{deployments.StatusQueued}, "status")
	require.NoError(t, err)
	require.True(t, ok)
	select {
	case ev, ok := <-sub.C:
		require.True(t, ok)
		require.True(t, ev.Done, "Done after the lines")
		require.Empty(t, ev.Lines)
	case <-timer.C:
		t.Fatal("the end did not arrive")
	}
}

// apiStoreDB opens the listener's own pool (as the API replica's would be).
func apiStoreDB(t *testing.T, url string) *bun.DB {
	t.Helper()
	bdb, err := db.Open(context.Background(), db.Options{URL: url})
	require.NoError(t, err)
	t.Cleanup(func() { bdb.Close() })
	return bdb
}

func TestListenRefusesSQLite(t *testing.T) {
	bdb := dbtest.SQLite(t, deployments.Migrations(), Migrations())
	require.ErrorContains(t, Listen(context.Background(), bdb, nil, Config{}), "needs Postgres")
}

func TestParse(t *testing.T) {
	id, seq, end, err := parse("abc:42")
	require.NoError(t, err)
	require.Equal(t, "abc", id)
	require.Equal(t, int64(42), seq)
	require.False(t, end)
	id, _, end, err = parse("abc:end")
	require.NoError(t, err)
	require.Equal(t, "abc", id)
	require.True(t, end)
	for _, bad := range []string{"", "abc", ":1", "abc:x", "abc:0", "abc:-3"} {
		_, _, _, err := parse(bad)
		require.Error(t, err, bad)
	}
}
