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
	"github.com/keelson-dev/keelson/platform/platformtest"
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

// running stores a deployment of f's project that holds a build slot (with
// the share the workers read) and is BUILDING, as one another worker runs.
func (f *fixture) running(t *testing.T) *deployments.Deployment {
	t.Helper()
	ctx := context.Background()
	d := f.queue(t)
	ans, err := f.store.BuildSlotAcquire(ctx, deployments.SlotRequest{DeploymentID: d.ID, OwnerID: d.OwnerID,
		Share: f.activities().share(ctx, d.OwnerID), Lease: time.Hour, WaitLease: time.Hour}, testSlots)
	require.NoError(t, err)
	require.True(t, ans.Granted, "slot for %s", d.ID)
	d.Status = deployments.StatusBuilding
	ok, err := f.store.DeploymentUpdate(ctx, d, []deployments.Status{deployments.StatusQueued}, "status")
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
	d1, d2 := f.running(t), f.running(t)
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
	busy := f.running(t)
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
	require.Equal(t, []string{d.ID}, platformtest.Receive(t, held, time.Minute, "the held build's slots"), "held during BUILD")
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

// TestBuildSlotAcquireIsAtomic: sixteen deployments of four owners asking
// for a slot at once (as workers on several machines do) are given exactly
// the policy's slots: six in all, no owner past their share of three, the
// two FREE owners together at most three. On Postgres they really run at
// once, on pooled connections.
func TestBuildSlotAcquireIsAtomic(t *testing.T) {
	dbtest.Each(t, []db.MigrationSet{deployments.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		store := deployments.NewStore(bdb)
		policy := deployments.SlotPolicy{Slots: 6, FreeSlots: 3}
		var reqs []deployments.SlotRequest
		for o := range 4 {
			f := newFixture(t, store)
			share := deployments.Share{Max: 3, Free: o < 2}
			for range 4 {
				reqs = append(reqs, deployments.SlotRequest{DeploymentID: f.queue(t).ID, OwnerID: f.owner(t), Share: share,
					Lease: time.Hour, WaitLease: time.Hour})
			}
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		answered := map[string]bool{}
		errs := make(chan error, len(reqs))
		start := make(chan struct{})
		for _, req := range reqs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ans, err := store.BuildSlotAcquire(context.Background(), req, policy)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				answered[req.DeploymentID] = ans.Granted
				mu.Unlock()
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		var rows []deployments.BuildSlot
		require.NoError(t, bdb.NewSelect().Model(&rows).Scan(context.Background()))
		require.Len(t, rows, len(reqs), "every request is in the queue")
		held, free, per := 0, 0, map[string]int{}
		for _, r := range rows {
			if !r.Granted {
				require.False(t, answered[r.DeploymentID], "answered granted but waits: %s", r.DeploymentID)
				continue
			}
			held++
			per[r.OwnerID]++
			if r.Free {
				free++
			}
		}
		require.Equal(t, 6, held, "every slot given, none more")
		require.LessOrEqual(t, free, 3, "FREE owners hold at most their pool")
		for o, n := range per {
			require.LessOrEqual(t, n, 3, "owner %s past their share", o)
		}
	})
}

// TestBuildSlotQueueOrder: a freed slot goes to the waiting deployment of
// the owner with the fewest running, not to an older one of an owner
// running one already, and the answer says why the other waits; a FREE
// waiter does not take the slot kept for other plans.
func TestBuildSlotQueueOrder(t *testing.T) {
	dbtest.Each(t, []db.MigrationSet{deployments.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		store := deployments.NewStore(bdb)
		ctx := context.Background()
		policy := deployments.SlotPolicy{Slots: 2}
		alice, bob, carol := newFixture(t, store), newFixture(t, store), newFixture(t, store)
		ask := func(f *fixture, d *deployments.Deployment, sh deployments.Share) deployments.SlotAnswer {
			t.Helper()
			ans, err := store.BuildSlotAcquire(ctx, deployments.SlotRequest{DeploymentID: d.ID, OwnerID: d.OwnerID, Share: sh,
				Lease: time.Hour, WaitLease: time.Hour}, policy)
			require.NoError(t, err)
			return ans
		}
		paid, free := deployments.Share{Max: 2}, deployments.Share{Max: 2, Free: true}
		a1, a2, a3 := alice.queue(t), alice.queue(t), alice.queue(t)
		require.True(t, ask(alice, a1, paid).Granted)
		require.True(t, ask(alice, a2, paid).Granted)
		require.Equal(t, deployments.Wait{Reason: deployments.WaitShare, Running: 2}, ask(alice, a3, paid).Wait)
		b1 := bob.queue(t)
		require.Equal(t, deployments.Wait{Reason: deployments.WaitSlot, Position: 1}, ask(bob, b1, paid).Wait)
		require.NoError(t, store.BuildSlotRelease(ctx, a1.ID, policy, time.Hour))
		require.Equal(t, []string{a2.ID, b1.ID}, heldSlots(t, bdb), "the release gave bob's waiting deployment the slot")
		require.True(t, ask(bob, b1, paid).Granted, "bob's next try finds it")
		require.Equal(t, deployments.Wait{Reason: deployments.WaitSlot, Position: 1}, ask(alice, a3, paid).Wait)

		// One slot of two is kept from FREE builds.
		require.NoError(t, store.BuildSlotRelease(ctx, a2.ID, policy, time.Hour))
		require.NoError(t, store.BuildSlotRelease(ctx, b1.ID, policy, time.Hour))
		require.Equal(t, []string{a3.ID}, heldSlots(t, bdb))
		require.NoError(t, store.BuildSlotRelease(ctx, a3.ID, policy, time.Hour))
		c1, c2 := carol.queue(t), carol.queue(t)
		require.True(t, ask(carol, c1, free).Granted)
		require.Equal(t, deployments.Wait{Reason: deployments.WaitFree, Running: 1}, ask(carol, c2, free).Wait)
		require.Equal(t, []string{c1.ID}, heldSlots(t, bdb))
	})
}

// heldSlots lists the deployments holding a slot (not waiting), sorted.
func heldSlots(t *testing.T, bdb bun.IDB) []string {
	t.Helper()
	var ids []string
	require.NoError(t, bdb.NewSelect().Model((*deployments.BuildSlot)(nil)).Column("deployment_id").Where("granted = ?", true).
		Order("deployment_id").Scan(context.Background(), &ids))
	return ids
}
