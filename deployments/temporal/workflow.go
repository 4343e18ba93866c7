package temporal

import (
	"errors"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Names registered with Temporal. They are part of the wire contract between
// API replicas and workers of different versions: never rename them.
const (
	// WorkflowType is the deployment workflow's registered name.
	WorkflowType = "keelson.deployment"
	// QueryState answers the workflow's State.
	QueryState = "state"
	// SignalRelease asks a LIVE deployment's workflow to stop its app, remove
	// its route and workspace (where they live: on its worker), and end.
	SignalRelease = "release"

	activityBuild         = "keelson.deployment.build"
	activityProvision     = "keelson.deployment.provision"
	activityConfigureDNS  = "keelson.deployment.configureDNS"
	activityFinish        = "keelson.deployment.finish"
	activityRelease       = "keelson.deployment.release"
	activitySignalRelease = "keelson.deployment.signalRelease"
	activityAcquireSlot   = "keelson.deployment.acquireSlot"
	activityReleaseSlot   = "keelson.deployment.releaseSlot"
	activityPlace         = "keelson.deployment.place"
)

// versionPlacement marks workflows that choose their host (WorkerConfig.
// Placer) before BUILD: earlier histories replay without the choice.
const versionPlacement = "placement"

// versionPlacementClosed marks workflows that fail a deployment whose
// placement errs (the register unreadable) instead of building it anywhere.
const versionPlacementClosed = "placement-fails-closed"

// versionReleaseGrace marks workflows that let a replaced app serve for
// Timeouts.ReleaseGrace before stopping it.
const versionReleaseGrace = "release-grace"

// Error types of non-retryable application errors raised by the activities.
const (
	errTypeStepFailed = "StepFailed" // the build command failed, the app did not start, ...
	errTypeNotQueued  = "NotQueued"  // the deployment left QUEUED (cancelled) before BUILD began
	errTypeAppLost    = "AppLost"    // the app PROVISION started is gone: its worker restarted
)

// Input starts a deployment's workflow. It holds no project data (and so no
// secret): each activity reads the project as it is when the step starts.
type Input struct {
	DeploymentID string
	// BuildTimeout is the plan's build limit; it bounds the BUILD activity
	// (plus Timeouts.BuildGrace for the clone). 0 means 10 minutes.
	BuildTimeout time.Duration
	// Timeouts tune the activities; zero fields take the defaults.
	Timeouts Timeouts
	// SlotNoted is set when the deployment's log already says it waits for
	// its owner's share (a run continued as new while waiting).
	SlotNoted bool `json:",omitempty"`
	// BuildQueue, when set, is the host task queue BUILD must run on: a
	// rollback reuses the build kept there.
	BuildQueue string `json:",omitempty"`
}

// Timeouts of the deployment activities. The zero value takes the defaults.
type Timeouts struct {
	// Heartbeat is how long a step may go without a heartbeat before Temporal
	// declares its worker lost. Default 30s. Activities heartbeat 4 times as often.
	Heartbeat time.Duration
	// BuildGrace is added to the plan's BuildTimeout for the clone and
	// bookkeeping around the build command. Default 5m.
	BuildGrace time.Duration
	// Provision bounds starting the app and its health check. Default 5m.
	Provision time.Duration
	// DNS bounds routing. Default 1m.
	DNS time.Duration
	// HostPickup is how long a step pinned to the worker that built the
	// deployment may wait for that worker to pick it up (ScheduleToStart)
	// before the deployment is rebuilt elsewhere. Default 1m.
	HostPickup time.Duration
	// Cleanup bounds Finish and Release. Default 2m.
	Cleanup time.Duration
	// ReleaseGrace is how long a replaced deployment's app keeps serving
	// after the new one is LIVE, before it is stopped: the other hosts'
	// ingresses still forward to it until they reload their remote routes
	// (every second). Not after a cancel (a deleted deployment). Default 3s.
	ReleaseGrace time.Duration
	// BuildAttempts is how many times BUILD runs when its worker is lost
	// (a failing build command is never retried). Default 3.
	BuildAttempts int32
	// Rounds is how many times the whole BUILD -> PROVISION -> DNS sequence
	// may start over because the worker holding the build was lost. Default 3.
	Rounds int
}

func (t Timeouts) withDefaults() Timeouts {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&t.Heartbeat, 30*time.Second)
	def(&t.BuildGrace, 5*time.Minute)
	def(&t.Provision, 5*time.Minute)
	def(&t.DNS, time.Minute)
	def(&t.HostPickup, time.Minute)
	def(&t.Cleanup, 2*time.Minute)
	def(&t.ReleaseGrace, 3*time.Second)
	if t.BuildAttempts <= 0 {
		t.BuildAttempts = 3
	}
	if t.Rounds <= 0 {
		t.Rounds = 3
	}
	return t
}

// State is the workflow's own view of the deployment, answered by QueryState.
// Times are workflow times (deterministic); the database row, written by the
// activities, has the authoritative times.
type State struct {
	DeploymentID string             `json:"deploymentId"`
	Status       deployments.Status `json:"status"`
	Steps        deployments.Steps  `json:"steps"`
	// HostQueue is the task queue of the worker holding the build and the app.
	HostQueue    string `json:"hostQueue,omitempty"`
	Round        int    `json:"round"`
	ErrorMessage string `json:"errorMessage,omitempty"`
	// Released is set once a LIVE deployment's app was stopped (replaced or deleted).
	Released bool `json:"released,omitempty"`

	slot bool // the deployment may hold a build slot: ending releases it
}

// BuildResult is what the BUILD activity returns.
type BuildResult struct {
	HostQueue string // the building worker's own task queue
	// Live is set when the deployment was LIVE already: a previous round's
	// DNS step ended but its worker was lost before the workflow heard.
	Live *DNSResult `json:",omitempty"`
}

// DNSResult is what the DNS activity returns.
type DNSResult struct {
	// Superseded are the workflow ids of the project's deployments this one replaced.
	Superseded []string
}

// Workflow runs one deployment: once it holds one of its owner's build slots
// (it waits QUEUED while the owner's share is in use, see slots.go), BUILD on
// any worker, then PROVISION and DNS on the worker that built it (its
// workspace and app are local to it); LIVE, it gives the slot back and waits
// until SignalRelease or cancellation tells it to stop the app. Every
// database change is made by the activities (deployments.Activities), so the
// stored row is the same as with the embedded engine.
//
// Deterministic: no wall clock (workflow.Now), no goroutines, no map iteration.
func Workflow(ctx workflow.Context, in Input) (State, error) {
	t := in.Timeouts.withDefaults()
	buildTimeout := in.BuildTimeout
	if buildTimeout <= 0 {
		buildTimeout = 10 * time.Minute
	}
	st := &State{DeploymentID: in.DeploymentID, Status: deployments.StatusQueued, Steps: deployments.NewSteps()}
	if err := workflow.SetQueryHandler(ctx, QueryState, func() (State, error) { return st.clone(), nil }); err != nil {
		return *st, err
	}
	log := workflow.GetLogger(ctx)

	// Wait for one of the owner's build slots (see slots.go).
	if workflow.GetVersion(ctx, versionBuildSlots, workflow.DefaultVersion, 1) >= 1 {
		if err := st.waitForSlot(ctx, &in); err != nil {
			var can *workflow.ContinueAsNewError
			if errors.As(err, &can) {
				return st.clone(), err
			}
			return st.finish(ctx, t, err)
		}
	}

	for round := 1; ; round++ {
		st.Round = round
		st.HostQueue = ""
		st.Status, st.Steps = deployments.StatusQueued, deployments.NewSteps()

		br, err := st.build(ctx, in, t, buildTimeout)
		if err != nil {
			return st.finish(ctx, t, err)
		}
		if br.Live != nil {
			for _, step := range []deployments.StepName{deployments.StepProvision, deployments.StepDNS} {
				st.begin(ctx, step, deployments.StatusProvisioning)
				st.end(ctx, deployments.StepSucceeded)
			}
			st.Status = deployments.StatusLive
			st.releaseSlot(ctx)
			return st.live(ctx, t, *br.Live)
		}

		// PROVISION and DNS: pinned to the building worker. Never retried by
		// Temporal: a lost worker means the build is lost too, so the round
		// starts over from BUILD.
		hostOpts := workflow.ActivityOptions{
			TaskQueue:              br.HostQueue,
			ScheduleToStartTimeout: t.HostPickup,
			HeartbeatTimeout:       t.Heartbeat,
			WaitForCancellation:    true,
			RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
		}
		st.begin(ctx, deployments.StepProvision, deployments.StatusProvisioning)
		pOpts := hostOpts
		pOpts.StartToCloseTimeout = t.Provision
		err = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, pOpts), activityProvision, in.DeploymentID).Get(ctx, nil)
		if err == nil {
			st.end(ctx, deployments.StepSucceeded)
			st.begin(ctx, deployments.StepDNS, deployments.StatusConfiguringDNS)
			dOpts := hostOpts
			dOpts.StartToCloseTimeout = t.DNS
			var dr DNSResult
			err = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, dOpts), activityConfigureDNS, in.DeploymentID).Get(ctx, &dr)
			if err == nil {
				st.end(ctx, deployments.StepSucceeded)
				st.Status = deployments.StatusLive
				st.releaseSlot(ctx)
				return st.live(ctx, t, dr)
			}
		}
		if workerLost(err) && round < t.Rounds && ctx.Err() == nil {
			log.Warn("worker holding the build was lost; building again", "deployment", in.DeploymentID, "round", round, "err", err)
			continue // BUILD's activity re-queues the stored deployment (deployments.Activities.Recover)
		}
		return st.finish(ctx, t, err)
	}
}

// build runs BUILD on the placed host (or any worker): retried when its
// worker is lost (heartbeat timeout); a failing build command is a
// non-retryable error. A placed host that does not take it in time (it went
// away) hands it to any worker, unless the project is pinned to it.
func (st *State) build(ctx workflow.Context, in Input, t Timeouts, buildTimeout time.Duration) (BuildResult, error) {
	st.begin(ctx, deployments.StepBuild, deployments.StatusBuilding)
	p := st.place(ctx, in)
	if p.Refused != "" {
		return BuildResult{}, temporal.NewNonRetryableApplicationError("placement: "+p.Refused, errTypeStepFailed, nil)
	}
	var br BuildResult
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, buildOptions(p.Queue, t, buildTimeout)),
		activityBuild, in.DeploymentID).Get(ctx, &br)
	placed := in.BuildQueue == "" && p.Queue != "" // the Placer chose the host
	if err != nil && placed && workerLost(err) {
		if p.Pinned {
			return br, temporal.NewNonRetryableApplicationError("placement: the project's pinned host did not take the build (it went away); it is not built elsewhere", errTypeStepFailed, nil)
		}
		err = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, buildOptions("", t, buildTimeout)),
			activityBuild, in.DeploymentID).Get(ctx, &br)
	}
	if err != nil {
		return br, err
	}
	st.end(ctx, deployments.StepSucceeded)
	st.HostQueue = br.HostQueue
	return br, nil
}

// place is the host queue BUILD runs on: a rollback's is the host that
// keeps the build (in.BuildQueue); else the Placer's choice, or "" (any
// worker) without one, when it has none, or when it fails before the
// placement-fails-closed version. Refused says why no host can take it (the
// deployment fails).
func (st *State) place(ctx workflow.Context, in Input) PlaceResult {
	if in.BuildQueue != "" {
		return PlaceResult{Queue: in.BuildQueue}
	}
	if workflow.GetVersion(ctx, versionPlacement, workflow.DefaultVersion, 1) < 1 {
		return PlaceResult{}
	}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	var res PlaceResult
	if err := workflow.ExecuteLocalActivity(lctx, activityPlace, in.DeploymentID).Get(ctx, &res); err != nil {
		// Fail closed: any worker could break a pin or fill a full host.
		// Workflows that ran before this version keep going on any worker.
		if workflow.GetVersion(ctx, versionPlacementClosed, workflow.DefaultVersion, 1) == 1 {
			var app *temporal.ApplicationError
			if errors.As(err, &app) {
				return PlaceResult{Refused: app.Message()}
			}
			return PlaceResult{Refused: "the placement could not be decided"}
		}
		workflow.GetLogger(ctx).Warn("placement failed; any worker builds it", "deployment", in.DeploymentID, "err", err)
		return PlaceResult{}
	}
	return res
}

// PlaceResult is the host the placement chose ("" for any worker), or why
// no host can take the deployment (Refused).
type PlaceResult struct {
	Queue   string
	Refused string `json:",omitempty"`
	Pinned  bool   `json:",omitempty"` // the project is pinned to Queue's host
}

// buildOptions run BUILD on queue ("" is any worker of the workflow's own
// queue), retried when its worker is lost (heartbeat timeout); a failing
// build command is a non-retryable error. On a host queue (a rollback's
// kept build, or a placement) it fails once no worker took it within
// t.HostPickup (the host is gone).
func buildOptions(queue string, t Timeouts, buildTimeout time.Duration) workflow.ActivityOptions {
	var pickup time.Duration
	if queue != "" {
		pickup = t.HostPickup
	}
	return workflow.ActivityOptions{
		TaskQueue:              queue,
		ScheduleToStartTimeout: pickup,
		StartToCloseTimeout:    buildTimeout + t.BuildGrace,
		HeartbeatTimeout:       t.Heartbeat,
		WaitForCancellation:    true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        30 * time.Second,
			MaximumAttempts:        t.BuildAttempts,
			NonRetryableErrorTypes: []string{errTypeStepFailed, errTypeNotQueued},
		},
	}
}

// live waits while the deployment is LIVE: it tells the deployments it
// replaced to release their apps, then waits for its own release (a newer
// deployment went live, or the deployment is deleted: SignalRelease or
// cancellation), stops its app on its worker and ends.
func (st *State) live(ctx workflow.Context, t Timeouts, dr DNSResult) (State, error) {
	if len(dr.Superseded) > 0 {
		sctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5},
		})
		// Best effort: a replaced deployment whose workflow is gone has nothing to stop.
		_ = workflow.ExecuteActivity(sctx, activitySignalRelease, dr.Superseded).Get(ctx, nil)
	}
	release := workflow.GetSignalChannel(ctx, SignalRelease)
	sel := workflow.NewSelector(ctx)
	replaced := false
	sel.AddReceive(release, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); replaced = true })
	sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {})
	sel.Select(ctx)
	if replaced && workflow.GetVersion(ctx, versionReleaseGrace, workflow.DefaultVersion, 1) >= 1 {
		// Replaced: other ingresses may forward here for a moment more. A
		// cancel (the deployment deleted) cuts the wait short.
		_ = workflow.Sleep(ctx, t.ReleaseGrace)
	}

	dctx, cancel := workflow.NewDisconnectedContext(ctx)
	defer cancel()
	if err := st.runCleanup(dctx, t, activityRelease, st.DeploymentID); err != nil {
		return st.clone(), err
	}
	st.Released = true
	return st.clone(), nil
}

// finish records a deployment that ended without going LIVE: CANCELLED when
// the workflow was cancelled, else FAILED with the step's error. It runs on
// the building worker when there is one (Finish stops what it started there).
func (st *State) finish(ctx workflow.Context, t Timeouts, cause error) (State, error) {
	cancelled := temporal.IsCanceledError(cause) || errors.Is(ctx.Err(), workflow.ErrCanceled) || isType(cause, errTypeNotQueued)
	msg := ""
	if !cancelled {
		msg = causeMessage(cause)
	}
	st.end(ctx, deployments.StepFailed)
	for i := range st.Steps {
		if st.Steps[i].Status == deployments.StepPending {
			st.Steps[i].Status = deployments.StepSkipped
		}
	}
	if cancelled {
		st.Status = deployments.StatusCancelled
	} else {
		st.Status, st.ErrorMessage = deployments.StatusFailed, msg
	}
	// A cancelled workflow's context is done: record the end on a disconnected one.
	dctx, cancel := workflow.NewDisconnectedContext(ctx)
	defer cancel()
	err := st.runCleanup(dctx, t, activityFinish, FinishInput{DeploymentID: st.DeploymentID, Cancelled: cancelled, Message: msg})
	st.releaseSlot(dctx) // after Finish stopped what the deployment ran
	if err != nil {
		return st.clone(), err
	}
	if cancelled {
		// End as cancelled (the client sees a CanceledError), after recording it.
		if ctx.Err() != nil {
			return st.clone(), ctx.Err()
		}
		return st.clone(), nil
	}
	return st.clone(), temporal.NewNonRetryableApplicationError(msg, errTypeStepFailed, nil)
}

// runCleanup runs a cleanup activity on the worker holding the deployment's
// resources, or on any worker when there is none or it is gone.
func (st *State) runCleanup(ctx workflow.Context, t Timeouts, activity string, arg any) error {
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: t.Cleanup,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5},
	}
	if st.HostQueue != "" {
		hopts := opts
		hopts.TaskQueue = st.HostQueue
		hopts.ScheduleToStartTimeout = t.HostPickup
		err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, hopts), activity, arg).Get(ctx, nil)
		if !workerLost(err) {
			return err
		}
		// The worker is gone, and its processes with it: record the end anywhere.
	}
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activity, arg).Get(ctx, nil)
}

// FinishInput is the argument of the finish activity.
type FinishInput struct {
	DeploymentID string
	Cancelled    bool
	Message      string
}

// begin marks step RUNNING at workflow time.
func (st *State) begin(ctx workflow.Context, step deployments.StepName, status deployments.Status) {
	now := workflow.Now(ctx).UTC()
	st.Status = status
	if s := st.Steps.Get(step); s != nil {
		s.Status, s.StartedAt, s.FinishedAt = deployments.StepRunning, &now, nil
	}
}

// end gives the running step its final status.
func (st *State) end(ctx workflow.Context, status deployments.StepStatus) {
	if s := st.Steps.Running(); s != nil {
		now := workflow.Now(ctx).UTC()
		s.Status, s.FinishedAt = status, &now
	}
}

func (st *State) clone() State {
	c := *st
	c.Steps = append(deployments.Steps(nil), st.Steps...)
	return c
}

// workerLost reports whether err means the worker running (or meant to run)
// an activity is gone: it stopped heart-beating, or never picked the task up.
// An AppLost step is a lost worker seen from the other side: the worker
// came back (same host queue) without the app PROVISION started. No older
// history has that error type, so replay is unchanged.
func workerLost(err error) bool {
	if isType(err, errTypeAppLost) {
		return true
	}
	var te *temporal.TimeoutError
	if !errors.As(err, &te) {
		return false
	}
	switch te.TimeoutType() {
	case enumspb.TIMEOUT_TYPE_HEARTBEAT, enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
		return true
	}
	return false
}

func isType(err error, typ string) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == typ
}

// causeMessage is the text recorded as the deployment's failure: the
// activity's own message, without Temporal's wrapping.
func causeMessage(err error) string {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return ae.Message()
	}
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		switch te.TimeoutType() {
		case enumspb.TIMEOUT_TYPE_HEARTBEAT:
			return "the worker running the step was lost"
		case enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
			return "no worker picked the step up in time"
		default:
			return "the step timed out"
		}
	}
	if err == nil {
		return "deployment failed"
	}
	return err.Error()
}
