package temporal

import (
	"context"
	"errors"

	"github.com/keelson-dev/keelson/deployments"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// ControlRuntime is the deployments.Runtime of API replicas when workers run
// the steps: the apps live on the workers, so stopping one is asking its
// workflow to release it (SignalRelease) and waiting until it did. Build,
// Start and Route are refused: they only ever run on workers.
//
// Wire it into the deployments.Activities the deployments.Service uses on an
// API replica (delete and project teardown call Release); workers build their
// Activities over the real runtime.
type ControlRuntime struct {
	Client client.Client
}

var _ deployments.Runtime = ControlRuntime{}

var errWorkerOnly = errors.New("temporal: steps run on Temporal workers, not on API replicas")

// Build is refused: BUILD runs on workers.
func (ControlRuntime) Build(context.Context, deployments.Job, deployments.LogSink) (string, error) {
	return "", errWorkerOnly
}

// Start is refused: PROVISION runs on workers.
func (ControlRuntime) Start(context.Context, deployments.Job, deployments.LogSink) (string, error) {
	return "", errWorkerOnly
}

// Route is refused: DNS runs on workers.
func (ControlRuntime) Route(context.Context, string, string, string) (string, error) {
	return "", errWorkerOnly
}

// Unroute is part of the release Stop asks for.
func (ControlRuntime) Unroute(context.Context, string, string) error { return nil }

// Cleanup is part of the release Stop asks for.
func (ControlRuntime) Cleanup(context.Context, string) error { return nil }

// Running is false: no app runs on an API replica.
func (ControlRuntime) Running(string) bool { return false }

// Reuse is never called on the API side (a rollback's BUILD runs on the
// worker that holds the build); ControlRuntime offers it so the API takes
// rollbacks, which every worker's runtime serves.
func (ControlRuntime) Reuse(context.Context, string, deployments.Job) error {
	return errors.New("temporal: Reuse runs on a worker")
}

// Stop asks the deployment's workflow, if it still runs (a LIVE deployment),
// to stop its app, unroute and clean up on its worker, and waits until it
// ended. A workflow that is not running has nothing running.
func (r ControlRuntime) Stop(ctx context.Context, deploymentID string) error {
	id := WorkflowID(deploymentID)
	desc, err := r.Client.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil
	}
	if err != nil {
		return err
	}
	if desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return nil
	}
	if err := r.Client.SignalWorkflow(ctx, id, "", SignalRelease, nil); err != nil && !errors.As(err, &nf) {
		return err
	}
	err = r.Client.GetWorkflow(ctx, id, "").Get(ctx, nil)
	if errors.As(err, &nf) || err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil // it ended (failed or cancelled): nothing runs
}
