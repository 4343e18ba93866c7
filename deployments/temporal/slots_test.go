package temporal

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"go.temporal.io/sdk/temporal"
)

// planShares answers the shares of the owners it knows and fails for the
// others (whose deployments then get the workers' PerUser default).
type planShares map[string]int

func (p planShares) BuildShare(_ context.Context, owner string) (deployments.Share, error) {
	n, ok := p[owner]
	if !ok {
		return deployments.Share{}, errors.New("plans: account not found")
	}
	return deployments.Share{Max: n}, nil
}

// slotsOf lists the build slots held, by deployment.
func slotsOf(t *testing.T, bdb bun.IDB) []string {
	t.Helper()
	var ids []string
	require.NoError(t, bdb.NewSelect().Model((*deployments.BuildSlot)(nil)).Column("deployment_id").
		Order("deployment_id").Scan(context.Background(), &ids))
	return ids
}

// running stores a deployment of f's project that holds a build slot and is
// BUILDING, as one another worker runs.
func (f *fixture) running(t *testing.T, share int) *deployments.Deployment {
	t.Helper()
	ctx := context.Background()
	d := f.queue(t)
	ok, _, err := f.store.BuildSlotAcquire(ctx, d.ID, d.OwnerID, share, time.Hour)
	require.NoError(t, err)
	require.True(t, ok, "slot for %s", d.ID)
	d.Status = deployments.StatusBuilding
	ok, err = f.store.DeploymentUpdate(ctx, d, []deployments.Status{deployments.StatusQueued}, "status")
	require.NoError(t, err)
	require.True(t, ok)
	return d
}

// TestWorkflowWaitsForOwnerShare: an owner whose plan cannot be read gets the
// default share of 2. With two of their deployments running, a third stays
// QUEUED and says so once in its log, while another owner's deployment runs
// to LIVE; when one of the two ends, the third goes LIVE and gives its slot
// back.
func TestWorkflowWaitsForOwnerShare(t *testing.T) {
	bdb := dbtest.SQLite(t, deployments.Migrations())
	f := newFixture(t, deployments.NewStore(bdb))
	other := newFixture(t, f.store)
	f.shares = planShares{other.owner(t): 1} // f's owner: no plan, the default
	other.shares = f.shares
	ctx := context.Background()
	d1, d2 := f.running(t, 2), f.running(t, 2)
	d3 := f.queue(t)

	// Another owner is not held up by the first one's share.
	o := other.queue(t)
	env := other.testEnv(t)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalRelease, nil) }, time.Hour)
	env.ExecuteWorkflow(WorkflowType, Input{DeploymentID: o.ID, Timeouts: testTimeouts})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, deployments.StatusLive, other.get(t, o.ID).Status)
	require.NotContains(t, other.logText(t, o.ID), "queued:")

	env = f.testEnv(t)
	var waiting State
	var waitLog string
	env.RegisterDelayedCallback(func() {
		// A minute of workflow time later (many tries): still waiting.
		v, err := env.QueryWorkflow(QueryState)
		require.NoError(t, err)
		require.NoError(t, v.Get(&waiting))
		waitLog = f.logText(t, d3.ID)
		require.Equal(t, deployments.StatusQueued, f.get(t, d3.ID).Status)
		require.NotContains(t, f.rt.Builds(), d3.ID)
		// One of the two running deployments ends.
		require.NoError(t, f.acts.Finish(ctx, d1.ID, errors.New("build command failed")))
	}, time.Minute)
	var live State
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QueryState)
		require.NoError(t, err)
		require.NoError(t, v.Get(&live))
		env.SignalWorkflow(SignalRelease, nil)
	}, time.Hour)
	env.ExecuteWorkflow(WorkflowType, Input{DeploymentID: d3.ID, Timeouts: testTimeouts})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	require.Equal(t, deployments.StatusQueued, waiting.Status)
	require.Equal(t, 1, strings.Count(waitLog, "queued: 2 of your deployments are running, as many as your plan runs at once; this one starts when one of them ends"),
		"the wait is said once:\n%s", waitLog)
	require.Equal(t, deployments.StatusLive, live.Status)
	got := f.get(t, d3.ID)
	require.Equal(t, deployments.StatusLive, got.Status)
	require.Equal(t, 1, strings.Count(f.logText(t, d3.ID), "queued: 2 of your"), "said once, also after it ran")
	require.Equal(t, []string{d2.ID}, slotsOf(t, bdb), "d1 ended (its slot is free), d3 gave its slot back once LIVE")
}

// TestWorkflowCancelledWhileWaitingForShare: a deployment cancelled while it
// waits for its owner's share ends CANCELLED, built nothing and holds no slot.
func TestWorkflowCancelledWhileWaitingForShare(t *testing.T) {
	bdb := dbtest.SQLite(t, deployments.Migrations())
	f := newFixture(t, deployments.NewStore(bdb))
	f.shares = planShares{f.owner(t): 1}
	busy := f.running(t, 1)
	d := f.queue(t)
	env := f.testEnv(t)
	env.RegisterDelayedCallback(env.CancelWorkflow, 30*time.Second)
	env.ExecuteWorkflow(WorkflowType, Input{DeploymentID: d.ID, Timeouts: testTimeouts})

	require.True(t, env.IsWorkflowCompleted())
	require.True(t, temporal.IsCanceledError(env.GetWorkflowError()), "got %v", env.GetWorkflowError())
	got := f.get(t, d.ID)
	require.Equal(t, deployments.StatusCancelled, got.Status)
	require.Equal(t, "cancelled before it started", got.ErrorMessage)
	require.Empty(t, f.rt.Builds())
	require.Contains(t, f.logText(t, d.ID), "queued: 1 of your deployments are running")
	require.Equal(t, []string{busy.ID}, slotsOf(t, bdb))
}

// TestWorkflowReleasesSlotWhenBuildFails: a failed deployment gives its slot back.
func TestWorkflowReleasesSlotWhenBuildFails(t *testing.T) {
	bdb := dbtest.SQLite(t, deployments.Migrations())
	f := newFixture(t, deployments.NewStore(bdb))
	d := f.queue(t)
	f.rt.FailBuild(f.slug, errors.New("build command failed: exit status 1"))
	// The build (which then fails) sees the deployment holding its slot.
	hold := f.rt.HoldBuild(f.slug)
	held := make(chan []string, 1)
	go func() {
		<-hold.Entered()
		var ids []string
		_ = bdb.NewSelect().Model((*deployments.BuildSlot)(nil)).Column("deployment_id").Scan(context.Background(), &ids)
		held <- ids
		hold.Release(nil)
	}()
	env := f.testEnv(t)
	env.ExecuteWorkflow(WorkflowType, Input{DeploymentID: d.ID, Timeouts: testTimeouts})
	require.True(t, env.IsWorkflowCompleted())
	require.Error(t, env.GetWorkflowError())
	require.Equal(t, []string{d.ID}, <-held, "held during BUILD")
	require.Equal(t, deployments.StatusFailed, f.get(t, d.ID).Status)
	require.Empty(t, slotsOf(t, bdb), "released once FAILED")
}

// owner is the owner of f's project.
func (f *fixture) owner(t *testing.T) string {
	t.Helper()
	spec, err := f.projects.ProjectForDeploy(context.Background(), f.project)
	require.NoError(t, err)
	return spec.OwnerID
}

// TestBuildSlotAcquireIsAtomic: many deployments of one owner asking for a
// slot at once (as workers on several machines do) get no more than the
// owner's share; on Postgres they really run at once, on pooled connections.
func TestBuildSlotAcquireIsAtomic(t *testing.T) {
	dbtest.Each(t, []db.MigrationSet{deployments.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		f := newFixture(t, deployments.NewStore(bdb))
		const n, share = 16, 3
		ids := make([]string, n)
		for i := range ids {
			ids[i] = f.queue(t).ID
		}
		owner := f.owner(t)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var granted []string
		errs := make(chan error, n)
		start := make(chan struct{})
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ok, _, err := f.store.BuildSlotAcquire(context.Background(), id, owner, share, time.Hour)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					mu.Lock()
					granted = append(granted, id)
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, granted, share)
		require.ElementsMatch(t, granted, slotsOf(t, bdb))
	})
}
