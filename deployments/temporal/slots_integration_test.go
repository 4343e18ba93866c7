package temporal

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/internal/deploytest"
	"github.com/keelson-dev/keelson/deployments/temporal/temporaltest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
)

// countingRuntime is the scripted runtime that also counts the builds
// running at once and the most it has seen: per owner, in all ("*") and of
// the owners marked free ("free").
type countingRuntime struct {
	*deploytest.Runtime
	owners   map[string]string // project slug -> owner
	free     map[string]bool   // owners on a FREE plan
	mu       sync.Mutex
	now, top map[string]int
}

func newCountingRuntime() *countingRuntime {
	return &countingRuntime{Runtime: deploytest.NewRuntime(), owners: map[string]string{}, free: map[string]bool{},
		now: map[string]int{}, top: map[string]int{}}
}

func (r *countingRuntime) Build(ctx context.Context, job deployments.Job, logs deployments.LogSink) (string, error) {
	keys := []string{r.owners[job.ProjectSlug], "*"}
	if r.free[keys[0]] {
		keys = append(keys, "free")
	}
	r.mu.Lock()
	for _, k := range keys {
		r.now[k]++
		r.top[k] = max(r.top[k], r.now[k])
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		for _, k := range keys {
			r.now[k]--
		}
		r.mu.Unlock()
	}()
	return r.Runtime.Build(ctx, job, logs)
}

// most is the most builds of owner seen running at once.
func (r *countingRuntime) most(owner string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.top[owner]
}

// project adds a project of owner with a held next build.
func (r *countingRuntime) project(projects *deploytest.Projects, owner string) (id string, hold *deploytest.Hold) {
	id = platform.NewID()
	slug := "share-" + id[len(id)-8:] // the random end (the start is the time)
	r.owners[slug] = owner
	id = projects.Add(deployments.DeploySpec{OwnerID: owner, Slug: slug, RepoURL: "https://example.test/app.git",
		Framework: "go", Region: "local"})
	return id, r.HoldBuild(slug)
}

func entered(h *deploytest.Hold) bool {
	select {
	case <-h.Entered():
		return true
	default:
		return false
	}
}

// TestTemporalOwnerShareAcrossWorkers: an owner whose plan allows one
// deployment at once never has two building, on two workers, while another
// owner's deployment builds beside theirs; the one waiting stays QUEUED, says
// so once, and builds as soon as the running one is cancelled. On SQLite and
// Postgres; scripted runtime (the orchestration is under test).
func TestTemporalOwnerShareAcrossWorkers(t *testing.T) {
	srv := temporaltest.StartDevServer(t)
	dbtest.Each(t, []db.MigrationSet{deployments.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		owner, other := platform.NewID(), platform.NewID()
		projects := deploytest.NewProjects()
		rt := newCountingRuntime()
		p1, h1 := rt.project(projects, owner)
		p2, h2 := rt.project(projects, owner)
		p3, h3 := rt.project(projects, other)
		c := newCluster(t, srv, bdb, projects)
		c.shares = planShares{owner: 1} // other: no plan, the default 2
		c.startWorker(t, rt)
		c.startWorker(t, rt)

		d1, err := c.svc.Trigger(ctx, deployments.TriggerParams{ProjectID: p1, OwnerID: owner})
		require.NoError(t, err)
		d2, err := c.svc.Trigger(ctx, deployments.TriggerParams{ProjectID: p2, OwnerID: owner})
		require.NoError(t, err)
		d3, err := c.svc.Trigger(ctx, deployments.TriggerParams{ProjectID: p3, OwnerID: other})
		require.NoError(t, err)

		// One of the owner's two builds; the other owner's builds beside it.
		var first, next *deployments.Deployment
		var nextHold *deploytest.Hold
		select {
		case <-h1.Entered():
			first, next, nextHold = d1, d2, h2
		case <-h2.Entered():
			first, next, nextHold = d2, d1, h1
		case <-time.After(time.Minute):
			t.Fatalf("no build of the owner started:\n%s\n%s", c.logText(t, d1.ID), c.logText(t, d2.ID))
		}
		select {
		case <-h3.Entered():
		case <-time.After(time.Minute):
			t.Fatalf("the other owner's build did not start:\n%s", c.logText(t, d3.ID))
		}
		note := "queued: 1 of your deployments are running, as many as your plan runs at once; this one starts when one of them ends"
		platformtest.Eventually(t, time.Minute, "the second deployment says it waits", func() bool {
			return strings.Contains(c.logText(t, next.ID), note)
		})
		// Several tries later it still waits.
		platformtest.Eventually(t, time.Minute, "the waiting deployment tried again", func() bool {
			return c.acquireTries(t, next) >= 3
		})
		st, err := c.svc.Status(ctx, owner, next.ID)
		require.NoError(t, err)
		require.Equal(t, deployments.StatusQueued, st.Status)
		require.False(t, entered(nextHold), "the owner's second build waits for the first")

		// Cancelling the running one frees its slot: the waiting one builds.
		got, err := c.svc.Cancel(ctx, owner, first.ID)
		require.NoError(t, err)
		require.Equal(t, deployments.StatusCancelled, got.Status)
		select {
		case <-nextHold.Entered():
		case <-time.After(time.Minute):
			t.Fatalf("the waiting deployment did not build after the cancel:\n%s", c.logText(t, next.ID))
		}
		nextHold.Release(nil)
		h3.Release(nil)
		c.waitStatus(t, owner, next.ID, deployments.StatusLive)
		c.waitStatus(t, other, d3.ID, deployments.StatusLive)

		require.Equal(t, 1, rt.most(owner), "the owner never had two builds at once")
		require.Equal(t, 1, strings.Count(c.logText(t, next.ID), note), "the wait is said once")
		require.NotContains(t, c.logText(t, d3.ID), "queued:")
		platformtest.Eventually(t, 20*time.Second, "every slot given back (cancelled, LIVE)", func() bool {
			return len(slotsOf(t, bdb)) == 0
		})
	})
}

// tierShares answers each owner's share as listed.
type tierShares map[string]deployments.Share

func (s tierShares) BuildShare(_ context.Context, owner string) (deployments.Share, error) {
	return s[owner], nil
}

// TestTemporalFairSlotsAcrossWorkers: the fair-share rules hold across two
// workers sharing the database (3 slots, 2 for FREE owners). Alice and bob
// are FREE, carol is not; all may run two at once. Alice's two builds take
// the FREE pool: her third waits for her share, bob's first for the pool,
// and carol's builds on the last slot. When carol's goes LIVE, its slot is
// not given to a FREE build: carol's second takes it. When one of alice's
// goes LIVE, bob's waiting build takes its slot before alice's older third.
// On SQLite and Postgres; scripted runtime.
func TestTemporalFairSlotsAcrossWorkers(t *testing.T) {
	srv := temporaltest.StartDevServer(t)
	dbtest.Each(t, []db.MigrationSet{deployments.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		ctx := context.Background()
		alice, bob, carol := platform.NewID(), platform.NewID(), platform.NewID()
		projects := deploytest.NewProjects()
		rt := newCountingRuntime()
		rt.free[alice], rt.free[bob] = true, true
		c := newCluster(t, srv, bdb, projects)
		c.shares = tierShares{alice: {Max: 2, Free: true}, bob: {Max: 2, Free: true}, carol: {Max: 2}}
		c.slots = deployments.SlotPolicy{Slots: 3, FreeSlots: 2}
		c.startWorker(t, rt)
		c.startWorker(t, rt)
		deploy := func(owner string) (*deployments.Deployment, *deploytest.Hold) {
			p, h := rt.project(projects, owner)
			d, err := c.svc.Trigger(ctx, deployments.TriggerParams{ProjectID: p, OwnerID: owner})
			require.NoError(t, err)
			return d, h
		}
		wait := func(what string, d *deployments.Deployment, h *deploytest.Hold) {
			t.Helper()
			select {
			case <-h.Entered():
			case <-time.After(time.Minute):
				t.Fatalf("%s did not start:\n%s", what, c.logText(t, d.ID))
			}
		}
		says := func(d *deployments.Deployment, note string) {
			t.Helper()
			platformtest.Eventually(t, time.Minute, "deployment "+d.ID+" to say "+note, func() bool {
				return strings.Contains(c.logText(t, d.ID), note)
			})
		}
		a1, ha1 := deploy(alice)
		wait("alice's first build", a1, ha1)
		a2, ha2 := deploy(alice)
		wait("alice's second build", a2, ha2)
		a3, ha3 := deploy(alice)
		says(a3, "queued: 2 of your deployments are running")
		b1, hb1 := deploy(bob)
		says(b1, "queued: free-plan builds hold 2 of the 3 build slots")
		c1, hc1 := deploy(carol)
		wait("carol's first build", c1, hc1)

		hc1.Release(nil)
		c.waitStatus(t, carol, c1.ID, deployments.StatusLive)
		c2, hc2 := deploy(carol)
		wait("carol's second build (the slot FREE builds may not take)", c2, hc2)
		require.False(t, entered(hb1), "a FREE build took the slot kept for other plans")

		ha1.Release(nil)
		c.waitStatus(t, alice, a1.ID, deployments.StatusLive)
		wait("bob's build", b1, hb1)
		require.False(t, entered(ha3), "alice's third build ran before bob's waiting one")
		ha2.Release(nil)
		wait("alice's third build", a3, ha3)
		for _, h := range []*deploytest.Hold{hb1, hc2, ha3} {
			h.Release(nil)
		}
		for _, d := range []*deployments.Deployment{a3, b1, c2} {
			c.waitStatus(t, d.OwnerID, d.ID, deployments.StatusLive)
		}
		require.LessOrEqual(t, rt.most("*"), 3, "builds at once across both workers")
		require.LessOrEqual(t, rt.most("free"), 2, "FREE builds at once")
		for _, o := range []string{alice, bob, carol} {
			require.LessOrEqual(t, rt.most(o), 2, "owner %s past their share", o)
		}
		platformtest.Eventually(t, 20*time.Second, "every slot given back", func() bool {
			return len(slotsOf(t, bdb)) == 0
		})
	})
}

// acquireTries counts the deployment's tries for a build slot in its
// workflow's history (one local-activity marker each).
func (c *cluster) acquireTries(t *testing.T, d *deployments.Deployment) int {
	t.Helper()
	it := c.engine.cfg.Client.GetWorkflowHistory(context.Background(), d.WorkflowName, "", false, 0)
	n := 0
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		if e.GetMarkerRecordedEventAttributes().GetMarkerName() == "LocalActivity" {
			n++
		}
	}
	return n
}

// TestTemporalTerminatedWorkflowSlotIsFreed: a deployment whose workflow was
// terminated mid-build (it never released its slot, and nothing settled its
// row) holds its owner's only slot until its lease runs out; then the owner's
// next deployment finds the workflow gone, frees the slot and builds.
func TestTemporalTerminatedWorkflowSlotIsFreed(t *testing.T) {
	srv := temporaltest.StartDevServer(t)
	bdb := dbtest.SQLite(t, deployments.Migrations())
	ctx := context.Background()
	owner := platform.NewID()
	projects := deploytest.NewProjects()
	rt := newCountingRuntime()
	p1, h1 := rt.project(projects, owner)
	p2, h2 := rt.project(projects, owner)
	c := newCluster(t, srv, bdb, projects)
	c.shares = planShares{owner: 1}
	c.slotLease = 2 * time.Second
	c.startWorker(t, rt)

	d1, err := c.svc.Trigger(ctx, deployments.TriggerParams{ProjectID: p1, OwnerID: owner})
	require.NoError(t, err)
	select {
	case <-h1.Entered():
	case <-time.After(time.Minute):
		t.Fatalf("the first build did not start:\n%s", c.logText(t, d1.ID))
	}
	require.NoError(t, c.engine.cfg.Client.TerminateWorkflow(ctx, d1.WorkflowName, "", "test"))
	d2, err := c.svc.Trigger(ctx, deployments.TriggerParams{ProjectID: p2, OwnerID: owner})
	require.NoError(t, err)
	select {
	case <-h2.Entered():
	case <-time.After(time.Minute):
		t.Fatalf("the second build did not start:\n%s", c.logText(t, d2.ID))
	}
	h2.Release(nil)
	c.waitStatus(t, owner, d2.ID, deployments.StatusLive)
	require.Equal(t, deployments.StatusBuilding, c.get(t, d1.ID).Status, "nothing settled the terminated one's row: the lease freed its slot")
	require.Equal(t, []string{d2.ID}, rt.Builds()[1:])
}

func (c *cluster) get(t *testing.T, id string) *deployments.Deployment {
	t.Helper()
	d, err := c.store.DeploymentGet(context.Background(), id)
	require.NoError(t, err)
	return d
}
