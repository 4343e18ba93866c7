package temporal

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/internal/deploytest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// fixture is a deployments database with one project and the shared step
// bodies over a scripted runtime.
type fixture struct {
	store    *deployments.Store
	logs     *deployments.Logs
	acts     *deployments.Activities
	rt       *deploytest.Runtime
	projects *deploytest.Projects
	project  string
	slug     string
	shares   deployments.Shares // the workers' build shares; nil: 2 each
	placer   Placer             // the workers' Placer; nil: any worker
}

func newFixture(t *testing.T, store *deployments.Store) *fixture {
	t.Helper()
	f := &fixture{store: store, rt: deploytest.NewRuntime(), projects: deploytest.NewProjects(), slug: "app-" + platformtest.Unique(8)}
	f.logs = deployments.NewLogs(store, deployments.LogsConfig{})
	t.Cleanup(f.logs.Close)
	f.project = f.projects.Add(deployments.DeploySpec{
		OwnerID: platform.NewID(), Slug: f.slug, Name: "app", RepoURL: "https://example.test/app.git",
		Framework: "go", Port: 8080, Region: "local",
		Env:    []deployments.EnvVar{{Key: "API_KEY", Value: "s3cr3t-value", Secret: true}},
		Limits: deployments.Limits{BuildTimeout: time.Minute},
	})
	acts, err := deployments.NewActivities(deployments.ActivitiesConfig{Store: store, Logs: f.logs, Runtime: f.rt, Projects: f.projects})
	require.NoError(t, err)
	f.acts = acts
	return f
}

// queue stores a QUEUED deployment of the fixture's project, as the service's Trigger does.
func (f *fixture) queue(t *testing.T) *deployments.Deployment {
	t.Helper()
	spec, err := f.projects.ProjectForDeploy(context.Background(), f.project)
	require.NoError(t, err)
	at := time.Now().UTC().Truncate(time.Microsecond)
	id := platform.NewID()
	d := &deployments.Deployment{ID: id, ProjectID: f.project, OwnerID: spec.OwnerID, ProjectSlug: spec.Slug,
		Status: deployments.StatusQueued, Steps: deployments.NewSteps(), Reason: "manual", Region: spec.Region,
		WorkflowName: WorkflowID(id), Attempt: 1, CreatedAt: at, UpdatedAt: at}
	_, err = f.store.DeploymentInsert(context.Background(), d, 0)
	require.NoError(t, err)
	return d
}

func (f *fixture) get(t *testing.T, id string) *deployments.Deployment {
	t.Helper()
	d, err := f.store.DeploymentGet(context.Background(), id)
	require.NoError(t, err)
	return d
}

func (f *fixture) logText(t *testing.T, id string) string {
	t.Helper()
	require.NoError(t, f.logs.Flush(context.Background()))
	lines, err := f.store.LogList(context.Background(), deployments.LogListParams{DeploymentID: id, Limit: 10000})
	require.NoError(t, err)
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.Message + "\n")
	}
	return b.String()
}

// testEnv is the SDK's workflow test environment with the workflow and every
// activity registered, as a worker registers them.
func (f *fixture) testEnv(t *testing.T) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetTestTimeout(30 * time.Second)
	env.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowType})
	a := f.activities()
	for name, fn := range map[string]any{
		activityBuild: a.build, activityProvision: a.provision, activityConfigureDNS: a.configureDNS,
		activityFinish: a.finish, activityRelease: a.release, activitySignalRelease: a.signalRelease,
		activityAcquireSlot: a.acquireSlot, activityReleaseSlot: a.releaseSlot, activityPlace: a.place,
	} {
		env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	return env
}

// activities are the worker's activities over the fixture, with the
// fixture's build shares (the default of 2 when f.shares is nil). Slot leases
// outlast the test: no holder's workflow is looked up (there is no client).
func (f *fixture) activities() *activities {
	return &activities{acts: f.acts, store: f.store, rt: f.rt, hostQueue: "q/worker/test", log: discardLog(),
		perUser: 2, shares: f.shares, slots: testSlots, lease: time.Hour, placer: f.placer}
}

// testSlots are the workers' build slots in the workflow tests: the default.
var testSlots = deployments.SlotPolicy{Slots: 4}

var testTimeouts = Timeouts{Heartbeat: time.Second, HostPickup: 5 * time.Second}

func TestWorkflowRunsToLiveAndReleases(t *testing.T) {
	f := newFixture(t, deployments.NewStore(dbtest.SQLite(t, deployments.Migrations())))
	d := f.queue(t)
	env := f.testEnv(t)

	var atLive State
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QueryState)
		require.NoError(t, err)
		require.NoError(t, v.Get(&atLive))
		env.SignalWorkflow(SignalRelease, nil)
	}, time.Hour) // workflow time: fires once the workflow waits, LIVE
	env.ExecuteWorkflow(WorkflowType, Input{DeploymentID: d.ID, BuildTimeout: time.Minute, Timeouts: testTimeouts})

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	require.Equal(t, deployments.StatusLive, atLive.Status)
	for _, s := range atLive.Steps {
		require.Equal(t, deployments.StepSucceeded, s.Status, "step %s", s.Name)
		require.NotNil(t, s.StartedAt)
		require.NotNil(t, s.FinishedAt)
	}
	require.Equal(t, "q/worker/test", atLive.HostQueue)

	var final State
	require.NoError(t, env.GetWorkflowResult(&final))
	require.True(t, final.Released)

	got := f.get(t, d.ID)
	require.Equal(t, deployments.StatusLive, got.Status, "the stored row is written by the shared activities")
	require.NotEmpty(t, got.DeployedURL)
	require.Equal(t, "abc1234", got.CommitSHA)
	for _, s := range got.Steps {
		require.Equal(t, deployments.StepSucceeded, s.Status, "stored step %s", s.Name)
	}
	require.False(t, f.rt.Running(d.ID), "release stopped the app")
	require.Empty(t, f.rt.RouteOf(f.slug), "release removed the route")
	log := f.logText(t, d.ID)
	require.Contains(t, log, "BUILD started")
	require.Contains(t, log, "deployment is LIVE")
	require.NotContains(t, log, "s3cr3t-value", "secret env values are masked")
}

func TestWorkflowFailingBuildIsNotRetried(t *testing.T) {
	f := newFixture(t, deployments.NewStore(dbtest.SQLite(t, deployments.Migrations())))
	d := f.queue(t)
	f.rt.FailBuild(f.slug, errors.New("build command failed: exit status 2: main.go:3: undefined: fmt.Prinln"))
	env := f.testEnv(t)
	env.ExecuteWorkflow(WorkflowType, Input{DeploymentID: d.ID, Timeouts: testTimeouts})

	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	require.Error(t, err)
	var ae *temporal.ApplicationError
	require.ErrorAs(t, err, &ae)
	require.Contains(t, ae.Message(), "undefined: fmt.Prinln")

	require.Len(t, f.rt.Builds(), 1, "a failing build command is not retried")
	got := f.get(t, d.ID)
	require.Equal(t, deployments.StatusFailed, got.Status)
	require.Contains(t, got.ErrorMessage, "undefined: fmt.Prinln")
	require.Equal(t, deployments.StepFailed, got.Steps.Get(deployments.StepBuild).Status)
	require.Equal(t, deployments.StepSkipped, got.Steps.Get(deployments.StepProvision).Status)
	require.Equal(t, deployments.StepSkipped, got.Steps.Get(deployments.StepDNS).Status)
	require.True(t, f.rt.Cleaned(d.ID), "the failed build's workspace is removed")
	require.Contains(t, f.logText(t, d.ID), "undefined: fmt.Prinln")
}

func TestWorkflowCancelMidBuild(t *testing.T) {
	f := newFixture(t, deployments.NewStore(dbtest.SQLite(t, deployments.Migrations())))
	d := f.queue(t)
	hold := f.rt.HoldBuild(f.slug)
	env := f.testEnv(t)
	go func() {
		<-hold.Entered()
		env.CancelWorkflow()
	}()
	env.ExecuteWorkflow(WorkflowType, Input{DeploymentID: d.ID, Timeouts: testTimeouts})

	require.True(t, env.IsWorkflowCompleted())
	require.True(t, temporal.IsCanceledError(env.GetWorkflowError()), "got %v", env.GetWorkflowError())
	got := f.get(t, d.ID)
	require.Equal(t, deployments.StatusCancelled, got.Status)
	require.Equal(t, deployments.StepFailed, got.Steps.Get(deployments.StepBuild).Status)
	require.Equal(t, deployments.StepSkipped, got.Steps.Get(deployments.StepProvision).Status)
	require.Contains(t, got.ErrorMessage, "cancelled during BUILD")
	// The build's context was cancelled (through the heartbeat) and it stopped.
	platformtest.Eventually(t, 20*time.Second, "the held build saw its context end", func() bool {
		return strings.Contains(f.logText(t, d.ID), "build killed")
	})
}

func TestWorkflowWorkerLostDuringProvisionRebuilds(t *testing.T) {
	f := newFixture(t, deployments.NewStore(dbtest.SQLite(t, deployments.Migrations())))
	d := f.queue(t)
	env := f.testEnv(t)
	// The first PROVISION finds its worker gone (its task is never picked up);
	// the second round runs for real.
	calls := 0
	env.OnActivity(activityProvision, mock.Anything, mock.Anything).Return(func(ctx context.Context, id string) error {
		calls++
		if calls == 1 {
			return temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
		}
		return f.activities().provision(ctx, id)
	})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalRelease, nil) }, time.Hour)
	env.ExecuteWorkflow(WorkflowType, Input{DeploymentID: d.ID, Timeouts: testTimeouts})

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var final State
	require.NoError(t, env.GetWorkflowResult(&final))
	require.Equal(t, 2, final.Round)
	require.Len(t, f.rt.Builds(), 2, "built again after the worker holding the build was lost")
	got := f.get(t, d.ID)
	require.Equal(t, deployments.StatusLive, got.Status)
	require.Equal(t, 2, got.Attempt)
}

// A worker killed after PROVISION ended and started again (same host queue)
// stopped the app its earlier run started. The DNS step it then runs must not
// route to that app (the deployment would read LIVE and answer 502): the
// round starts over from BUILD.
func TestWorkflowDNSOnARestartedWorkerBuildsAgain(t *testing.T) {
	f := newFixture(t, deployments.NewStore(dbtest.SQLite(t, deployments.Migrations())))
	d := f.queue(t)
	env := f.testEnv(t)
	calls := 0
	env.OnActivity(activityProvision, mock.Anything, mock.Anything).Return(func(ctx context.Context, id string) error {
		calls++
		err := f.activities().provision(ctx, id)
		if calls == 1 {
			require.NoError(t, f.rt.Stop(ctx, id)) // the restarted worker's clean-up
		}
		return err
	})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalRelease, nil) }, time.Hour)
	env.ExecuteWorkflow(WorkflowType, Input{DeploymentID: d.ID, Timeouts: testTimeouts})

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var final State
	require.NoError(t, env.GetWorkflowResult(&final))
	require.Equal(t, 2, final.Round, "the DNS step on the restarted worker started a new round")
	require.Len(t, f.rt.Builds(), 2)
	got := f.get(t, d.ID)
	require.Equal(t, deployments.StatusLive, got.Status)
	require.Equal(t, 2, got.Attempt)
	require.Contains(t, f.logText(t, d.ID), "not running on this host")
}

// pinnedPlacer places every deployment on one host queue, pinned there.
type pinnedPlacer string

func (q pinnedPlacer) Place(context.Context, string) (Placement, error) {
	return Placement{Queue: string(q), Reason: "placed on host " + string(q) + " (pinned)", Pinned: true}, nil
}

// A project pinned to a host whose worker never takes the build (the host
// went away): the deployment fails naming that, and nothing is built on
// another worker (an unpinned one would go to any worker).
func TestWorkflowPinnedHostGoneFailsTheDeployment(t *testing.T) {
	f := newFixture(t, deployments.NewStore(dbtest.SQLite(t, deployments.Migrations())))
	f.placer = pinnedPlacer("q/worker/pinned")
	d := f.queue(t)
	env := f.testEnv(t)
	calls := 0
	env.OnActivity(activityBuild, mock.Anything, mock.Anything).Return(func(ctx context.Context, id string) (BuildResult, error) {
		calls++
		return BuildResult{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
	})
	env.ExecuteWorkflow(WorkflowType, Input{DeploymentID: d.ID, Timeouts: testTimeouts})

	require.True(t, env.IsWorkflowCompleted())
	require.Error(t, env.GetWorkflowError())
	require.Equal(t, 1, calls, "not handed to another worker")
	require.Empty(t, f.rt.Builds())
	got := f.get(t, d.ID)
	require.Equal(t, deployments.StatusFailed, got.Status)
	require.Contains(t, got.ErrorMessage, "pinned host did not take the build")
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// A worker lost after the DNS step made the deployment LIVE, but before the
// step superseded the previous LIVE deployment and before Temporal heard the
// step end (a kill -9 at that moment): the next round's BUILD finds it LIVE.
// The deployment stays LIVE, nothing is built again, the older deployment is
// superseded and its workflow told to release, and the workflow waits LIVE.
func TestWorkflowWorkerLostAfterDNSWentLiveStaysLive(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, deployments.NewStore(dbtest.SQLite(t, deployments.Migrations())))
	old := f.queue(t)
	old.Status, old.Host = deployments.StatusLive, "q/worker/test"
	_, err := f.store.DeploymentUpdate(ctx, old, nil, "status", "host")
	require.NoError(t, err)
	d := f.queue(t)
	env := f.testEnv(t)
	dnsCalls := 0
	env.OnActivity(activityConfigureDNS, mock.Anything, mock.Anything).Return(func(ctx context.Context, id string) (DNSResult, error) {
		if dnsCalls++; dnsCalls > 1 {
			return DNSResult{}, errors.New("DNS ran twice")
		}
		// The step's own write, then the worker dies.
		got := f.get(t, id)
		got.Status, got.DeployedURL = deployments.StatusLive, "http://"+f.slug+".localhost"
		_, err := f.store.DeploymentUpdate(ctx, got, nil, "status", "deployed_url")
		require.NoError(t, err)
		return DNSResult{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil)
	})
	var released []string
	env.OnActivity(activitySignalRelease, mock.Anything, mock.Anything).Return(func(ctx context.Context, ids []string) error {
		released = append(released, ids...)
		return nil
	})
	var atLive State
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QueryState)
		require.NoError(t, err)
		require.NoError(t, v.Get(&atLive))
		env.SignalWorkflow(SignalRelease, nil)
	}, time.Hour)
	env.ExecuteWorkflow(WorkflowType, Input{DeploymentID: d.ID, BuildTimeout: time.Minute, Timeouts: testTimeouts})

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError(), "the workflow ends released, not cancelled")
	require.Equal(t, deployments.StatusLive, atLive.Status, "the workflow waited as LIVE")
	require.Equal(t, 2, atLive.Round)
	require.Len(t, f.rt.Builds(), 1, "a LIVE deployment is not built again")
	got := f.get(t, d.ID)
	require.Equal(t, deployments.StatusLive, got.Status)
	require.False(t, got.CancelRequested, "a LIVE deployment is not marked cancelled")
	was := f.get(t, old.ID)
	require.Equal(t, deployments.StatusCancelled, was.Status)
	require.Equal(t, d.ID, was.SupersededBy)
	require.Equal(t, []string{WorkflowID(old.ID)}, released)
}
