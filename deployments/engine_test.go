package deployments_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/internal/deploytest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
)

// insertAt stores a deployment of project pid as a previous server left it.
func (e *env) insertAt(pid, owner, slug string, status deployments.Status, attempt int, mod func(*deployments.Deployment)) string {
	e.t.Helper()
	at := time.Now().UTC().Truncate(time.Microsecond)
	d := &deployments.Deployment{ID: platform.NewID(), ProjectID: pid, OwnerID: owner, ProjectSlug: slug,
		Status: status, Steps: deployments.NewSteps(), Reason: "manual", Region: "local", Attempt: attempt,
		CreatedAt: at, UpdatedAt: at}
	d.WorkflowName = "deploy-" + d.ID
	started := at.Add(-time.Second)
	for _, s := range []deployments.StepName{deployments.StepBuild, deployments.StepProvision, deployments.StepDNS} {
		st := d.Steps.Get(s)
		if deployments.Status(map[deployments.StepName]deployments.Status{deployments.StepBuild: deployments.StatusBuilding,
			deployments.StepProvision: deployments.StatusProvisioning, deployments.StepDNS: deployments.StatusConfiguringDNS}[s]) == status {
			st.Status, st.StartedAt = deployments.StepRunning, &started
			break
		}
		st.Status, st.StartedAt, st.FinishedAt = deployments.StepSucceeded, &started, &started
	}
	if mod != nil {
		mod(d)
	}
	_, err := e.store.DeploymentInsert(context.Background(), d, 0)
	must(e.t, err)
	return d.ID
}

func TestRestartRecovery(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		projects := deploytest.NewProjects()
		alice := platform.NewID()

		// First server: one deployment mid-BUILD, one app LIVE.
		e1 := newEnv(t, bdb, envOpts{projects: projects})
		pBuild, pLive := e1.project(alice, "building"), e1.project(alice, "running")
		live := e1.trigger(alice, pLive)
		e1.waitStatus(live, deployments.StatusLive)
		hold := e1.rt.HoldBuild("building")
		mid := e1.trigger(alice, pBuild)
		hold.WaitEntered(t)
		e1.close() // the server goes away mid-build
		assert.Equal(t, deployments.StatusBuilding, e1.get(mid).Status, "left as it was")

		// Rows a crashed server could leave: a second interruption, a cancel
		// that did not finish, two LIVE deployments of one project.
		pFail, pCancel, pTwo := e1.project(alice, "again"), e1.project(alice, "stopping"), e1.project(alice, "twice")
		failing := e1.insertAt(pFail, alice, "again", deployments.StatusProvisioning, 2, nil)
		cancelling := e1.insertAt(pCancel, alice, "stopping", deployments.StatusBuilding, 1, func(d *deployments.Deployment) { d.CancelRequested = true })
		oldLive := e1.insertAt(pTwo, alice, "twice", deployments.StatusLive, 1, nil)
		newLive := e1.insertAt(pTwo, alice, "twice", deployments.StatusLive, 1, nil)

		// Second server over the same database, fresh runtime (nothing runs).
		e2 := newEnv(t, bdb, envOpts{projects: projects})

		d := e2.waitStatus(mid, deployments.StatusLive)
		assert.Equal(t, 2, d.Attempt)
		assert.Equal(t, []string{mid}, filter(e2.rt.Builds(), mid), "built again from scratch")
		ls := e2.lines(mid)
		for i, l := range ls {
			require.Equal(t, int64(i+1), l.Seq, "sequence continues without gaps")
		}
		var msgs []string
		for _, l := range ls {
			msgs = append(msgs, l.Message)
		}
		assert.Contains(t, strings.Join(msgs, "\n"), "build killed\nserver restarted during BUILD; deployment queued again from BUILD (attempt 2 of 2)\nBUILD started")

		d = e2.waitStatus(failing, deployments.StatusFailed)
		assert.Equal(t, "server restarted during PROVISION", d.ErrorMessage)
		assert.Equal(t, deployments.StepSucceeded, d.Steps.Get(deployments.StepBuild).Status)
		assert.Equal(t, deployments.StepFailed, d.Steps.Get(deployments.StepProvision).Status)
		assert.Equal(t, deployments.StepSkipped, d.Steps.Get(deployments.StepDNS).Status)
		assert.True(t, e2.rt.Cleaned(failing))

		d = e2.waitStatus(cancelling, deployments.StatusCancelled)
		assert.Contains(t, d.ErrorMessage, "cancelled during BUILD")

		// LIVE apps come back, routed; of two LIVE deployments the newest wins.
		platformtest.Eventually(t, 20*time.Second, "live app restarted", func() bool { return e2.rt.Running(live) && e2.rt.RouteOf("running") == live })
		platformtest.Eventually(t, 20*time.Second, "newest live app restarted", func() bool { return e2.rt.Running(newLive) })
		assert.Equal(t, newLive, e2.rt.RouteOf("twice"))
		d = e2.waitStatus(oldLive, deployments.StatusCancelled)
		assert.Equal(t, newLive, d.SupersededBy)
		assert.False(t, e2.rt.Running(oldLive))
		// Logged after the route is set and the row updated: wait for it.
		platformtest.Eventually(t, 20*time.Second, "the log says the app runs again", func() bool {
			for _, l := range e2.lines(live) {
				if strings.HasPrefix(l.Message, "app is running again at ") {
					return true
				}
			}
			return false
		})

		// No deployment is left mid-workflow.
		ds, err := e2.store.DeploymentsWhere(context.Background(), deployments.Filter{Statuses: []deployments.Status{deployments.StatusQueued,
			deployments.StatusBuilding, deployments.StatusProvisioning, deployments.StatusConfiguringDNS}})
		require.NoError(t, err)
		assert.Empty(t, ds)
	})
}

func TestLiveAppThatCannotRestartEndsFailed(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{noStart: true})
		alice := platform.NewID()
		pid := e.project(alice, "flaky")
		id := e.insertAt(pid, alice, "flaky", deployments.StatusLive, 1, nil)
		e.rt.FailStart("flaky", assertErr("workspace is gone"))
		require.NoError(t, e.eng.Start(context.Background()))
		d := e.waitStatus(id, deployments.StatusFailed)
		assert.Equal(t, "the app did not start again after a server restart: workspace is gone", d.ErrorMessage)
		assert.Equal(t, "", e.rt.RouteOf("flaky"))
	})
}

func TestStatusRouteSettlesOrphanedDeployment(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		// A row mid-BUILD that no run of this engine owns (e.g. its run ended
		// without recording an outcome): the status sync ends it.
		e := newEnv(t, bdb, envOpts{})
		alice := platform.NewID()
		pid := e.project(alice, "orphan")
		id := e.insertAt(pid, alice, "orphan", deployments.StatusBuilding, 1, nil)
		var st statusBody
		code, _, _ := e.do("GET", "/deployments/"+id+"/status", alice, nil, &st)
		require.Equal(t, 200, code)
		assert.Equal(t, "FAILED", st.Status)
		require.NotNil(t, st.ErrorMessage)
		assert.Contains(t, *st.ErrorMessage, "stopped unexpectedly")
	})
}

type assertErr string

func (e assertErr) Error() string { return string(e) }

func filter(ids []string, keep string) []string {
	var out []string
	for _, id := range ids {
		if id == keep {
			out = append(out, id)
		}
	}
	return out
}
