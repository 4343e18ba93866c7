package deployments_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
)

type statusBody struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Steps  []struct {
		Name       string  `json:"name"`
		Status     string  `json:"status"`
		StartedAt  *string `json:"startedAt"`
		FinishedAt *string `json:"finishedAt"`
	} `json:"steps"`
	DeployedURL   *string  `json:"deployedUrl"`
	ErrorMessage  *string  `json:"errorMessage"`
	BuildDuration *float64 `json:"buildDuration"`
	Region        string   `json:"region"`
}

func (s statusBody) step(name string) string {
	for _, st := range s.Steps {
		if st.Name == name {
			return st.Status
		}
	}
	return ""
}

func TestDeploymentLifecycleOverHTTP(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		alice, bob := platform.NewID(), platform.NewID()
		pid := e.project(alice, "shop", func(s *deployments.DeploySpec) { s.Region = "eu-1" })
		hold := e.rt.HoldBuild("shop")

		var tr triggered
		code, _, body := e.do("POST", "/deployments", alice, map[string]string{"projectId": pid}, &tr)
		require.Equal(t, 201, code, string(body))
		assert.Equal(t, "QUEUED", tr.Status)
		assert.Equal(t, "deploy-"+tr.DeploymentID, tr.WorkflowName)
		require.True(t, platform.ValidID(tr.DeploymentID))

		hold.WaitEntered(t)
		var st statusBody
		code, _, _ = e.do("GET", "/deployments/"+tr.DeploymentID+"/status", alice, nil, &st)
		require.Equal(t, 200, code)
		assert.Equal(t, "BUILDING", st.Status)
		assert.Equal(t, "RUNNING", st.step("BUILD"))
		assert.Equal(t, "PENDING", st.step("PROVISION"))
		assert.Nil(t, st.DeployedURL)
		assert.Nil(t, st.BuildDuration)
		assert.Equal(t, "eu-1", st.Region)

		hold.Release(nil)
		e.waitStatus(tr.DeploymentID, deployments.StatusLive)
		code, _, body = e.do("GET", "/deployments/"+tr.DeploymentID+"/status", alice, nil, &st)
		require.Equal(t, 200, code)
		assert.Equal(t, "LIVE", st.Status, string(body))
		for _, s := range st.Steps {
			assert.Equal(t, "SUCCEEDED", s.Status, s.Name)
			assert.NotNil(t, s.StartedAt)
			assert.NotNil(t, s.FinishedAt)
		}
		require.NotNil(t, st.DeployedURL)
		assert.Equal(t, "http://shop.apps.test", *st.DeployedURL)
		require.NotNil(t, st.BuildDuration)
		assert.Nil(t, st.ErrorMessage)
		assert.Equal(t, tr.DeploymentID, e.rt.RouteOf("shop"))

		var view deployments.View
		code, _, _ = e.do("GET", "/deployments/"+tr.DeploymentID, alice, nil, &view)
		require.Equal(t, 200, code)
		assert.Equal(t, pid, view.ProjectID)
		require.NotNil(t, view.CommitSHA)
		assert.Equal(t, "abc1234", *view.CommitSHA)
		assert.Equal(t, "manual", view.Reason)
		assert.NotNil(t, view.FinishedAt)

		// One system line per step change, in order.
		var sys []string
		for _, l := range e.lines(tr.DeploymentID) {
			if l.Stream == deployments.StreamSystem {
				sys = append(sys, l.Message)
			}
		}
		assert.Equal(t, []string{"deployment queued (manual)", "BUILD started", "built commit abc1234", "BUILD succeeded",
			"PROVISION started", "app is answering on " + e.get(tr.DeploymentID).Upstream, "PROVISION succeeded",
			"DNS started", "DNS succeeded", "deployment is LIVE at http://shop.apps.test"}, sys)

		// Another user sees none of it.
		for _, r := range []struct{ method, path string }{
			{"GET", "/deployments/" + tr.DeploymentID},
			{"GET", "/deployments/" + tr.DeploymentID + "/status"},
			{"GET", "/deployments/" + tr.DeploymentID + "/logs"},
			{"POST", "/deployments/" + tr.DeploymentID + "/logs/token"},
			{"POST", "/deployments/" + tr.DeploymentID + "/cancel"},
			{"POST", "/deployments/" + tr.DeploymentID + "/redeploy"},
			{"DELETE", "/deployments/" + tr.DeploymentID},
		} {
			code, _, body := e.do(r.method, r.path, bob, nil, nil)
			assert.Equal(t, 404, code, "%s %s: %s", r.method, r.path, body)
		}
		code, _, _ = e.do("POST", "/deployments", bob, map[string]string{"projectId": pid}, nil)
		assert.Equal(t, 404, code, "bob cannot deploy alice's project")
		var list []deployments.View
		code, _, _ = e.do("GET", "/deployments", bob, nil, &list)
		require.Equal(t, 200, code)
		assert.Empty(t, list)
		assert.True(t, e.rt.Running(tr.DeploymentID), "bob's DELETE stopped nothing")

		// No token: 401. Bad input: 400 naming the field.
		code, _, _ = e.do("GET", "/deployments", "", nil, nil)
		assert.Equal(t, 401, code)
		code, _, body = e.do("POST", "/deployments", alice, map[string]string{"projectId": "nope"}, nil)
		assert.Equal(t, 400, code)
		assert.Contains(t, string(body), "projectId")
		code, _, body = e.do("POST", "/deployments", alice, map[string]any{}, nil)
		assert.Equal(t, 400, code)
		assert.Contains(t, string(body), "projectId")
		code, _, _ = e.do("POST", "/deployments", alice, map[string]string{"projectId": platform.NewID()}, nil)
		assert.Equal(t, 404, code)
		code, _, body = e.do("GET", "/deployments?projectId=x", alice, nil, nil)
		assert.Equal(t, 400, code)
		assert.Contains(t, string(body), "projectId")
		code, _, _ = e.do("GET", "/deployments/not-a-uuid", alice, nil, nil)
		assert.Equal(t, 404, code)
		code, _, body = e.do("POST", "/deployments/"+tr.DeploymentID+"/cancel", alice, nil, nil)
		assert.Equal(t, 409, code)
		assert.Contains(t, string(body), "already LIVE")
	})
}

func TestListNewestFirstFilteredAndPaginated(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		alice := platform.NewID()
		p1, p2 := e.project(alice, "one"), e.project(alice, "two")
		var ids []string
		for i := range 5 {
			p := p1
			if i%2 == 1 {
				p = p2
			}
			ids = append(ids, e.trigger(alice, p))
		}
		var all []string
		cursor := ""
		for page := 0; ; page++ {
			require.Less(t, page, 5)
			var list []deployments.View
			code, h, _ := e.do("GET", "/deployments?limit=2&cursor="+cursor, alice, nil, &list)
			require.Equal(t, 200, code)
			for _, v := range list {
				all = append(all, v.ID)
			}
			cursor = h.Get("X-Next-Cursor")
			if cursor == "" {
				break
			}
		}
		assert.Equal(t, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}, all)

		var list []deployments.View
		code, _, _ := e.do("GET", "/deployments?projectId="+p2, alice, nil, &list)
		require.Equal(t, 200, code)
		require.Len(t, list, 2)
		assert.Equal(t, ids[3], list[0].ID)
		assert.Equal(t, ids[1], list[1].ID)

		code, _, body := e.do("GET", "/deployments?cursor=garbage", alice, nil, nil)
		assert.Equal(t, 400, code)
		assert.Contains(t, string(body), "cursor")
	})
}

func TestQuotaPerProjectPerMonth(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		alice := platform.NewID()
		pid := e.project(alice, "capped", func(s *deployments.DeploySpec) { s.MaxDeploymentsPerMonth, s.PlanName = 2, "Hobby" })
		other := e.project(alice, "free")
		first := e.trigger(alice, pid)
		e.trigger(alice, pid)
		code, _, body := e.do("POST", "/deployments", alice, map[string]string{"projectId": pid}, nil)
		assert.Equal(t, 403, code)
		assert.Contains(t, string(body), "maxDeployments quota reached: 2 of 2 deployments this month on plan Hobby")
		assert.Contains(t, string(body), "QUOTA_EXCEEDED")

		// Deleting a deployment gives no quota back; other projects are not affected.
		e.waitStatus(first, deployments.StatusCancelled) // replaced by the second
		code, _, _ = e.do("DELETE", "/deployments/"+first, alice, nil, nil)
		require.Equal(t, 200, code)
		code, _, _ = e.do("POST", "/deployments", alice, map[string]string{"projectId": pid}, nil)
		assert.Equal(t, 403, code)
		e.trigger(alice, other)

		n, err := e.svc.DeploymentsThisMonth(context.Background(), alice)
		require.NoError(t, err)
		assert.Equal(t, map[string]int{pid: 2, other: 1}, n)
	})
}

func TestQuotaIsAtomicUnderConcurrentTriggers(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{noStart: true})
		alice := platform.NewID()
		pid := e.project(alice, "race", func(s *deployments.DeploySpec) { s.MaxDeploymentsPerMonth = 3 })
		errs := make(chan error, 10)
		for range 10 {
			go func() {
				_, err := e.svc.Trigger(context.Background(), deployments.TriggerParams{ProjectID: pid, OwnerID: alice})
				errs <- err
			}()
		}
		ok, refused := 0, 0
		for range 10 {
			err := platformtest.Receive(t, errs, time.Minute, "a trigger to return")
			switch {
			case err == nil:
				ok++
			case errors.Is(err, platform.ErrForbidden):
				refused++
			default:
				t.Errorf("trigger: %v", err)
			}
		}
		assert.Equal(t, 3, ok)
		assert.Equal(t, 7, refused)
		ds, err := e.store.DeploymentsWhere(context.Background(), deployments.Filter{ProjectID: pid})
		require.NoError(t, err)
		assert.Len(t, ds, 3)
	})
}

func TestFailedBuildReportsItsError(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		alice := platform.NewID()
		pid := e.project(alice, "broken")
		e.rt.FailBuild("broken", errors.New("build command exited with status 2"))
		id := e.trigger(alice, pid)
		e.waitStatus(id, deployments.StatusFailed)
		var st statusBody
		e.do("GET", "/deployments/"+id+"/status", alice, nil, &st)
		assert.Equal(t, "FAILED", st.Status)
		assert.Equal(t, "FAILED", st.step("BUILD"))
		assert.Equal(t, "SKIPPED", st.step("PROVISION"))
		assert.Equal(t, "SKIPPED", st.step("DNS"))
		require.NotNil(t, st.ErrorMessage)
		assert.Contains(t, *st.ErrorMessage, "BUILD failed: build command exited with status 2")
		assert.Contains(t, *st.ErrorMessage, "compile error: undefined: foo", "the build's last output lines")
		assert.Nil(t, st.DeployedURL)
		assert.True(t, e.rt.Cleaned(id))
		assert.Equal(t, "", e.rt.RouteOf("broken"))
		var msgs []string
		for _, l := range e.lines(id) {
			msgs = append(msgs, l.Message)
		}
		assert.Contains(t, msgs, "compile error: undefined: foo")
		assert.Contains(t, msgs, "BUILD failed: build command exited with status 2")

		// A failed start is a failed PROVISION.
		e.rt.FailStart("broken", errors.New("app did not answer on its port within 60s"))
		id = e.trigger(alice, pid)
		d := e.waitStatus(id, deployments.StatusFailed)
		assert.Equal(t, deployments.StepSucceeded, d.Steps.Get(deployments.StepBuild).Status)
		assert.Equal(t, deployments.StepFailed, d.Steps.Get(deployments.StepProvision).Status)
		assert.Equal(t, deployments.StepSkipped, d.Steps.Get(deployments.StepDNS).Status)
		assert.True(t, strings.HasPrefix(d.ErrorMessage, "PROVISION failed: app did not answer"), d.ErrorMessage)
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		alice := platform.NewID()
		pid := e.project(alice, "slow")
		hold := e.rt.HoldBuild("slow")
		running := e.trigger(alice, pid)
		hold.WaitEntered(t)
		queued := e.trigger(alice, pid) // waits: one deployment per project at a time

		// Cancelling the queued one ends it at once; it never builds.
		var st statusBody
		code, _, body := e.do("POST", "/deployments/"+queued+"/cancel", alice, nil, &st)
		require.Equal(t, 200, code, string(body))
		assert.Equal(t, "CANCELLED", st.Status)
		assert.Equal(t, "SKIPPED", st.step("BUILD"))

		code, _, body = e.do("POST", "/deployments/"+running+"/cancel", alice, nil, &st)
		require.Equal(t, 200, code, string(body))
		assert.Equal(t, "CANCELLED", st.Status)
		assert.Equal(t, "FAILED", st.step("BUILD"))
		assert.Equal(t, "SKIPPED", st.step("PROVISION"))
		require.NotNil(t, st.ErrorMessage)
		assert.Equal(t, "cancelled during BUILD", *st.ErrorMessage)
		var killed bool
		for _, l := range e.lines(running) {
			killed = killed || l.Message == "build killed"
		}
		assert.True(t, killed, "the step's context was cancelled")
		assert.True(t, e.rt.Cleaned(running))
		assert.Equal(t, []string{running}, e.rt.Builds())

		code, _, _ = e.do("POST", "/deployments/"+running+"/cancel", alice, nil, nil)
		assert.Equal(t, 409, code)
	})
}

func TestProjectRunsOneDeploymentAtATimeInOrder(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		alice := platform.NewID()
		pa, pb := e.project(alice, "aaa"), e.project(alice, "bbb")
		hold := e.rt.HoldBuild("aaa")
		a1 := e.trigger(alice, pa)
		hold.WaitEntered(t)
		a2 := e.trigger(alice, pa)
		a3 := e.trigger(alice, pa)
		b1 := e.trigger(alice, pb)
		e.waitStatus(b1, deployments.StatusLive) // other projects are not held up
		assert.Equal(t, deployments.StatusQueued, e.get(a2).Status)
		assert.Equal(t, deployments.StatusQueued, e.get(a3).Status)

		hold.Release(nil)
		e.waitStatus(a3, deployments.StatusLive)
		e.waitStatus(a2, deployments.StatusCancelled) // replaced just after a3 is LIVE
		assert.Equal(t, []string{a1, b1, a2, a3}, e.rt.Builds())
		for _, id := range []string{a1, a2} {
			d := e.get(id)
			assert.Equal(t, deployments.StatusCancelled, d.Status, "replaced deployments end CANCELLED")
			assert.False(t, e.rt.Running(id), "replaced app stopped")
			assert.False(t, d.ReplacedAt.IsZero())
		}
		assert.Equal(t, a2, e.get(a1).SupersededBy)
		assert.Equal(t, a3, e.get(a2).SupersededBy)
		assert.Equal(t, a3, e.rt.RouteOf("aaa"))
		assert.True(t, e.rt.Running(a3))
		assert.Equal(t, deployments.StatusLive, e.get(b1).Status)
	})
}

func TestSecretsAreMaskedInLogsAndErrors(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		git := gitCreds{pass: "ghs_installationTOKEN"}
		e := newEnv(t, bdb, envOpts{git: git})
		alice := platform.NewID()
		pid := e.project(alice, "secret", func(s *deployments.DeploySpec) {
			s.Env = []deployments.EnvVar{{Key: "API_KEY", Value: "s3cr3t-value", Secret: true},
				{Key: "PIN", Value: "12", Secret: true}, {Key: "MODE", Value: "visible"}}
		})
		e.rt.FailBuild("secret", fmt.Errorf("cannot reach https://user:s3cr3t-value@db"))
		id := e.trigger(alice, pid)
		d := e.waitStatus(id, deployments.StatusFailed)
		var all strings.Builder
		for _, l := range e.lines(id) {
			all.WriteString(l.Message + "\n")
		}
		logs := all.String()
		assert.NotContains(t, logs, "s3cr3t-value")
		assert.NotContains(t, logs, "ghs_installationTOKEN")
		assert.Contains(t, logs, "env API_KEY=***")
		assert.Contains(t, logs, "git auth ***")
		assert.Contains(t, logs, "env MODE=visible")
		assert.Contains(t, logs, "env PIN=12", "values shorter than 3 bytes are not masked")
		assert.NotContains(t, d.ErrorMessage, "s3cr3t-value")
		assert.Contains(t, d.ErrorMessage, "https://user:***@db")
	})
}

type gitCreds struct{ pass string }

func (g gitCreds) GitAuthFor(context.Context, string, string) (*deployments.GitAuth, error) {
	return &deployments.GitAuth{Username: "x-access-token", Password: g.pass}, nil
}

func TestDeleteAndTeardown(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		alice := platform.NewID()
		pid := e.project(alice, "gone")
		old := e.trigger(alice, pid)
		e.waitStatus(old, deployments.StatusLive)
		cur := e.trigger(alice, pid)
		e.waitStatus(cur, deployments.StatusLive)
		e.waitStatus(old, deployments.StatusCancelled)

		// Deleting the replaced deployment leaves the current route alone.
		code, _, body := e.do("DELETE", "/deployments/"+old, alice, nil, nil)
		require.Equal(t, 200, code, string(body))
		assert.JSONEq(t, fmt.Sprintf(`{"id":%q,"deleted":true}`, old), string(body))
		assert.Equal(t, cur, e.rt.RouteOf("gone"))
		code, _, _ = e.do("GET", "/deployments/"+old, alice, nil, nil)
		assert.Equal(t, 404, code)
		assert.Empty(t, e.lines(old))

		// Deleting the LIVE one stops it and removes its route and workspace.
		code, _, _ = e.do("DELETE", "/deployments/"+cur, alice, nil, nil)
		require.Equal(t, 200, code)
		assert.False(t, e.rt.Running(cur))
		assert.Equal(t, "", e.rt.RouteOf("gone"))
		assert.True(t, e.rt.Cleaned(cur))
		assert.Empty(t, e.lines(cur))

		// Teardown: a LIVE, a running and a queued deployment.
		live := e.trigger(alice, pid)
		e.waitStatus(live, deployments.StatusLive)
		hold := e.rt.HoldBuild("gone")
		running := e.trigger(alice, pid)
		hold.WaitEntered(t)
		queued := e.trigger(alice, pid)
		e.projects.Remove(pid) // projects marks it DELETING: ProjectForDeploy says not found
		require.NoError(t, e.svc.TeardownProject(context.Background(), pid))
		for _, id := range []string{live, running, queued} {
			_, err := e.store.DeploymentGet(context.Background(), id)
			assert.ErrorIs(t, err, platform.ErrNotFound)
			assert.False(t, e.rt.Running(id))
			assert.Empty(t, e.lines(id))
		}
		assert.Equal(t, "", e.rt.RouteOf("gone"))
		assert.Equal(t, []string{old, cur, live, running}, e.rt.Builds(), "the queued one never built")
		require.NoError(t, e.svc.TeardownProject(context.Background(), pid), "idempotent")
		n, err := e.svc.DeploymentsThisMonth(context.Background(), alice)
		require.NoError(t, err)
		assert.Empty(t, n)
	})
}

func TestRedeployBuildsTheSameCommit(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		alice := platform.NewID()
		pid := e.project(alice, "again")
		first := e.trigger(alice, pid)
		e.waitStatus(first, deployments.StatusLive)
		var tr triggered
		code, _, body := e.do("POST", "/deployments/"+first+"/redeploy", alice, nil, &tr)
		require.Equal(t, 201, code, string(body))
		d := e.waitStatus(tr.DeploymentID, deployments.StatusLive)
		assert.Equal(t, "abc1234", d.CommitSHA)
		assert.Equal(t, "redeploy of "+first, d.Reason)
		assert.Equal(t, tr.DeploymentID, e.waitStatus(first, deployments.StatusCancelled).SupersededBy)
	})
}
