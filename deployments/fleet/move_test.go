package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/deployments/hosts"
	"github.com/keelson-dev/keelson/deployments/internal/runtimetest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// A down host's app whose move FAILED (its registry was away) is moved
// again by the hosts register's next passes, through MoveDue: 5 s after the
// first failure, then 10, 20, 40 s; after 5 failed moves no more. A move
// that succeeds (the LIVE deployment left the host) is not tried again,
// nor one under way.
func TestFailedMoveIsRetriedWithBackoff(t *testing.T) {
	dbtest.Each(t, []db.MigrationSet{deployments.Migrations(), hosts.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		c := runtimetest.NewClock()
		insert := func(project string, status deployments.Status, host, reason string) *deployments.Deployment {
			at := c.Now().Truncate(time.Microsecond)
			d := &deployments.Deployment{ID: platform.NewID(), ProjectID: project, OwnerID: platform.NewID(), ProjectSlug: "s-" + project[:8],
				Status: status, Steps: deployments.NewSteps(), Host: host, Reason: reason, WorkflowName: "w", Attempt: 1, CreatedAt: at, UpdatedAt: at}
			_, err := bdb.NewInsert().Model(d).Exec(ctx)
			require.NoError(t, err)
			return d
		}
		project := platform.NewID()
		live := insert(project, deployments.StatusLive, "q/b", "")
		b, err := hosts.New(hosts.Deps{DB: bdb, Clock: c, HeartbeatEvery: time.Hour, Local: &hosts.Local{
			Host: hosts.Host{ID: "b", Queue: "q/b"}, CountApps: func(context.Context) (int, error) { return 1, nil }}})
		require.NoError(t, err)
		require.NoError(t, b.Start(ctx))
		t.Cleanup(func() { _ = b.Close(ctx) })

		moves := 0
		outcome := deployments.StatusFailed
		watcher, err := hosts.New(hosts.Deps{DB: bdb, Clock: c,
			HostDown: func(_ context.Context, h *hosts.Host) error {
				moves++
				insert(project, outcome, "q/a", "host b is down: moving deployment "+live.ID)
				return nil
			},
			MoveDue: func(ctx context.Context, h *hosts.Host, now time.Time) (bool, string, error) {
				return fleet.Queries{DB: bdb}.MoveDue(ctx, h.Queue, h.HeartbeatAt, now, fleet.MoveRetry{})
			}})
		require.NoError(t, err)
		pass := func(d time.Duration) int {
			c.Advance(d)
			require.NoError(t, watcher.HandleDown(ctx))
			return moves
		}
		assert.Equal(t, 1, pass(time.Minute), "down: moved once")
		assert.Equal(t, 1, pass(4*time.Second), "4 s after the failure: not yet")
		assert.Equal(t, 2, pass(time.Second), "5 s: again")
		assert.Equal(t, 2, pass(9*time.Second))
		assert.Equal(t, 3, pass(time.Second), "10 s after the second")
		assert.Equal(t, 4, pass(20*time.Second))
		assert.Equal(t, 5, pass(40*time.Second))
		assert.Equal(t, 5, pass(time.Hour), "5 failed moves: no more")

		// Another outage of the same host: tried again, and a move that
		// works is not repeated.
		require.NoError(t, b.Heartbeat(ctx))
		outcome = deployments.StatusBuilding
		assert.Equal(t, 6, pass(time.Minute))
		assert.Equal(t, 6, pass(time.Hour), "under way: not moved again")
		_, err = bdb.NewUpdate().Model((*deployments.Deployment)(nil)).Set("status = ?", deployments.StatusCancelled).
			Where("id = ?", live.ID).Exec(ctx)
		require.NoError(t, err)
		_, err = bdb.NewUpdate().Model((*deployments.Deployment)(nil)).Set("status = ?", deployments.StatusFailed).
			Where("status = ?", deployments.StatusBuilding).Exec(ctx)
		require.NoError(t, err)
		assert.Equal(t, 6, pass(time.Hour), "no LIVE deployment left on the host")
	})
}
