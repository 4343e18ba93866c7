package temporal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// activities adapts deployments.Activities (the step bodies every engine
// shares) to Temporal: heartbeats, error classification, the worker's own
// task queue, and resuming a deployment whose previous worker was lost.
type activities struct {
	acts      *deployments.Activities
	store     WorkerStore
	rt        deployments.Runtime
	client    client.Client
	hostQueue string
	log       *slog.Logger
	perUser   int                    // an owner's share without Shares (or when it fails)
	shares    deployments.Shares     // optional
	slots     deployments.SlotPolicy // the build slots across every worker
	lease     time.Duration          // of a build slot, before its holder is checked
	placer    Placer                 // optional
}

// place asks the Placer for the deployment's host and notes its reason in
// the deployment's log. Without a Placer, any worker; a refusal (no host
// can take it) is returned for the workflow to fail it. An error (the
// register or the store could not be read or written) is returned too:
// the workflow retries, then fails the deployment rather than let any
// worker take it past a pin or a full host.
func (a *activities) place(ctx context.Context, id string) (PlaceResult, error) {
	if a.placer == nil {
		return PlaceResult{}, nil
	}
	p, err := a.placer.Place(ctx, id)
	if err != nil {
		a.log.Warn("placement failed", "deployment", id, "err", err)
		return PlaceResult{}, fmt.Errorf("the hosts register could not be read: %w", err)
	}
	if p.Refused {
		return PlaceResult{Refused: p.Reason}, nil
	}
	if p.Queue != "" {
		// Counted as placed there (Placer's load) from now, not only once it runs.
		if err := a.store.DeploymentSetHost(ctx, id, p.Queue); err != nil {
			a.log.Warn("recording the placement failed", "deployment", id, "err", err)
			return PlaceResult{}, fmt.Errorf("the placement could not be recorded: %w", err)
		}
	}
	if p.Reason != "" {
		a.acts.Note(ctx, id, p.Reason)
	}
	return PlaceResult{Queue: p.Queue, Pinned: p.Pinned}, nil
}

// build runs BUILD and returns this worker's own task queue, where PROVISION
// and DNS must run (the workspace is here).
func (a *activities) build(ctx context.Context, id string) (BuildResult, error) {
	d, err := a.store.DeploymentGet(ctx, id)
	if err != nil {
		return BuildResult{}, err
	}
	if d.Status == deployments.StatusLive && !d.CancelRequested && d.Host != "" {
		// A round started again after its DNS step made the deployment LIVE:
		// the worker was lost before Temporal heard the step end. The
		// deployment stays LIVE (its worker starts the app again, see
		// Worker.restartLive); the workflow goes on as after DNS.
		live, err := a.resumeLive(ctx, d)
		return BuildResult{HostQueue: d.Host, Live: live}, err
	}
	if d.CancelRequested || d.Status.Terminal() {
		return BuildResult{}, temporal.NewNonRetryableApplicationError("deployment is no longer queued", errTypeNotQueued, nil)
	}
	if d.Status != deployments.StatusQueued {
		// A previous attempt (or round) was lost with its worker: put the
		// deployment back to QUEUED (releasing what this worker may hold),
		// counting the attempt, the same way a server restart does.
		if err := a.acts.Recover(ctx, id, d.Attempt+1); err != nil {
			return BuildResult{}, err
		}
	}
	stop := heartbeat(ctx)
	err = a.acts.Build(ctx, id)
	stop()
	if err != nil {
		// The workspace is on this worker: remove it here, whatever the
		// workflow records next (and wherever it records it).
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if cerr := errors.Join(a.rt.Stop(cctx, id), a.rt.Cleanup(cctx, id)); cerr != nil {
			a.log.Error("clean up after failed build", "deployment", id, "err", cerr)
		}
		return BuildResult{}, a.stepError(ctx, err)
	}
	return BuildResult{HostQueue: a.hostQueue}, nil
}

func (a *activities) provision(ctx context.Context, id string) error {
	stop := heartbeat(ctx)
	defer stop()
	// Recorded first: a worker started again after a crash finds its apps by it.
	if err := a.store.DeploymentSetHost(ctx, id, a.hostQueue); err != nil {
		return err
	}
	return a.stepError(ctx, a.acts.Provision(ctx, id))
}

// configureDNS routes the deployment and returns the workflow ids of the
// project's deployments it replaced: their apps may run on other workers, so
// the workflow asks each of them to release its own.
func (a *activities) configureDNS(ctx context.Context, id string) (DNSResult, error) {
	stop := heartbeat(ctx)
	defer stop()
	if !a.rt.Running(id) {
		// This worker started again after PROVISION ended: it stopped the
		// processes and containers its earlier run left, this app among
		// them. Routing to it would serve a LIVE deployment with a 502; the
		// workflow builds it again instead. The stored row is untouched (the
		// next round's BUILD re-queues it).
		msg := "the app PROVISION started is not running on this host (its worker restarted and stopped it); building again"
		a.acts.Note(ctx, id, msg)
		return DNSResult{}, temporal.NewNonRetryableApplicationError(msg, errTypeAppLost, nil)
	}
	d, err := a.store.DeploymentGet(ctx, id)
	if err != nil {
		return DNSResult{}, err
	}
	before, err := a.store.DeploymentsWhere(ctx, deployments.Filter{ProjectID: d.ProjectID, Statuses: []deployments.Status{deployments.StatusLive}})
	if err != nil {
		return DNSResult{}, err
	}
	if err := a.acts.ConfigureDNS(ctx, id); err != nil {
		return DNSResult{}, a.stepError(ctx, err)
	}
	var res DNSResult
	for _, old := range before {
		if old.ID == id || old.Status != deployments.StatusLive {
			continue
		}
		now, err := a.store.DeploymentGet(ctx, old.ID)
		if err == nil && now.SupersededBy == id {
			res.Superseded = append(res.Superseded, workflowID(now))
		}
	}
	return res, nil
}

// resumeLive finishes what the DNS step of the LIVE deployment d may not
// have done before its worker was lost, supersede the project's older LIVE
// deployments, and returns the workflows to release, as the step would.
func (a *activities) resumeLive(ctx context.Context, d *deployments.Deployment) (*DNSResult, error) {
	if err := a.acts.Supersede(ctx, d.ID); err != nil {
		return nil, err
	}
	all, err := a.store.DeploymentsWhere(ctx, deployments.Filter{ProjectID: d.ProjectID, Statuses: []deployments.Status{deployments.StatusCancelled}})
	if err != nil {
		return nil, err
	}
	res := &DNSResult{}
	for _, old := range all {
		if old.SupersededBy == d.ID {
			res.Superseded = append(res.Superseded, workflowID(old))
		}
	}
	return res, nil
}

// finish records the end of a deployment that did not go LIVE.
func (a *activities) finish(ctx context.Context, in FinishInput) error {
	var cause error = context.Canceled
	if !in.Cancelled {
		cause = errors.New(in.Message)
	}
	if in.Cancelled {
		// The workflow was cancelled: make sure the record says it was asked,
		// so Finish ends it CANCELLED even if the API did not get to note it.
		if err := a.store.DeploymentRequestCancel(ctx, in.DeploymentID); err != nil {
			return err
		}
	}
	return a.acts.Finish(ctx, in.DeploymentID, cause)
}

// release stops a LIVE (or replaced) deployment's app on this worker and
// removes its route and workspace.
func (a *activities) release(ctx context.Context, id string) error {
	d, err := a.store.DeploymentGet(ctx, id)
	if errors.Is(err, platform.ErrNotFound) {
		// Deleted meanwhile: stop whatever still runs under its id.
		d = &deployments.Deployment{ID: id}
	} else if err != nil {
		return err
	}
	return a.acts.Release(ctx, d)
}

// signalRelease asks the given workflows to release their apps.
func (a *activities) signalRelease(ctx context.Context, workflowIDs []string) error {
	var errs []error
	for _, wid := range workflowIDs {
		err := a.client.SignalWorkflow(ctx, wid, "", SignalRelease, nil)
		var nf *serviceerror.NotFound
		if err != nil && !errors.As(err, &nf) {
			errs = append(errs, fmt.Errorf("signal %s: %w", wid, err))
		}
	}
	return errors.Join(errs...)
}

// stepError classifies a step's error for Temporal: cancellation stays
// cancellation; a deployment that left QUEUED is final; anything else the step
// reported (a failing build command, an app that never answered) is a
// non-retryable failure whose message becomes the deployment's errorMessage.
func (a *activities) stepError(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()), errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, deployments.ErrNotQueued):
		return temporal.NewNonRetryableApplicationError("deployment is no longer queued", errTypeNotQueued, nil)
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), errTypeStepFailed, nil)
}

// heartbeat records a heartbeat now and then until stop is called, so a lost
// worker is detected within the activity's HeartbeatTimeout and a cancellation
// reaches ctx (the SDK delivers it in a heartbeat's response).
func heartbeat(ctx context.Context) (stop func()) {
	info := activity.GetInfo(ctx)
	every := info.HeartbeatTimeout / 4
	if every <= 0 {
		every = 5 * time.Second
	}
	activity.RecordHeartbeat(ctx)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done); <-exited }
}

// workflowID is the Temporal workflow id of a deployment: its workflowName.
func workflowID(d *deployments.Deployment) string {
	if d.WorkflowName != "" {
		return d.WorkflowName
	}
	return WorkflowID(d.ID)
}

// WorkflowID is the workflow id of deployment id: the workflowName the
// deployments service gives it ("deploy-<id>"), which StartWorkflow keeps.
func WorkflowID(id string) string { return "deploy-" + id }
