package temporal

import (
	"context"
	"errors"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Build slots: the fair-share rules of deployments.SlotPolicy hold across
// every worker: WorkerConfig.BuildSlots build at once in all, one owner at
// most their share, FREE owners together at most WorkerConfig.FreeSlots, and
// a free slot goes to a priority owner, then to the owner with the fewest
// running, then to the oldest request. The state is the rows of
// deployments.BuildSlot in the shared database, holders and waiters alike,
// read and written in one transaction under one lock (Store.BuildSlotAcquire),
// never one worker's memory. A deployment asks before BUILD and gives its
// slot back once LIVE or ended, which hands the free slots to the best
// waiters at once; a waiting deployment stays QUEUED, says why once in its
// log, and asks again on a timer (finding its slot given, or giving free
// slots to whoever is first).
//
// A slot is never held for ever: the workflow releases it on a disconnected
// context whatever ended it (success, failure, cancellation, timeouts; a lost
// worker only moves the steps to another worker); a slot whose deployment is
// LIVE, ended or deleted counts as free; a slot whose lease ran out is freed
// when its workflow no longer runs (terminated); and a waiter that stopped
// asking leaves the queue. See acquireSlot.

// versionBuildSlots marks workflows that take a build slot: histories
// recorded before slots existed replay without one.
const versionBuildSlots = "build-slots"

const (
	// slotPollMin and slotPollMax bound the wait between two tries for a slot:
	// from the first, doubling up to the second.
	slotPollMin = time.Second
	slotPollMax = 5 * time.Second
	// slotWaitLease is the least time a waiting deployment stays in the
	// queue without asking again (it asks every slotPollMax at most).
	slotWaitLease = 4 * slotPollMax
	// slotWaitHistory is the history length past which a deployment still
	// waiting for a slot continues as new (as it does when Temporal suggests
	// it), so a long wait (about 6 events a try) keeps its history short.
	slotWaitHistory = 5000
)

// SlotInput is the argument of the acquireSlot activity.
type SlotInput struct {
	DeploymentID string
	// Note asks for the log line saying the deployment waits, if it does.
	Note bool
}

// SlotResult is what the acquireSlot activity returns.
type SlotResult struct {
	Granted bool
	// Running is how many of the owner's deployments hold a slot.
	Running int
}

// waitForSlot returns once the deployment holds one of its owner's build
// slots. It returns a cancellation (the workflow was cancelled while it
// waited), a NotQueued error (the deployment left QUEUED meanwhile), or a
// ContinueAsNewError when the wait has grown the history.
//
// The tries are local activities: they take no activity slot of a worker
// (a tenant's waiting deployments must not fill the workers) and add one
// marker to the history each.
func (st *State) waitForSlot(ctx workflow.Context, in *Input) error {
	st.slot = true // a try that took a slot may not have answered: ending releases it
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: 5 * time.Minute,
		StartToCloseTimeout:    30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        30 * time.Second,
			NonRetryableErrorTypes: []string{errTypeNotQueued},
		},
	})
	wait := slotPollMin
	for {
		var res SlotResult
		try := SlotInput{DeploymentID: in.DeploymentID, Note: !in.SlotNoted}
		if err := workflow.ExecuteLocalActivity(lctx, activityAcquireSlot, try).Get(ctx, &res); err != nil {
			return err
		}
		if res.Granted {
			return nil
		}
		in.SlotNoted = true
		if info := workflow.GetInfo(ctx); info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() >= slotWaitHistory {
			return workflow.NewContinueAsNewError(ctx, WorkflowType, *in)
		}
		if err := workflow.Sleep(ctx, wait); err != nil {
			return err
		}
		wait = min(2*wait, slotPollMax)
	}
}

// releaseSlot gives the deployment's build slot back, if it may hold one, on
// a disconnected context (a cancelled workflow releases too). Best effort: a
// slot whose deployment is LIVE or ended counts as free anyway.
func (st *State) releaseSlot(ctx workflow.Context) {
	if !st.slot {
		return
	}
	dctx, cancel := workflow.NewDisconnectedContext(ctx)
	defer cancel()
	lctx := workflow.WithLocalActivityOptions(dctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5},
	})
	if err := workflow.ExecuteLocalActivity(lctx, activityReleaseSlot, st.DeploymentID).Get(dctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("release build slot; its owner's next try frees it", "deployment", st.DeploymentID, "err", err)
	}
	st.slot = false
}

// acquireSlot asks a build slot for the deployment (deployments.Store's
// queue, under the fair-share rules). When it still waits, the held slots
// whose lease ran out are checked: one whose workflow no longer runs is
// freed (and the ask made again), the others' leases renewed.
func (a *activities) acquireSlot(ctx context.Context, in SlotInput) (SlotResult, error) {
	notQueued := temporal.NewNonRetryableApplicationError("deployment is no longer queued", errTypeNotQueued, nil)
	d, err := a.store.DeploymentGet(ctx, in.DeploymentID)
	if errors.Is(err, platform.ErrNotFound) {
		return SlotResult{}, notQueued
	}
	if err != nil {
		return SlotResult{}, err
	}
	if d.CancelRequested || d.Status.Terminal() {
		return SlotResult{}, notQueued
	}
	req := deployments.SlotRequest{DeploymentID: d.ID, OwnerID: d.OwnerID, Share: a.share(ctx, d.OwnerID),
		Lease: a.lease, WaitLease: max(a.lease, slotWaitLease)}
	ans, err := a.store.BuildSlotAcquire(ctx, req, a.slots)
	if err == nil && !ans.Granted && a.reap(ctx, ans.Expired) {
		ans, err = a.store.BuildSlotAcquire(ctx, req, a.slots)
	}
	if err != nil {
		return SlotResult{}, err
	}
	if !ans.Granted && in.Note {
		a.acts.Note(ctx, d.ID, ans.Wait.Note(a.slots))
	}
	return SlotResult{Granted: ans.Granted, Running: ans.Wait.Running}, nil
}

// releaseSlot frees the deployment's build slot and hands the free slots on.
func (a *activities) releaseSlot(ctx context.Context, id string) error {
	return a.store.BuildSlotRelease(ctx, id, a.slots, a.lease)
}

// share is owner's share: their plan's, or the default (counted as FREE)
// when there is no Shares or it fails.
func (a *activities) share(ctx context.Context, owner string) deployments.Share {
	if a.shares == nil {
		return deployments.DefaultShare(a.perUser)
	}
	sh, err := a.shares.BuildShare(ctx, owner)
	if err != nil {
		a.log.Warn("read build share; using the default", "owner", owner, "err", err)
		return deployments.DefaultShare(a.perUser)
	}
	return sh
}

// reap checks the held slots whose lease ran out: one whose workflow no
// longer runs is freed, the others' leases are renewed. It reports whether
// it freed any.
func (a *activities) reap(ctx context.Context, expired []deployments.BuildSlot) bool {
	freed := false
	for _, s := range expired {
		running, err := a.workflowRunning(ctx, WorkflowID(s.DeploymentID))
		switch {
		case err != nil:
			a.log.Warn("check a build slot's workflow", "deployment", s.DeploymentID, "err", err)
			continue
		case running:
			err = a.store.BuildSlotRenew(ctx, s.DeploymentID, time.Now().Add(a.lease))
		default:
			a.log.Info("freeing the build slot of a workflow that ended without releasing it", "deployment", s.DeploymentID)
			err = a.store.BuildSlotRelease(ctx, s.DeploymentID, a.slots, a.lease)
			freed = freed || err == nil
		}
		if err != nil {
			a.log.Warn("update a build slot", "deployment", s.DeploymentID, "err", err)
		}
	}
	return freed
}

// workflowRunning reports whether workflow id (its latest run) is running.
func (a *activities) workflowRunning(ctx context.Context, id string) (bool, error) {
	desc, err := a.client.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}
