package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/fleet"
	"github.com/keelson-dev/keelson/deployments/internal/runtimetest"
	"github.com/keelson-dev/keelson/deployments/logstream"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
)

// fleet.Usage, which projects asks for GET /usage before the deployments
// service exists, answers what the deployments store answers.
func TestUsageAnswersAsTheStore(t *testing.T) {
	dbtest.Each(t, []db.MigrationSet{deployments.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		c := runtimetest.NewClock()
		owner, project := platform.NewID(), platform.NewID()
		month := c.Now().UTC().Format("2006-01")
		for _, r := range []struct {
			project, month string
			n              int
		}{{project, month, 3}, {platform.NewID(), month, 1}, {project, "1999-01", 7}} {
			_, err := bdb.ExecContext(ctx, "INSERT INTO deployment_usage (project_id, month, owner_id, count) VALUES (?, ?, ?, ?)",
				r.project, r.month, owner, r.n)
			require.NoError(t, err)
		}
		at := c.Now().Truncate(time.Microsecond)
		d := &deployments.Deployment{ID: platform.NewID(), ProjectID: project, OwnerID: owner, ProjectSlug: "s", Status: deployments.StatusLive,
			Steps: deployments.NewSteps(), WorkflowName: "w", Attempt: 1, LogBytes: 4096, CreatedAt: at, UpdatedAt: at}
		_, err := bdb.NewInsert().Model(d).Exec(ctx)
		require.NoError(t, err)

		u := fleet.Usage{DB: bdb, Clock: c}
		got, err := u.DeploymentsThisMonth(ctx, owner)
		require.NoError(t, err)
		want, err := deployments.NewStore(bdb).UsageByOwner(ctx, owner, month)
		require.NoError(t, err)
		require.Equal(t, want, got)
		require.Len(t, got, 2, "this month's projects only")

		used, budget, err := u.LogUsage(ctx, owner)
		require.NoError(t, err)
		require.Equal(t, int64(4096), used)
		require.Equal(t, int64(logstream.DefaultAccountLogBudget), budget)
		_, budget, err = fleet.Usage{DB: bdb, AccountBudget: -1}.LogUsage(ctx, owner)
		require.NoError(t, err)
		require.Zero(t, budget, "no budget")
	})
}
